"""The study's figures (decide/figures.py, decide/measured.py): the deployment profile, step types, the profile's
parts, and the figure rows the decision reads, with the split and seed of the default study."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headroom.core import defaults
from headroom.decide import figures, measured
from tests import analysis_sets as S

FAST = {"bootstrap_resamples": 100, "random_draws": 10}


def _lat(key, tile, fused, run, mode, inv):
    """Which tile is best turns with the invocation: the gap to the oracle depends on the split."""
    return S.BASE_US[key] * (1.0 + 0.05 * ((tile + inv) % 3)) * (0.9 if fused else 1.0) * (1 + 0.001 * run)


def test_profile_units_and_step_types():
    assert figures.deployment_profile() == defaults.value("decision", "deployment")
    assert figures.deployment_profile({"decode-only": "graph"}) == {"decode-only": "graph"}
    assert figures.unit_of("gap_to_oracle") == "%" and figures.unit_of("fusion_speedup") == "x"
    assert figures.unit_of(f"{figures.KERNEL_ROWS}sdpa") == "x"
    tr = S.trace("AC")
    assert measured.step_of(tr).tolist() == ["mixed", "decode-only"]
    # a serving trace's step column (trace.requests.STEPS): the decodes of a mixed step are mixed
    assert measured.step_of(tr.assign(step=["prefill", "decode"])).tolist() == ["mixed", "decode-only"]
    assert measured.step_of(tr.assign(step=["mixed-prefill", "mixed-decode"])).tolist() == ["mixed", "mixed"]
    assert measured.step_of(tr.assign(step=[None, "mixed-decode"])).tolist() == ["mixed", "mixed"]
    with pytest.raises(ValueError, match=r"step holds \['chunk'\]"):
        measured.step_of(tr.assign(step=["chunk", "decode"]))


def test_a_part_holds_its_step_types_invocations_in_order():
    tr = S.trace("ACAC")
    (md,) = measured.mode_data(tr, S.timings(tr, _lat, runs=(1, 2)))
    sub = measured.part(md, "decode-only")
    assert sub.features["invocation"].tolist() == [1, 3] and sub.us.shape == (2, 2, md.us.shape[2])
    np.testing.assert_array_equal(sub.us, md.us[:, [1, 3]])
    assert measured.part(md, "prefill") is None


def test_study_figures_take_the_default_studys_split_and_seed():
    tr = S.trace("ABC" * 6)
    tm = S.timings(tr, _lat, modes=("graph", "eager"))
    pol = defaults.section("policies")
    left_out = figures.study_figures(tr, tm, **FAST)
    given = figures.study_figures(tr, tm, train_fraction=pol["train_fraction"], seed=pol["seed"], **FAST)
    pd.testing.assert_frame_equal(left_out, given)
    other = figures.study_figures(tr, tm, train_fraction=0.75, seed=pol["seed"], **FAST)
    assert not other["estimate"].equals(left_out["estimate"])  # the split is what the default sets
    assert {"mode", "figure", "estimate", "ci_low", "ci_high", "decided", "family"} <= set(left_out)
    assert set(left_out["mode"]) >= {"graph", "eager"}
    gap = left_out[(left_out["mode"] == "graph") & (left_out["figure"] == "gap_to_oracle")].iloc[0]
    assert gap["ci_low"] <= gap["estimate"] <= gap["ci_high"] and gap["decided"]


def test_a_trace_too_short_to_split_is_named():
    tr = S.trace("AC")
    with pytest.raises(ValueError, match="train_fraction"):
        figures.study_figures(tr, S.timings(tr, _lat), train_fraction=0.1, **FAST)
