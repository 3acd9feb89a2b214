from headroom.core.replay import import_artifact
from headroom.core.stage import run_stage


def main(stage):
    src, dest = stage.input_path("recorded"), stage.output_path("artifact")
    name = f"{stage.wildcards['artifact']}.parquet"  # its path in the recorded folder and the study's
    # the recorded folder's kept sources it names come along (headroom.core.replay.SOURCES)
    stage.log.info("replayed %s -> %s (blake3 %s)", src, dest, import_artifact(src, dest, name))


run_stage(snakemake, main)
