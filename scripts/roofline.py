from headroom.core.stage import run_stage


def main(stage):
    from headroom.analysis import roofline

    calibration = stage.read("calibration")
    environment = stage.read("environment")
    l2_bytes = roofline.l2_bytes_of(environment, calibration)
    sm_count = roofline.sm_count_of(environment)
    if l2_bytes is None:
        stage.log.warning("L2 size unknown (environment and calibration): nothing is modelled as L2-resident")
    table = roofline.predict(
        stage.read("trace"),
        stage.read("candidates"),
        calibration,
        l2_bytes=l2_bytes,
        timings=stage.read_all("portfolio"),
        cold=bool(stage.params["flush_l2"]),
        sm_count=sm_count,
    )
    skipped = table[table["status"] != "ok"]
    if len(skipped):
        stage.log.warning(
            "%d of %d rows without a prediction: %s", len(skipped), len(table), skipped["reason"].iloc[0]
        )
    stage.write("roofline", table)


run_stage(snakemake, main)
