from headroom.core.replay import import_artifact
from headroom.core.stage import run_stage


def main(stage):
    src, dest = stage.input_path("recorded"), stage.output_path("artifact")
    stage.log.info("replayed %s -> %s (blake3 %s)", src, dest, import_artifact(src, dest))


run_stage(snakemake, main)
