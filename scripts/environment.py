import pandas as pd

from headroom.environment import describe
from headroom.stage import run_stage


def main(stage):
    row = describe(stage.device)
    stage.log.info("environment: %s", row)
    stage.write("environment", pd.DataFrame([row]))


run_stage(snakemake, main)
