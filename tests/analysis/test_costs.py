"""Lifecycle costs (analysis/costs.py): lifecycle.parquet parsed in its units, the fallbacks a policy
is charged when its lookup was not measured, and the per-invocation charge of a choice sequence."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headroom.decide import costs


def _long(*rows) -> pd.DataFrame:
    cols = ("kind", "candidate", "policy", "mode", "value", "unit", "status")
    return pd.DataFrame([dict(zip(cols, r, strict=True)) for r in rows])


def test_long_rows_are_read_in_their_units_and_skipped_rows_charge_nothing():
    c = costs.lifecycle_costs(
        _long(
            ("compile", "t0", None, None, 1500.0, "ms", "ok"),
            ("compile", "t1", None, None, 9.0, "s", "skipped"),  # not measured: not charged
            ("cache", "t0", None, None, 2.0, "KiB", "ok"),
            ("dispatch", None, "exact-key", None, 250.0, "ns", "ok"),
            ("switch", "t0", None, "eager", 3.0, "us", "ok"),
            ("switch", "t0", None, "eager", 5.0, "us", "ok"),
            ("switch", "t0", None, "graph", -2.0, "us", "ok"),  # alternating faster: noise, charged 0
        )
    )
    assert c.measured and c.compile_s == {"t0": pytest.approx(1.5)}
    assert c.cache_bytes == {"t0": 2048.0} and c.dispatch_us == {"exact-key": pytest.approx(0.25)}
    assert c.switch_for("eager") == pytest.approx(4.0) and c.switch_for("graph") == 0.0
    assert c.switch_us == pytest.approx(3.0)  # the median over every switch row
    assert costs.lifecycle_costs(None) == costs.LifecycleCosts()


def test_plans_are_charged_per_shape_else_the_candidates_median_else_nothing():
    df = _long(*(("plan", "t0-q_fused", None, None, us, "us", "ok") for us in (10.0, 30.0, 20.0)))
    df["shape_key"] = ["s1", "s2", "s3"]
    c = costs.lifecycle_costs(df)
    assert c.plan_for("t0-q_fused", "s2") == 30.0
    assert c.plan_for("t0-q_fused", "unseen") == 20.0  # the median over its shapes
    assert c.plan_for("native-sdpa-math", "s1") == 0.0


def test_bad_lifecycle_tables_are_named():
    with pytest.raises(ValueError, match="unit 'furlongs' of compile rows"):
        costs.lifecycle_costs(_long(("compile", "t0", None, None, 1.0, "furlongs", "ok")))
    with pytest.raises(ValueError, match=r"unknown kind\(s\) \['warmup'\]"):
        costs.lifecycle_costs(_long(("warmup", "t0", None, None, 1.0, "s", "ok")))
    with pytest.raises(ValueError, match="dispatch row needs a `policy`"):
        costs.lifecycle_costs(_long(("dispatch", None, None, None, 1.0, "ns", "ok")))
    with pytest.raises(ValueError, match="pandas DataFrame or None"):
        costs.lifecycle_costs([("compile", 1.0)])


def test_an_unmeasured_lookup_never_flatters_the_policies():
    c = costs.LifecycleCosts(dispatch_us={"exact-key": 0.2, "clustered": 0.9})
    assert c.dispatch_for("exact-key") == (0.2, "measured")
    assert c.dispatch_for("global")[0] == 0.0  # the global kernel looks nothing up
    assert c.dispatch_for("phase-keyed")[0] == 0.2  # the baseline: the cheapest measured
    assert c.dispatch_for("bucketed")[0] == 0.9  # any other: the dearest measured
    assert costs.LifecycleCosts().dispatch_for("bucketed") == (0.0, "not measured (0 charged)")


def test_charge_counts_switches_within_a_phase_plans_lookups_and_compiles():
    choice = np.array([0, 1, 1, 0])
    phase = np.array([0, 0, 1, 1])  # prefill, prefill, decode, decode
    plan = np.array([[0.0, 2.0]] * 4)  # candidate 1 builds a plan each call
    out = costs.charge(choice, phase, plan, dispatch_us=1.0, switch_us=10.0, compile_us=[100.0, 50.0])
    # every invocation: lookup 1 + both used candidates' compiles 150; inv 1 switches (same phase),
    # inv 2 changes phase (not charged), inv 3 switches back within decode; candidate 1 pays its plan
    np.testing.assert_allclose(out, [151.0, 163.0, 153.0, 161.0])
    batch = costs.charge(np.stack([choice, np.zeros(4, int)]), phase, plan, 1.0, 10.0, [100.0, 50.0])
    np.testing.assert_allclose(batch[1], [101.0] * 4)  # the global kernel: no switch, one compile
