from pathlib import Path

from headroom.core.catalog import build
from headroom.core.stage import run_stage


def main(stage):
    out = Path(stage.output_path("catalog"))
    counts = build(stage.input_paths("artifacts"), out, project_root=Path.cwd())
    stage.log.info("catalog %s: %s", out, counts)


run_stage(snakemake, main)
