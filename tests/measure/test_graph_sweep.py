"""The graph-sweep stage: skipped rows without CUDA, speedups from hand-made rows, a sweep on CUDA."""

import numpy as np
import pandas as pd
import pytest

from headroom.families.attention import graph_sweep
from tests.measure.measure_helpers import PARTITION, cuda_candidates, cuda_only, tiny_candidates


def test_graph_sweep_speedups_on_hand_made_rows():
    rows = pd.DataFrame(
        [
            {
                "shape_key": "s",
                "regime": "0.25xL2",
                "regime_multiple": 0.25,
                "mode": m,
                "fused": f,
                "median_us": us,
                "status": "ok",
            }
            for m, f, us in (
                ("eager", False, 30.0),
                ("eager", True, 10.0),
                ("graph", False, 11.0),
                ("graph", True, 10.0),
            )
        ]
    )
    table = graph_sweep.speedup_table(rows).iloc[0]
    assert table["eager_speedup"] == pytest.approx(3.0) and table["graph_speedup"] == pytest.approx(1.1)


def test_graph_sweep_skips_without_cuda():
    df = graph_sweep.run(tiny_candidates(), {}, PARTITION, device="interpret")
    cfg = graph_sweep.settings({})
    assert len(df) == len(cfg["shapes"]) * len(cfg["regimes_l2"]) * 2 * 2
    assert (df["status"] == "skipped").all() and df["reason"].str.contains("no CUDA").all()
    assert df["median_us"].isna().all() and df["working_set_bytes"].isna().all()
    assert set(df["regime"]) == {"0.25xL2", "0.5xL2", "2xL2", "8xL2"}
    assert graph_sweep.fusion_speedups(df).empty


@pytest.mark.gpu
@cuda_only
def test_graph_sweep_on_cuda():
    part = {"heads_q": 8, "heads_kv": 2, "head_dim": 64, "dtype": "bfloat16"}
    df = graph_sweep.run(cuda_candidates(), {"reps": 10, "regimes_l2": [0.5, 4.0]}, part, device="cuda")
    assert (df["status"] == "ok").all() and (df["median_us"] > 0).all()
    assert set(df["residency"]) == {"l2-resident", "spilled"}
    assert np.isfinite(df["fusion_speedup"]).all()
