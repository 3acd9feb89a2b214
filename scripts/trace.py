from headroom.core.stage import run_stage
from headroom.trace.invocations import build, clip_note, describe_text


def main(stage):
    # Relative request-log paths resolve against the working directory: the project root.
    trace, provenance = build(stage.params["trace"], stage.params["partition"], base_dir=".")
    stage.log.info("invocation mix:\n%s", describe_text(trace, extra=provenance))
    note = clip_note(provenance)
    if note and note.startswith("warning: "):
        stage.log.warning(note.removeprefix("warning: "))
    stage.write("trace", trace, extra_provenance=provenance)


run_stage(snakemake, main)
