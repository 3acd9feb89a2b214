from headroom.core.stage import run_stage
from headroom.trace.step_table import build, table


def main(stage):
    # Relative request-log paths resolve against the working directory: the project root.
    steps = build(stage.params["trace"], stage.params["partition"], base_dir=".")
    kinds = {str(k): int(v) for k, v in steps["kind"].value_counts().sort_index().items()}
    stage.log.info("%d engine steps in the trace window: %s", len(steps), kinds)
    stage.write("steps", table(steps), extra_provenance={"steps": len(steps), "by_kind": kinds})


run_stage(snakemake, main)
