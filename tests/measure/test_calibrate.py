"""The calibration stage: skipped rows without CUDA, bandwidths and L2 on CUDA."""

import pytest

from headroom.measure import calibrate
from tests.measure.measure_helpers import cuda_only


def test_calibrate_skips_without_cuda():
    cal = calibrate.run({}, device="interpret")
    assert set(cal["name"]) == set(calibrate.NAMES)
    assert (cal["status"] == "skipped").all() and cal["value"].isna().all() and (cal["reason"] != "").all()


@pytest.mark.gpu
@cuda_only
def test_calibrate_on_cuda():
    cal = calibrate.run({"reps": 10, "matmul_n": 4096}, device="cuda").set_index("name")
    assert (cal["status"] == "ok").all()
    assert 1e11 < cal.loc["hbm_bytes_per_s", "value"] < cal.loc["l2_bytes_per_s", "value"]
    assert cal.loc["hbm_bytes_per_s", "working_set_bytes"] > cal.loc["l2_bytes", "value"]
    assert cal.loc["l2_bytes_per_s", "working_set_bytes"] <= cal.loc["l2_bytes", "value"]
