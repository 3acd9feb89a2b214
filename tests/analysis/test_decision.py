"""The decision rule (v2) on hand-built surfaces whose verdicts are known."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import pytest

from headroom.decide import decision, figures
from tests import analysis_sets as S

FAST = {"bootstrap_resamples": 300, "random_draws": 20}


def _noise(run, inv, tile, fused, scale):
    """Deterministic multiplicative noise, independent per (run, invocation, candidate)."""
    key = zlib.crc32(f"{run}|{inv}|{tile}|{fused}".encode())
    return 1.0 + scale * np.random.default_rng(key).standard_normal()


def _decide(
    latency, seq="ABC" * 8, modes=("graph",), env="cuda", runs=(1, 2, 3), sweep=None, deployment=None, **thr
):
    tr = S.trace(seq)
    tm = S.timings(tr, latency, runs=runs, modes=modes)
    figs = figures.study_figures(tr, tm, deployment=deployment, **FAST)
    return decision.decide(figs, sweep, S.environment(env), deployment=deployment, **thr)


def _fig(d, figure, mode="graph"):
    return d[(d["mode"] == mode) & (d["figure"] == figure)].iloc[0]


def test_format_range_and_signed_ci():
    assert decision.format_range([0.670, 0.149, 0.3], "%") == "0.149\u20130.670%"
    assert decision.format_range([np.nan], "%") == "n/a"
    assert decision.format_ci(-7.525, -12.0, -0.08, "%") == "-7.53% [-12.00, -0.08]"
    assert decision.format_ci(1.2, 1.1, 1.3, "x") == "1.200x [1.100, 1.300]"


def test_flat_surface_on_a_gpu_stops_with_one_row_per_mode_and_figure():
    d = _decide(lambda k, t, f, r, m, i: S.BASE_US[k] * _noise(r, i, t, f, 0.001))
    assert set(d["verdict"]) == {"stop"} and d["reason"].iloc[0].startswith("Stop over the timed modes")
    decided = d[d["decided"]]
    assert list(decided["figure"]) == ["gap_to_oracle", "policy_gain"]  # v3: fusion is a kernel row
    assert (decided["state"] == "holds").all()
    assert {"estimate", "ci_low", "ci_high", "threshold", "state", "verdict", "reason"} <= set(d.columns)
    assert not d.duplicated(["mode", "figure"]).any()


def test_off_the_gpu_is_no_decision():
    d = _decide(S.flat, env="interpret")
    assert set(d["verdict"]) == {"no-decision"} and "not GPU measurements" in d["reason"].iloc[0]


def test_pure_phase_split_continues_and_names_the_phase_keyed_rule():
    # decode (C) is 30% faster fused; prefill (A, B) 30% faster unfused; tiles equal
    def lat(k, t, f, r, m, i):
        phase = S.SHAPES[k][0]
        better = f if phase == "decode" else not f
        return S.BASE_US[k] * (0.7 if better else 1.0) * _noise(r, i, t, f, 0.002)

    d = _decide(lat, seq="ACBCAC" * 8)
    assert d["verdict"].iloc[0] == "continue"
    assert _fig(d, "gap_to_oracle").state == "exceeds"
    assert _fig(d, "policy_gain").state == "holds"
    assert abs(_fig(d, "policy_gain").estimate) < 0.3
    assert "phase-keyed two-kernel rule" in d["reason"].iloc[0]


def test_headroom_beyond_the_phase_split_continues_on_the_policy_figure():
    # within decode, shape C wants tile 2 (40% faster), shape D (another decode) wants tile 0
    def lat(k, t, f, r, m, i):
        fast = (k == "C" and t == 2) or (k != "C" and t == 0)
        return S.BASE_US[k] * (0.6 if fast else 1.0) * _noise(r, i, t, f, 0.002)

    d = _decide(lat, seq="ADCC" * 6)
    assert d["verdict"].iloc[0] == "continue"
    assert _fig(d, "policy_gain").state == "exceeds"
    assert "phase-keyed two-kernel rule" not in d["reason"].iloc[0]


def test_the_winners_curse_is_removed_by_scoring_on_another_run():
    # flat truth, 5% independent noise per run: same-run gap is large, cross-run gap near 0
    d = _decide(lambda k, t, f, r, m, i: S.BASE_US[k] * _noise(r, i, t, f, 0.05), modes=("eager",))
    same = _fig(d, "gap_to_oracle_same_run", "eager").estimate
    cross = _fig(d, "gap_to_oracle", "eager")
    assert same > 3.0
    assert cross.ci_low < 0.0 < cross.ci_high
    assert d["verdict"].iloc[0] != "continue"


def test_noise_wider_than_the_threshold_is_no_decision_saying_so():
    d = _decide(lambda k, t, f, r, m, i: S.BASE_US[k] * _noise(r, i, t, f, 0.2), modes=("eager",))
    assert d["verdict"].iloc[0] == "no-decision"
    assert "noise floor" in d["mode_reason"].iloc[0]


@pytest.mark.parametrize("runs, words", [((1,), "one run"), ((1, 2), "two runs")])
def test_too_few_runs_is_no_decision_with_the_reason(runs, words):
    d = _decide(S.flat, runs=runs)
    assert d["verdict"].iloc[0] == "no-decision" and words in d["reason"].iloc[0]


def test_holm_is_step_down():
    assert decision.holm(np.array([0.01, 0.04, 0.03]), 0.05).tolist() == [True, False, False]
    assert decision.holm(np.array([0.001, 0.02, 0.04]), 0.05).tolist() == [True, True, True]
    assert decision.holm(np.array([0.2, 0.001]), 0.05).tolist() == [False, True]


def test_thresholds_come_from_arguments_and_bad_ones_are_named():
    with pytest.raises(ValueError, match="max_gap_to_oracle_pct"):
        _decide(S.flat, max_gap_to_oracle_pct=float("nan"))

    # a threshold above a clear 40% gap turns continue into stop
    def lat(k, t, f, r, m, i):
        return S.BASE_US[k] * (0.6 if (k == "C") == (t == 2) else 1.0) * _noise(r, i, t, f, 0.001)

    assert _decide(lat, seq="ADCC" * 6)["verdict"].iloc[0] == "continue"
    relaxed = _decide(lat, seq="ADCC" * 6, max_gap_to_oracle_pct=90.0, max_policy_gain_pct=90.0)
    assert relaxed["verdict"].iloc[0] == "stop"


def test_graph_sweep_fusion_is_reported_not_decided():
    d = _decide(S.flat, sweep=S.graph_sweep(graph_speedup=1.5))
    row = _fig(d, "fusion_speedup_sweep")
    assert row.state == "reported" and row.estimate == pytest.approx(1.5)
    assert d["verdict"].iloc[0] == "stop"


def test_fusion_speedups_ci_from_dispersion():
    gs = S.graph_sweep(graph_speedup=1.2)
    sp = decision.fusion_speedups(gs)
    assert (sp["speedup"] > 0).all() and (sp["ci_low"] <= sp["speedup"]).all()
    assert isinstance(sp, pd.DataFrame)


def test_detectable_effects_are_reported_rows_never_decided():
    table = pd.DataFrame(
        {
            "mode": ["eager", "graph"],
            "figure": ["gap_to_oracle"] * 2,
            "estimate": [1.0, 2.0],
            "verdict": ["stop"] * 2,
            "reason": ["r"] * 2,
            "decided": [True, True],
            "state": ["holds"] * 2,
        }
    )
    mde = {
        "graph": {
            "mde_pct": 4.3,
            "up_to_pct": 20.0,
            "text": "minimum detectable net gain at 80% power: 4.30%",
            "threshold_pct": 1.0,
            "power": 0.8,
            "seeds": 200,
            "runs": 3,
            "invocations": 48,
        },
        "eager": {
            "mde_pct": float("nan"),
            "up_to_pct": 18.9,
            "text": "no effect up to 18.90% reaches 80% power (largest power seen 16%)",
            "threshold_pct": 1.0,
            "power": 0.8,
            "seeds": 200,
            "runs": 3,
            "invocations": 48,
        },
    }
    out = decision.with_detectable_effects(table, mde)
    added = out.iloc[2:].set_index("mode")
    assert added.loc["graph", "figure"] == "policy_gain_mde" and added.loc["graph", "estimate"] == 4.3
    assert added.loc["eager", "figure"] == "policy_gain_no_mde" and added.loc["eager", "estimate"] == 18.9
    assert "no effect up to 18.90% reaches 80% power" in added.loc["eager", "detail"]
    assert not added["decided"].any() and (added["state"] == "reported").all()
    assert (added["verdict"] == "stop").all()  # the headline travels on every row


def test_the_headline_is_the_deployment_profiles_with_its_own_holm_family():
    # in graph mode decode C wants tile 2 and decode D tile 0 (by 40%); eager is flat: graph
    # continues, eager stops, and the profile's decode-only part (graph) carries the headline
    def lat(k, t, f, r, m, i):
        fast = m == "graph" and ((k == "C") == (t == 2))
        return S.BASE_US[k] * (0.6 if fast else 1.0) * _noise(r, i, t, f, 0.001)

    d = _decide(lat, seq="ACDC" * 8, modes=("graph", "eager"))
    parts = d[d["family"] == "profile"]
    assert set(parts["mode"]) == {"graph@decode-only", "eager@mixed"}
    assert set(parts.loc[parts["decided"], "figure"]) == {"gap_to_oracle", "policy_gain"}
    assert d["verdict"].iloc[0] == "continue" and d["reason"].iloc[0].startswith(
        "Continue for the deployment profile"
    )
    assert _fig(d, "gap_to_oracle", "graph@decode-only").state == "exceeds"
    assert _fig(d, "policy_gain", "graph@decode-only").state == "exceeds"  # batch-keyed learns C vs D
    assert _fig(d, "gap_to_oracle", "eager@mixed").state == "holds"
    assert _fig(d, "gap_to_oracle", "eager").mode_verdict == "stop"  # per mode, beside the headline
    assert (d["rule_version"] == "decision-v3.3").all()


def test_mixed_steps_in_graph_mode_leave_eager_out_of_the_headline():
    d = _decide(
        S.flat,
        seq="ACBC" * 8,
        modes=("graph", "eager"),
        deployment={"decode-only": "graph", "mixed": "graph"},
    )
    assert set(d.loc[d["family"] == "profile", "mode"]) == {"graph@decode-only", "graph@mixed"}
    with pytest.raises(ValueError, match="decision.deployment"):
        _decide(S.flat, deployment={"decode-only": "cuda-graph"})


def test_a_mode_that_cannot_stop_at_this_length_is_said_first():
    d = _decide(
        lambda k, t, f, r, m, i: S.BASE_US[k] * _noise(r, i, t, f, 0.2 if m == "eager" else 0.001),
        modes=("graph", "eager"),
    )
    first = d["reason"].iloc[0].split(". ")[0]
    assert "eager mode cannot reach `stop` at 24 invocations" in first


def test_the_reason_says_holm_held_a_figure_back():
    rows = pd.DataFrame(
        {
            "mode": ["eager"] * 2,
            "figure": ["gap_to_oracle", "policy_gain"],
            "estimate": [4.42, 0.0],
            "ci_low": [0.7, -0.5],
            "ci_high": [8.1, 0.5],
            "se": [1.9, 0.25],
            "df": [1e6, 1e6],
            "runs": [3, 3],
            "decided": [True, True],
            "unit": ["%", "%"],
        }
    )
    d = decision.decide(rows, None, S.environment("cuda"))
    assert d["mode_verdict"].iloc[0] == "no-decision"  # p = 0.036 alone, > 0.05 / 2 under Holm
    assert "would exceed alone" in d["mode_reason"].iloc[0] and "Holm" in d["mode_reason"].iloc[0]


def test_the_phase_note_follows_the_sign_of_the_phase_split():
    def rows(lo, hi):
        return pd.DataFrame(
            {
                "mode": "graph",
                "figure": ["gap_to_oracle", "policy_gain", "phase_split_gain"],
                "state": ["exceeds", "holds", "reported"],
                "estimate": [5.0, 0.0, (lo + hi) / 2],
                "ci_low": [4.0, -0.5, lo],
                "ci_high": [6.0, 0.5, hi],
                "threshold": [1.0, 1.0, np.nan],
                "unit": "%",
                "family": "graph",
            }
        )

    assert "captures it" in decision._phase_note(rows(2.0, 6.0))
    assert "does not capture it" in decision._phase_note(rows(-6.0, -2.0))
    assert "is open" in decision._phase_note(rows(-1.0, 3.0))


def test_the_verdicts_sensitivity_to_the_switch_penalty_is_reported():
    life = S.lifecycle()
    tr = S.trace("ACBC" * 8)
    tm = S.timings(tr, lambda k, t, f, r, m, i: S.BASE_US[k] * _noise(r, i, t, f, 0.001), modes=("graph",))
    d = decision.decide(figures.study_figures(tr, tm, life, **FAST), None, S.environment("cuda"))
    rows = d[d["figure"].str.startswith("policy_gain_switch_")].set_index("figure")
    assert list(rows.index) == ["policy_gain_switch_0x", "policy_gain_switch_2x"]
    assert (rows["state"] == "reported").all() and not rows["decided"].any()
    assert rows["detail"].str.contains("the mode's verdict at it: stop").all()


def test_the_kernel_recommendation_is_reported_first_class_and_never_continues():
    # fused 20% faster on every shape, tile 0 best by 5%: one fused kernel to ship, no portfolio
    def lat(k, t, f, r, m, i):
        return S.BASE_US[k] * (0.8 if f else 1.0) * (1.05 if t else 1.0) * _noise(r, i, t, f, 0.001)

    d = _decide(lat)
    rows = d[d["figure"] == "kernel_vs_best_unfused"]
    assert len(rows) == 1 and rows["state"].iloc[0] == "reported" and not rows["decided"].iloc[0]
    row = rows.iloc[0]
    assert row["kernel"] == "t0-fused" and row["runs_agree"] == 3
    assert row["estimate"] == pytest.approx(1.25, rel=0.01) and row["ci_low"] > 1.2
    assert d["verdict"].iloc[0] == "stop" and (d["rule_version"] == "decision-v3.3").all()


def test_thresholds_left_out_are_the_default_studys_and_unknown_ones_are_refused():
    from headroom.core import defaults

    cfg = defaults.section("decision")
    t = decision.Thresholds.of({})
    assert t.as_dict() == {k: cfg[k] for k in t.as_dict()}
    assert decision.Thresholds.of({"max_policy_gain_pct": 5.0}).max_policy_gain_pct == 5.0
    with pytest.raises(TypeError, match="max_gap_pct"):
        decision.Thresholds.of({"max_gap_pct": 1.0})


def test_a_gap_whose_bound_has_no_upper_end_cannot_hold_on_its_own_interval():
    # The gap holds on its bound's upper end (engine.HOLD_BY); where the bound has none (bootstrap-t
    # unbounded by tied resamples), the cross-run gap's own CI, biased down, must not stand in for it.
    row = {"figure": "gap_to_oracle", "ci_high": 0.2, "hold_high": np.nan}
    assert np.isnan(decision._hold_high(row))
    assert decision._hold_high({"figure": "policy_gain", "ci_high": 0.3, "hold_high": np.nan}) == 0.3


def test_from_four_runs_the_gap_and_its_bound_take_the_components_run_part_and_the_policy_figure_does_not():
    # decision-v3.3: a six-run study's gap and bound carry bootstrap-t with the run part from its two
    # variance components (the jackknife over runs overstates their pair-dominated spread; v3.2's
    # unbiased part, clipped at 0, could leave none); the policy figure keeps the jackknife's; every
    # figure's SE, df and p-value stay the Welch t's; and the decision holds the gap on its bound's
    # v3.3 upper end
    from headroom.core import defaults
    from headroom.decide import engine
    from headroom.decide.policy_eval import checked_modes

    runs = (1, 2, 3, 4, 5, 6)
    tr = S.trace("ABC" * 8)
    tm = S.timings(
        tr, lambda k, t, f, r, m, i: S.BASE_US[k] * _noise(r, i, t, f, 0.01), runs=runs, modes=("graph",)
    )
    tf, seed = defaults.value("policies", "train_fraction"), defaults.value("policies", "seed")
    opts, costs, (md,) = checked_modes(tr, tm, None, tf, FAST)
    f = engine.figures(engine.layout(md, opts, costs, tf, seed), engine.Batch(md.us[None], md.sem2[None]))
    assert engine.RULE_VERSION == "decision-v3.3"
    for name in ("gap_to_oracle", "gap_to_oracle_bound"):
        assert (f[name + "_lo"], f[name + "_hi"]) == (f[name + "_lo_c"], f[name + "_hi_c"])
        assert f[name + "_hi_c"][0] < f[name + "_hi_b"][0]  # narrower than the jackknife's here
        assert f[name + "_hi_c"][0] != f[name + "_hi_u"][0]  # and not v3.2's
    assert (f["policy_gain_lo"], f["policy_gain_hi"]) == (f["policy_gain_lo_b"], f["policy_gain_hi_b"])
    assert f["policy_gain_hi_c"][0] != f["policy_gain_hi_b"][0]
    d = decision.decide(figures.study_figures(tr, tm, **FAST), None, S.environment("cuda"))
    assert _fig(d, "gap_to_oracle")["hold_high"] == pytest.approx(float(f["gap_to_oracle_bound_hi_c"][0]))
    assert (d["rule_version"] == "decision-v3.3").all()


def test_a_figure_holds_on_the_bootstrap_t_upper_end_not_the_welch_one():
    # the gap's bound, a ratio over few invocations: its bootstrap-t upper end (decision-v3.1's) lies
    # above the Welch t one (v3's); a threshold between them decides the way bootstrap-t says
    from headroom.core import defaults
    from headroom.decide import engine
    from headroom.decide.policy_eval import checked_modes

    tr = S.trace("ABC" * 8)
    tm = S.timings(tr, lambda k, t, f, r, m, i: S.BASE_US[k] * _noise(r, i, t, f, 0.01), modes=("graph",))
    figs = figures.study_figures(tr, tm, **FAST)
    tf, seed = defaults.value("policies", "train_fraction"), defaults.value("policies", "seed")
    opts, costs, (md,) = checked_modes(tr, tm, None, tf, FAST)
    f = engine.figures(engine.layout(md, opts, costs, tf, seed), engine.Batch(md.us[None], md.sem2[None]))
    boot_t, welch = (float(f["gap_to_oracle_bound" + k][0]) for k in ("_hi", "_hi_w"))
    assert welch + 0.1 < boot_t
    # three runs: the unbiased run part and the components' need four, so v3.2's and v3.3's interval
    # is v3.1's here
    hi = f["gap_to_oracle_bound_hi"][0]
    assert (
        f["gap_to_oracle_bound_hi_u"][0]
        == f["gap_to_oracle_bound_hi_c"][0]
        == hi
        == f["gap_to_oracle_bound_hi_b"][0]
    )
    d = decision.decide(figs, None, S.environment("cuda"))
    assert _fig(d, "gap_to_oracle")["hold_high"] == pytest.approx(boot_t)
    between = decision.decide(figs, None, S.environment("cuda"), max_gap_to_oracle_pct=(welch + boot_t) / 2)
    assert _fig(between, "gap_to_oracle")["state"] == "inconclusive"  # Welch's upper end would hold
    assert between["verdict"].iloc[0] == "no-decision"
    above = decision.decide(figs, None, S.environment("cuda"), max_gap_to_oracle_pct=boot_t + 0.01)
    assert _fig(above, "gap_to_oracle")["state"] == "holds" and above["verdict"].iloc[0] == "stop"
    # the decided figures' rows carry the bootstrap-t interval; the SE and df stay the Welch t's
    pol = _fig(between, "policy_gain")
    assert (pol["ci_low"], pol["ci_high"]) == pytest.approx((f["policy_gain_lo"][0], f["policy_gain_hi"][0]))
    assert pol["se"] == pytest.approx(f["policy_gain_se"][0])


def test_a_noise_free_surface_has_bootstrap_t_intervals_and_stops():
    # runs differ by a constant factor, invocations not at all: on decode-only steps every resample's
    # figure is the sample's with a zero SE (0/0: pivot 0), so the bootstrap-t interval is the point
    def lat(k, t, f, r, m, i):
        return S.BASE_US[k] * (0.8 if f else 1.0) * (1.0 + 0.05 * t) * (1.0 + 0.01 * r)

    d = _decide(lat, seq="ACBC" * 8, modes=("graph", "eager"))
    decided = d[d["decided"]]
    assert decided["ci_high"].notna().all() and (decided["state"] == "holds").all()
    assert d["verdict"].iloc[0] == "stop"
