"""What was measured, as arrays (decide/measured.py): one mode's runs as (run, invocation,
candidate) matrices, the chronological train/validation/test split, the fusion arms, seeded draws
and the options' checks."""

from __future__ import annotations

import numpy as np
import pytest

from headroom.core import defaults
from headroom.decide import measured
from tests import analysis_sets as S


def _latency(key, tile, fused, run, mode, inv):
    return S.BASE_US[key] * (1 + tile) * (0.5 if fused else 1.0) + run


def test_mode_data_stacks_each_runs_matrix_in_trace_order():
    tr = S.trace("ACB")
    (md,) = measured.mode_data(tr, S.timings(tr, _latency, runs=(1, 2)))
    assert md.mode == "eager" and md.runs == [1, 2] and md.us.shape == (2, 3, 2 * S.TILES)
    j = md.names.index("t1-fused")
    np.testing.assert_allclose(md.us[:, :, j], [[101.0, 51.0, 401.0], [102.0, 52.0, 402.0]])
    assert md.features["shape_key"].tolist() == ["A", "C", "B"]
    assert md.fused[j] and md.base[j] == 1 and not md.native.any()
    assert md.arms() == measured.FUSION_ARMS


def test_a_candidate_missing_somewhere_is_dropped_and_bad_timings_are_named():
    tr = S.trace("AC")
    tm = S.timings(tr, _latency, runs=(1, 2))
    gone = tm[~((tm["run"] == 2) & (tm["candidate"] == "t0-unfused") & (tm["invocation"] == 1))]
    (md,) = measured.mode_data(tr, gone)
    assert "t0-unfused" not in md.names and md.dropped == ["t0-unfused"]
    with pytest.raises(ValueError, match="duplicate"):
        measured.mode_data(tr, tm.iloc[[0, 0]])
    with pytest.raises(ValueError, match="median_us must be positive"):
        measured.mode_data(tr, tm.assign(median_us=0.0))


def test_the_split_is_chronological_with_validation_at_the_end_of_train():
    assert measured.split(10, 0.5, 0.34) == (5, 3)  # train [0, 5), fit [0, 3), validation [3, 5)
    assert measured.split(7, 0.5, 0.34) == (3, 1)
    assert measured.split(1, 0.5, 0.34)[0] == 0  # too short to train: callers refuse it


def test_arms_and_seeded_draws():
    assert measured.in_arm("on", fused=True, native=False) and not measured.in_arm("off", True, False)
    assert measured.in_arm("free", fused=False, native=False) and measured.in_arm("free", False, True)
    assert not measured.in_arm("off", fused=False, native=True)  # RoPE fusion is ours: natives have none
    assert not measured.in_arm("free", False, True, natives=False)  # where natives do not compete
    a, b = measured.group_seed(0, "graph", 1).random(3), measured.group_seed(0, "graph", 1).random(3)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, measured.group_seed(0, "graph", 2).random(3))


def test_options_default_to_the_study_and_refuse_what_they_cannot_use():
    opts = measured.Options.from_mapping({})
    assert opts.clusters == defaults.value("policies", "clusters")
    assert opts.validation_fraction == defaults.value("policies", "validation_fraction")
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['train_fraction'\]"):
        measured.Options.from_mapping({"train_fraction": 0.5})
    with pytest.raises(ValueError, match="options.clusters must be a positive integer"):
        measured.Options.from_mapping({"clusters": 0})
    with pytest.raises(ValueError, match="options.confidence"):
        measured.Options.from_mapping({"confidence": 0.4})


def test_weights_and_strata_of_a_trace():
    tr = S.trace("ACCA")
    np.testing.assert_array_equal(measured.weights_of(tr), [1.0, 1.0, 1.0, 1.0])
    np.testing.assert_array_equal(
        measured.weights_of(tr.assign(weight=[4.0, 0.5, 0.5, 4.0])), [4, 0.5, 0.5, 4]
    )
    with pytest.raises(ValueError, match="weight must be positive"):
        measured.weights_of(tr.assign(weight=[1.0, 0.0, 1.0, 1.0]))
    strata = measured.strata_of(tr)
    assert strata[0] == strata[3] != strata[1] == strata[2]  # one stratum per step kind


def test_eager_timings_recorded_back_to_back_are_flagged():
    tr = S.trace("AC")
    tm = S.timings(tr, _latency, runs=(1, 2), modes=("eager", "graph"))
    eager, graph = measured.mode_data(tr, tm.assign(timing_method="cuda_events"))
    assert eager.host_included and not graph.host_included
    (new,) = measured.mode_data(tr, S.timings(tr, _latency, runs=(1, 2)).assign(timing_method="spin-events"))
    assert not new.host_included
