from headroom.core.stage import run_stage
from headroom.trace.invocations import build, describe_text


def main(stage):
    # Relative request-log paths resolve against the working directory: the project root.
    trace, provenance = build(stage.params["trace"], stage.params["partition"], base_dir=".")
    stage.log.info("invocation mix:\n%s", describe_text(trace, extra=provenance))
    stage.write("trace", trace, extra_provenance=provenance)


run_stage(snakemake, main)
