from headroom.candidates import build
from headroom.stage import run_stage


def main(stage):
    stage.write("candidates", build(stage.params["tiles"], stage.params["fusion"], stage.params["native"]))


run_stage(snakemake, main)
