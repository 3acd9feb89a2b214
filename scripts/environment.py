import pandas as pd

from headroom.core.stage import run_stage
from headroom.measure import device
from headroom.measure.environment import describe


def main(stage):
    row = describe(stage.device)
    stage.log.info("environment: %s", row)
    stage.write("environment", pd.DataFrame([row]))


run_stage(snakemake, main, device=device)
