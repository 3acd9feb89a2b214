from headroom.stage import run_stage


def main(stage):
    from headroom import calibrate

    stage.write("calibration", calibrate.run(stage.params["calibrate"], device=stage.device, log=stage.log))


run_stage(snakemake, main)
