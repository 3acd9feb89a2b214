from headroom.core.stage import run_stage
from headroom.measure.candidates import build


def main(stage):
    stage.write("candidates", build(stage.params["tiles"], stage.params["fusion"], stage.params["native"]))


run_stage(snakemake, main)
