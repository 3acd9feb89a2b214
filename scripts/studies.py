from pathlib import Path

from headroom.core.stage import run_stage


def main(stage):
    from headroom.report import studies

    paths = studies.build(stage.input_path("catalog"), Path(stage.output_path("html")).parent)
    stage.log.info("studies page: %s", ", ".join(str(p) for p in paths.values()))


run_stage(snakemake, main)
