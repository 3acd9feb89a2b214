"""Policies on hand-built surfaces whose answers are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headroom.decide import policy_eval
from tests import analysis_sets as S

FAST = {"bootstrap_resamples": 200, "random_draws": 20}


def _row(pe, policy, fusion="free", run=1, mode="eager"):
    sel = pe[(pe.policy == policy) & (pe.fusion == fusion) & (pe.run == run) & (pe["mode"] == mode)]
    assert len(sel) == 1, (policy, fusion, run, mode)
    return sel.iloc[0]


def test_flat_surface_every_policy_equals_global():
    tr = S.trace("ABC" * 6)
    pe = policy_eval.evaluate(tr, S.timings(tr, S.flat), **FAST)
    assert set(pe.policy) == set(policy_eval.POLICIES)
    assert set(pe.fusion) == {"off", "on", "free"}
    assert len(pe) == 3 * len(policy_eval.POLICIES) * 3  # runs x policies (the registry + oracle) x arms
    assert np.allclose(pe.gain_vs_global_pct, 0.0, atol=1e-12)
    assert np.allclose(pe.gap_to_oracle_pct, 0.0, atol=1e-12)
    assert np.allclose(pe[["ci_low", "ci_high"]].to_numpy(), 0.0, atol=1e-12)
    # no lifecycle: nothing to pay, net equals gross
    assert np.allclose(pe.net_gain_pct, pe.gain_vs_global_pct)
    # ties never make a policy switch away from global
    assert (pe[pe.policy != "random"].switches == 0).all()


def _twenty_pct_key(key, tile, fused, run, mode, inv):
    # tile 0 is best everywhere by 5%, except key C where tile 2 is 20% faster than tile 0
    if key == "C" and tile == 2:
        return 0.8 * S.BASE_US[key]
    return S.BASE_US[key] * (1.0 + 0.05 * (tile > 0))


def test_one_key_with_a_better_tile_exact_key_gains_what_the_data_says():
    seq = "ABCA" * 5  # C is in train and in test
    tr = S.trace(seq)
    pe = policy_eval.evaluate(tr, S.timings(tr, _twenty_pct_key, std_us=0.5, reps=100), **FAST)
    test = seq[len(seq) // 2 :]
    t_global = sum(S.BASE_US[k] for k in test)  # global = tile 0 (least total train latency)
    t_exact = t_global - 0.2 * S.BASE_US["C"] * test.count("C")
    for fusion in ("off", "on", "free"):
        g = _row(pe, "global", fusion)
        ek = _row(pe, "exact-key", fusion)
        assert g.global_candidate.startswith("t0-")
        assert g.test_us == pytest.approx(t_global, rel=1e-12)
        assert ek.test_us == pytest.approx(t_exact, rel=1e-12)
        assert ek.gain_vs_global_pct == pytest.approx(100 * (t_global - t_exact) / t_global, rel=1e-12)
        assert ek.gap_to_oracle_pct == pytest.approx(0.0, abs=1e-12)
        # regret-aware: 20% of 50 us is far above the noise (0.5 us / sqrt(100)) -> takes it
        assert _row(pe, "regret-aware", fusion).test_us == pytest.approx(t_exact, rel=1e-12)
        # C is alone in its bucket -> bucketed takes it too
        assert _row(pe, "bucketed", fusion).test_us == pytest.approx(t_exact, rel=1e-12)
        assert _row(pe, "oracle", fusion).test_us == pytest.approx(t_exact, rel=1e-12)
        assert ek.ci_low <= ek.gain_vs_global_pct <= ek.ci_high


def test_bucketed_does_not_take_a_key_whose_bucket_is_shared_with_a_heavier_key():
    # A2 shares A's bucket; A2 prefers tile 1 by 10%, A (more frequent, heavier) prefers tile 0:
    # in train the bucket's sums are tile 0: 4*100 + 2*90 = 580 < tile 1: 4*105 + 2*81 = 582.
    def lat(key, tile, fused, run, mode, inv):
        if key == "A2":
            return S.BASE_US[key] * (0.9 if tile == 1 else 1.0)
        return S.BASE_US[key] * (1.0 + 0.05 * (tile > 0))

    seq = ["A", "A", "A2", "C"] * 4
    tr = S.trace(seq)
    pe = policy_eval.evaluate(tr, S.timings(tr, lat, runs=(1,)), **FAST)
    assert _row(pe, "exact-key").gain_vs_global_pct > 0
    assert _row(pe, "bucketed").gain_vs_global_pct == pytest.approx(0.0, abs=1e-12)


def test_regret_aware_stays_global_when_the_gain_is_within_noise():
    # key B: tile 2 better by 0.1 us on 400 us, but std_us is 50 us over 4 reps -> LCB < 0
    def lat(key, tile, fused, run, mode, inv):
        if key == "B" and tile == 2:
            return S.BASE_US[key] - 0.1
        return S.BASE_US[key] * (1.0 + 0.05 * (tile > 0))

    tr = S.trace("ABCA" * 5)
    pe = policy_eval.evaluate(tr, S.timings(tr, lat, runs=(1,), std_us=50.0, reps=4), **FAST)
    assert _row(pe, "exact-key").gain_vs_global_pct > 0
    assert _row(pe, "regret-aware").gain_vs_global_pct == pytest.approx(0.0, abs=1e-12)


def test_regret_aware_stays_global_when_dispatch_and_switching_cost_more_than_the_gain():
    def lat(key, tile, fused, run, mode, inv):
        if key == "B" and tile == 2:
            return S.BASE_US[key] - 2.0  # 2 us better, noise-free
        return S.BASE_US[key] * (1.0 + 0.05 * (tile > 0))

    tr = S.trace("ABCA" * 5)
    tm = S.timings(tr, lat, runs=(1,))
    free = policy_eval.evaluate(tr, tm, **FAST)
    assert _row(free, "regret-aware").gain_vs_global_pct > 0
    costly = policy_eval.evaluate(tr, tm, S.lifecycle(), **FAST)  # 3 us switch + 0.15 us lookup > 2 us
    assert _row(costly, "regret-aware").gain_vs_global_pct == pytest.approx(0.0, abs=1e-12)


def test_unseen_test_key_falls_back_to_global():
    # D appears only in the test half; its best tile (1) differs from global's (0).
    def lat(key, tile, fused, run, mode, inv):
        if key == "D":
            return S.BASE_US[key] * (0.5 if tile == 1 else 1.0)
        return S.BASE_US[key] * (1.0 + 0.05 * (tile > 0))

    seq = ["A", "C"] * 4 + ["D", "A", "D", "C", "D", "A", "C", "D"]
    tr = S.trace(seq)
    pe = policy_eval.evaluate(tr, S.timings(tr, lat, runs=(1,)), **FAST)
    test = seq[8:]
    t_global = sum(S.BASE_US[k] for k in test)
    for policy in ("exact-key", "bucketed", "regret-aware"):
        assert _row(pe, policy).test_us == pytest.approx(t_global, rel=1e-12), policy
    oracle = _row(pe, "oracle")
    assert oracle.test_us == pytest.approx(t_global - 0.5 * S.BASE_US["D"] * test.count("D"))


def test_pure_fusion_effect_goes_to_fusion_not_policy():
    def lat(key, tile, fused, run, mode, inv):
        return S.BASE_US[key] * (0.7 if fused else 1.0)

    tr = S.trace("ABC" * 6)
    pe = policy_eval.evaluate(tr, S.timings(tr, lat), **FAST)
    fac = policy_eval.factorial(pe)
    assert list(fac.run) == [1, 2, 3]
    assert np.allclose(fac.fusion_gain_pct, 30.0)
    assert np.allclose(fac.policy_gain_pct, 0.0, atol=1e-12)
    assert np.allclose(fac.interaction_pct, 0.0, atol=1e-9)
    assert np.allclose(fac.fusion_speedup, 1 / 0.7)
    # within the free arm global already takes the fused kernel: no policy gain there either
    assert np.allclose(
        pe[pe.fusion == "free"].query("policy != 'random'").gain_vs_global_pct, 0.0, atol=1e-12
    )


def test_factorial_separates_policy_and_fusion_and_their_interaction():
    # fused saves 10%; key C has a better tile only when fused (interaction)
    def lat(key, tile, fused, run, mode, inv):
        us = S.BASE_US[key] * (0.9 if fused else 1.0) * (1.0 + 0.05 * (tile > 0))
        if key == "C" and tile == 2 and fused:
            us = 0.7 * S.BASE_US[key]
        return us

    seq = "ABCA" * 5
    tr = S.trace(seq)
    fac = policy_eval.factorial(policy_eval.evaluate(tr, S.timings(tr, lat, runs=(1,)), **FAST)).iloc[0]
    test = seq[10:]
    a = sum(S.BASE_US[k] for k in test)
    b = 0.9 * a
    d = b - (0.9 - 0.7) * S.BASE_US["C"] * test.count("C")
    assert fac.global_unfused_us == pytest.approx(a)
    assert fac.global_fused_us == pytest.approx(b)
    assert fac.policy_gain_pct == pytest.approx(0.0, abs=1e-12)
    assert fac.fusion_gain_pct == pytest.approx(10.0)
    assert fac.interaction_pct == pytest.approx(100 * (a - d) / a - 10.0)


def test_factorial_chooses_its_policy_on_validation_never_on_test():
    def lat(key, tile, fused, run, mode, inv):
        return S.BASE_US[key] * (1.0 + 0.05 * (tile > 0)) * (1.0 + 0.01 * ((inv * 7 + tile) % 3))

    tr = S.trace("ABCD" * 6)
    pe = policy_eval.evaluate(tr, S.timings(tr, lat), **FAST)
    # the column is the decision's: each run's selected policy x arm has the best validation figure
    for _, g in pe.groupby(["run", "mode"]):
        sel = g[g.selected]
        assert len(sel) == 1 and sel.policy.iloc[0] in policy_eval.DEPLOYABLE
        dep = g[g.policy.isin(policy_eval.DEPLOYABLE) & g.fusion.isin(("off", "on", "free"))]
        assert sel.validation_net_gain_vs_phase_pct.iloc[0] == dep.validation_net_gain_vs_phase_pct.max()
    # a policy that wins on test but not on validation is not chosen; the validation winner is
    rigged = pe.copy()
    on_test, on_validation = "exact-key", "clustered"
    rigged.loc[rigged.policy == on_test, "gain_vs_global_pct"] = 50.0
    rigged.loc[rigged.policy == on_test, "validation_net_gain_vs_phase_pct"] = -5.0
    rigged.loc[rigged.policy == on_validation, "validation_net_gain_vs_phase_pct"] = 5.0
    fac = policy_eval.factorial(rigged)
    assert (fac.policy == on_validation).all()
    row = fac.iloc[0]
    cell = rigged[(rigged.run == row.run) & (rigged["mode"] == row["mode"])].set_index(["policy", "fusion"])
    assert row.policy_unfused_us == cell.loc[(on_validation, "off"), "test_us"]
    with pytest.raises(ValueError, match="validation_net_gain_vs_phase_pct"):
        policy_eval.factorial(pe.drop(columns="validation_net_gain_vs_phase_pct"))


def test_modes_are_evaluated_separately():
    def lat(key, tile, fused, run, mode, inv):
        factor = 0.8 if (mode == "graph" and key == "B" and tile == 2) else 1.0 + 0.05 * (tile > 0)
        return S.BASE_US[key] * factor

    tr = S.trace("ABCA" * 5)
    pe = policy_eval.evaluate(tr, S.timings(tr, lat, runs=(1,), modes=("eager", "graph")), **FAST)
    assert set(pe["mode"]) == {"eager", "graph"}
    assert _row(pe, "exact-key", mode="eager").gain_vs_global_pct == pytest.approx(0.0, abs=1e-12)
    assert _row(pe, "exact-key", mode="graph").gain_vs_global_pct > 1.0


def test_random_is_the_average_of_seeded_draws_and_deterministic():
    def lat(key, tile, fused, run, mode, inv):
        return S.BASE_US[key] * (1.0 + 0.1 * tile)

    tr = S.trace("ABC" * 6)
    tm = S.timings(tr, lat, runs=(1,))
    a = policy_eval.evaluate(tr, tm, seed=3, random_draws=2000, bootstrap_resamples=100)
    b = policy_eval.evaluate(tr, tm, seed=3, random_draws=2000, bootstrap_resamples=100)
    pd.testing.assert_frame_equal(a, b)
    r = _row(a, "random", "off")
    # expectation: mean over 3 tiles of (1 + 0.1 tile) = 1.1 x global
    assert r.gain_vs_global_pct == pytest.approx(-10.0, abs=0.5)


def test_lifecycle_costs_lower_net_gain():
    tr = S.trace("ABCA" * 5)
    tm = S.timings(tr, _twenty_pct_key, runs=(1,))
    pe = policy_eval.evaluate(tr, tm, S.lifecycle(), deployment_invocations=1000, **FAST)
    ek = _row(pe, "exact-key")
    assert ek.net_gain_pct < ek.gain_vs_global_pct
    # exact-key uses 2 candidates (4 s compile), global 1 (2 s); lookup 0.15 us; switches x 3 us
    n_test = 10
    t_g, t_p = _row(pe, "global").test_us, ek.test_us
    c_g = t_g / n_test + 2e6 / 1000
    c_p = t_p / n_test + 0.15 + 3.0 * ek.switches / n_test + 4e6 / 1000
    assert ek.net_gain_pct == pytest.approx(100 * (c_g - c_p) / c_g)
    assert ek.net_ci_low <= ek.net_gain_pct <= ek.net_ci_high


def test_lifecycle_costs_parse_the_wide_and_long_layouts():
    wide = pd.DataFrame(
        {
            "candidate": ["t0-fused", "t1-fused", None],
            "compile_s": [1.0, 2.0, None],
            "cache_bytes": [10.0, 20.0, None],
            "policy": [None, None, "exact-key"],
            "dispatch_ns": [None, None, 250.0],
            "switch_us": [None, None, 4.0],
        }
    )
    costs = policy_eval.lifecycle_costs(wide)
    assert costs.compile_s == {"t0-fused": 1.0, "t1-fused": 2.0}
    assert costs.dispatch_us == {"exact-key": 0.25}
    assert costs.switch_us == 4.0
    assert costs.dispatch_for("bucketed") == (0.25, "not measured; charged the dearest measured lookup")
    long = policy_eval.lifecycle_costs(S.lifecycle())
    assert long.compile_s["t1-unfused"] == 2.0 and long.switch_us == 3.0
    assert long.dispatch_us["clustered"] == pytest.approx(2.0)


def test_lifecycle_costs_of_the_stage_layout_per_mode_skip_rows_without_values():
    """The lifecycle stage's layout: switch rows per mode, skipped rows without values, empty strings."""
    columns = ("kind", "candidate", "policy", "mode", "value", "unit", "status")
    rows = [
        ("switch", "t0-fused", "", "eager", 4.0, "us", "ok"),
        ("switch", "t1-fused", "", "eager", 2.0, "us", "ok"),
        ("switch", "t0-fused", "", "graph", -0.5, "us", "ok"),
        ("compile", "t0-fused", "", "", float("nan"), "s", "skipped"),
        ("dispatch", "", "global", "", 1.0, "ns", "ok"),
    ]
    costs = policy_eval.lifecycle_costs(pd.DataFrame(rows, columns=columns))
    assert costs.switch_for("eager") == 3.0
    assert costs.switch_for("graph") == 0.0  # a negative penalty is noise: charged as zero
    assert costs.compile_s == {} and costs.dispatch_us == {"global": 0.001}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"train_fraction": 1.0}, "train_fraction"),
        ({"clusters": 0}, "options.clusters"),
        ({"bogus": 1}, "unknown key"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(kwargs, match):
    tr = S.trace("ABC" * 2)
    with pytest.raises(ValueError, match=match):
        policy_eval.evaluate(tr, S.timings(tr, S.flat, runs=(1,)), **kwargs)


def test_missing_columns_and_unknown_invocations_are_named():
    tr = S.trace("ABC" * 2)
    tm = S.timings(tr, S.flat, runs=(1,))
    with pytest.raises(ValueError, match=r"timings: missing column\(s\) \['median_us'\]"):
        policy_eval.evaluate(tr, tm.drop(columns="median_us"))
    with pytest.raises(ValueError, match="not in the trace"):
        policy_eval.evaluate(tr.iloc[:3], tm)
    with pytest.raises(ValueError, match="unit"):
        policy_eval.lifecycle_costs(
            pd.DataFrame({"kind": ["switch"], "value": [1.0], "unit": ["fortnights"]})
        )


def test_factorial_without_a_fused_arm_is_skipped_with_the_reason():
    tr = S.trace("ABC" * 4)
    tm = S.timings(tr, S.flat, runs=(1,))
    pe = policy_eval.evaluate(tr, tm[~tm.fused], **FAST)
    assert set(pe.fusion) == {"off", "free"}
    fac = policy_eval.factorial(pe)
    assert list(fac.status) == ["skipped"] and "'on'" in fac.reason.iloc[0]


def test_natives_compete_in_the_free_arm_and_never_in_a_fusion_arm():
    """Issue 33, item 3: a native 30% faster than ours everywhere is the free arm's global kernel and
    its oracle's every pick; off and on stay ours (RoPE fusion is ours); no arm 'native' besides."""
    tr = S.trace("ABCA" * 5)
    tm = S.with_native(S.timings(tr, S.flat, std_us=0.5, reps=100), lambda key: 0.7)
    pe = policy_eval.evaluate(tr, tm, **FAST)
    assert set(pe.fusion) == {"off", "on", "free"}
    for fusion in ("off", "on"):  # ours only: flat, nothing to gain, the native never picked
        assert not _row(pe, "global", fusion).global_candidate.startswith("native")
        assert "native" not in _row(pe, "oracle", fusion).candidates_used
        assert _row(pe, "oracle", fusion).gain_vs_global_pct == pytest.approx(0.0, abs=1e-12)
    g, oracle = _row(pe, "global", "free"), _row(pe, "oracle", "free")
    assert g.global_candidate == "native-sdpa-cudnn" and oracle.candidates_used == "native-sdpa-cudnn"
    assert g.arm_candidates == 7 and g.gap_to_oracle_pct == pytest.approx(0.0, abs=1e-12)
    # fitted on ours alone the global kernel would be 30% slower than this one
    assert _row(pe, "global", "off").test_us == pytest.approx(g.test_us / 0.7)


def test_natives_do_not_compete_on_eager_timings_that_include_the_host():
    tr = S.trace("ABCA" * 5)
    tm = S.with_native(S.timings(tr, S.flat), lambda key: 0.7).assign(timing_method="cuda_events")
    g = _row(policy_eval.evaluate(tr, tm, **FAST), "global", "free")
    assert not g.global_candidate.startswith("native") and g.arm_candidates == 6


def test_without_native_candidates_the_arms_are_the_fusion_arms():
    tr = S.trace("ABCA" * 5)
    tm = S.timings(tr, S.flat)
    tm["backend"] = "triton"
    assert set(policy_eval.evaluate(tr, tm, **FAST).fusion) == {"off", "on", "free"}


def test_graph_mode_pays_no_dispatch_lookup_but_still_pays_switching():
    tr = S.trace("ABCA" * 5)
    tm = S.timings(tr, _twenty_pct_key, runs=(1,), modes=("eager", "graph"))
    pe = policy_eval.evaluate(tr, tm, S.lifecycle(), deployment_invocations=1000, **FAST)
    n_test = 10
    for mode, lookup in (("eager", 0.15), ("graph", 0.0)):  # graph: the lookup runs once, at capture
        ek, g = _row(pe, "exact-key", mode=mode), _row(pe, "global", mode=mode)
        c_g = g.test_us / n_test + 2e6 / 1000
        c_p = ek.test_us / n_test + lookup + 3.0 * ek.switches / n_test + 4e6 / 1000
        assert ek.net_gain_pct == pytest.approx(100 * (c_g - c_p) / c_g), mode


def test_plan_builds_are_charged_per_call_over_the_layers_in_eager_mode_only():
    tr = S.trace("ABCA" * 5)
    tm = S.timings(tr, _twenty_pct_key, runs=(1,), modes=("eager", "graph"))
    names = sorted(tm["candidate"].unique())
    plans = pd.DataFrame(
        {"kind": "plan", "candidate": names, "value": 64.0, "unit": "us", "shape_key": "s", "status": "ok"}
    )
    base = policy_eval.evaluate(tr, tm, S.lifecycle(), deployment_invocations=1000, **FAST)
    charged = policy_eval.evaluate(
        tr, tm, pd.concat([S.lifecycle(), plans]), deployment_invocations=1000, layers_per_forward=32, **FAST
    )
    for mode, per_call in (("eager", 64.0 / 32), ("graph", 0.0)):
        a, b = _row(base, "global", mode=mode), _row(charged, "global", mode=mode)
        assert b.running_cost_us - a.running_cost_us == pytest.approx(per_call), mode
