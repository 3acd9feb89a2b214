from headroom.core.stage import run_stage
from headroom.measure import device


def main(stage):
    from headroom.measure import calibrate

    stage.write("calibration", calibrate.run(stage.params["calibrate"], device=stage.device, log=stage.log))


run_stage(snakemake, main, device=device)
