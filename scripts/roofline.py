from headroom.core.stage import run_stage


def main(stage):
    from headroom.analysis import family_roofline, roofline
    from headroom.core.contracts import ATTENTION, family_of

    calibration = stage.read("calibration")
    environment = stage.read("environment")
    l2_bytes = roofline.l2_bytes_of(environment, calibration)
    sm_count = roofline.sm_count_of(environment)
    if l2_bytes is None:
        stage.log.warning("L2 size unknown (environment and calibration): nothing is modelled as L2-resident")
    trace = stage.read("trace")
    if family_of(trace) != ATTENTION:  # a family's roofline: from what it says each call costs
        table = family_roofline.predict(
            trace, stage.read("candidates"), calibration, l2_bytes=l2_bytes,
            timings=stage.read_all("portfolio"), cold=bool(stage.params["flush_l2"]),
        )  # fmt: skip
        _log_skipped(stage, table)
        stage.write("roofline", table)
        return
    table = roofline.predict(
        trace,
        stage.read("candidates"),
        calibration,
        l2_bytes=l2_bytes,
        timings=stage.read_all("portfolio"),
        cold=bool(stage.params["flush_l2"]),
        sm_count=sm_count,
    )
    _log_skipped(stage, table)
    stage.write("roofline", table)


def _log_skipped(stage, table):
    skipped = table[table["status"] != "ok"]
    if len(skipped):
        stage.log.warning(
            "%d of %d rows without a prediction: %s", len(skipped), len(table), skipped["reason"].iloc[0]
        )


run_stage(snakemake, main)
