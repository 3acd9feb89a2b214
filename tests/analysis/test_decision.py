"""The decision rule (v4) on hand-built surfaces whose verdicts are known."""

from __future__ import annotations

import zlib

import numpy as np
import pandas as pd
import pytest

from headroom.decide import decision, figures, rule
from tests import analysis_sets as S

FAST = {"bootstrap_resamples": 300, "random_draws": 20}
# The hand-built traces are short (12 test invocations): the invocation floor is lowered for them; a
# test below holds it at the default.
FEW = {"min_test_invocations": 5}


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
    return decision.decide(figs, sweep, S.environment(env), deployment=deployment, **{**FEW, **thr})


def _fig(d, figure, mode="graph"):
    return d[(d["mode"] == mode) & (d["figure"] == figure)].iloc[0]


def test_flat_surface_on_a_gpu_stops_with_one_row_per_mode_and_figure():
    d = _decide(lambda k, t, f, r, m, i: S.BASE_US[k] * _noise(r, i, t, f, 0.001))
    assert set(d["verdict"]) == {"stop"} and set(d["reason_code"]) == {"holds"}
    assert d["reason"].iloc[0].startswith("Stop over the timed modes")
    decided = d[d["decided"]]
    assert list(decided["figure"]) == ["gap_to_oracle", "policy_gain"]
    assert (decided["state"] == "holds").all()
    need = {
        "estimate",
        "ci_low",
        "ci_high",
        "threshold",
        "state",
        "verdict",
        "reason",
        "reason_code",
        "p_value",
    }
    assert need <= set(d.columns)
    assert not d.duplicated(["mode", "figure"]).any()


def test_off_the_gpu_is_no_decision():
    d = _decide(S.flat, env="interpret")
    assert set(d["verdict"]) == {"no-decision"} and set(d["reason_code"]) == {"not-gpu"}
    assert "not GPU measurements" in d["reason"].iloc[0]


def test_a_pure_phase_split_stops_and_ships_the_pair():
    # decode (C) is 30% faster fused; prefill (A, B) 30% faster unfused; tiles equal: one kernel per
    # phase, the policy figure's baseline, captures the whole gap
    def lat(k, t, f, r, m, i):
        phase = S.SHAPES[k][0]
        better = f if phase == "decode" else not f
        return S.BASE_US[k] * (0.7 if better else 1.0) * _noise(r, i, t, f, 0.002)

    d = _decide(lat, seq="ACBCAC" * 8)
    assert _fig(d, "gap_to_oracle").state == "exceeds"
    assert _fig(d, "policy_gain").state == "holds"
    assert (d["verdict"].iloc[0], d["reason_code"].iloc[0]) == ("stop", "phase-split")
    assert "one kernel per phase captures it" in d["reason"].iloc[0]


def test_headroom_a_policy_can_learn_continues_on_the_policy_figure():
    # within decode, shape C wants tile 2 (40% faster), shape D (another decode) wants tile 0
    def lat(k, t, f, r, m, i):
        fast = (k == "C" and t == 2) or (k != "C" and t == 0)
        return S.BASE_US[k] * (0.6 if fast else 1.0) * _noise(r, i, t, f, 0.002)

    d = _decide(lat, seq="ADCC" * 6)
    assert (d["verdict"].iloc[0], d["reason_code"].iloc[0]) == ("continue", "exceeds")
    assert _fig(d, "policy_gain").state == "exceeds" and _fig(d, "policy_gain").ci_low > 1.0


def test_headroom_no_deployable_policy_learns_is_an_uncapturable_stop():
    # every invocation has its own best tile (by 30%), no key predicts it: the per-invocation oracle
    # is far ahead of one kernel, and no policy gets any of it
    def lat(k, t, f, r, m, i):
        return (
            S.BASE_US[k] * (0.7 if t == zlib.crc32(str(i).encode()) % 3 else 1.0) * _noise(r, i, t, f, 0.001)
        )

    d = _decide(lat, seq="C" * 48)
    assert _fig(d, "gap_to_oracle").state == "exceeds" and _fig(d, "policy_gain").state == "holds"
    assert (d["verdict"].iloc[0], d["reason_code"].iloc[0]) == ("stop", "uncapturable")
    assert "no deployable policy captures it" in d["reason"].iloc[0]
    carried = _fig(d, "gap_carried_by")
    assert carried.state == "reported" and "C 100%" in carried.detail
    richer = d[d["figure"].str.startswith("richer_gain_")]
    assert set(richer["figure"]) == {"richer_gain_exact-key", "richer_gain_bucketed"}
    assert (
        richer["detail"].str.contains("deploying it needs a runtime dispatch inside the captured graph").all()
    )


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
    assert (d["verdict"].iloc[0], d["reason_code"].iloc[0]) == ("no-decision", "noise-floor")
    assert "cannot reach `stop`" in d["mode_reason"].iloc[0]


def test_an_interval_across_the_threshold_straddles_and_one_wider_than_it_is_a_noise_floor():
    states = rule.states([0.5, -2.0, 0.2], [1.5, 2.5, 0.8], [1.6, 2.6, 0.9], threshold=1.0)
    assert states.tolist() == ["straddles", "noise-floor", "holds"]
    assert rule.states([np.nan], [1.0], [1.0], threshold=1.0).tolist() == ["no-interval"]


@pytest.mark.parametrize("runs", [(1,), (1, 2)])
def test_too_few_runs_is_no_decision_with_the_reason(runs):
    d = _decide(S.flat, runs=runs)
    assert (d["verdict"].iloc[0], d["reason_code"].iloc[0]) == ("no-decision", "few-runs")
    assert "fewer than 3 runs" in d["reason"].iloc[0]


def test_a_part_with_too_few_test_invocations_is_reported_and_the_headline_is_decided_on_the_others():
    # 16 test invocations of decode-only steps, 4 of mixed ones: at a floor of 10 the mixed part is
    # left out, named, and the headline is the decode-only part's
    tr = S.trace("ACCCCC" * 8)
    tm = S.timings(
        tr, lambda k, t, f, r, m, i: S.BASE_US[k] * _noise(r, i, t, f, 0.001), modes=("graph", "eager")
    )
    d = decision.decide(
        figures.study_figures(tr, tm, **FAST), None, S.environment("cuda"), min_test_invocations=10
    )
    mixed = d[d["mode"] == "eager@mixed"]
    assert set(mixed["mode_reason_code"]) == {"too-few-invocations"} and not mixed["decided"].any()
    assert set(mixed["state"]) == {"reported"}
    assert (d["verdict"].iloc[0], d["reason_code"].iloc[0]) == ("stop", "holds")
    assert "not decided: eager@mixed (too-few-invocations)" in d["reason"].iloc[0]
    at_default = decision.decide(figures.study_figures(tr, tm, **FAST), None, S.environment("cuda"))
    assert (at_default["verdict"].iloc[0], at_default["reason_code"].iloc[0]) == (
        "no-decision",
        "too-few-invocations",
    )
    # no part decided: the headline says so and names them; the counts are each part's own
    said = at_default["reason"].iloc[0]
    assert ": no part of it could be decided; not decided: " in said, said
    assert "(0 < 0)" not in said and "fewer test invocations than the decision needs (4 < 30)" in said


def test_eager_timings_that_include_the_host_are_reported_not_decided():
    tr = S.trace("ACBC" * 8)
    tm = S.timings(
        tr, lambda k, t, f, r, m, i: S.BASE_US[k] * _noise(r, i, t, f, 0.001), modes=("graph", "eager")
    )
    tm["timing_method"] = "cuda_events"  # recorded before eager calls were timed on a busy GPU
    d = decision.decide(figures.study_figures(tr, tm, **FAST), None, S.environment("cuda"), **FEW)
    for unit in ("eager", "eager@mixed"):
        rows = d[d["mode"] == unit]
        assert set(rows["mode_reason_code"]) == {"host-included"} and not rows["decided"].any()
    assert _fig(d, "gap_to_oracle", "graph").mode_verdict == "stop"  # graph timings are unaffected
    assert "eager@mixed (host-included)" in d["reason"].iloc[0]


def test_the_headline_is_the_deployment_profiles_parts_each_decided_alone():
    # in graph mode decode C wants tile 2 and decode D tile 0 (by 40%); eager is flat: graph
    # continues, eager stops, and the profile's decode-only part (graph) carries the headline
    def lat(k, t, f, r, m, i):
        fast = m == "graph" and ((k == "C") == (t == 2))
        return S.BASE_US[k] * (0.6 if fast else 1.0) * _noise(r, i, t, f, 0.001)

    d = _decide(lat, seq="ACDC" * 8, modes=("graph", "eager"))
    parts = d[d["family"] == "profile"]
    assert set(parts["mode"]) == {"graph@decode-only", "eager@mixed"}
    assert set(parts.loc[parts["decided"], "figure"]) == {"gap_to_oracle", "policy_gain"}
    assert d["verdict"].iloc[0] == "continue"
    assert d["reason"].iloc[0].startswith("Continue for the deployment profile")
    assert _fig(d, "policy_gain", "graph@decode-only").state == "exceeds"  # batch-keyed learns C vs D
    assert _fig(d, "gap_to_oracle", "eager@mixed").mode_reason_code == "too-few-invocations"  # 4 prefills
    assert _fig(d, "gap_to_oracle", "eager").mode_verdict == "stop"  # per mode, beside the headline
    assert (d["rule_version"] == rule.RULE_VERSION).all()


def test_a_speedups_interval_stays_positive():
    # a ratio's percentile interval lies inside the resamples' ratios, which are all positive
    def lat(k, t, f, r, m, i):
        return S.BASE_US[k] * (0.3 if f else 1.0) * np.exp(_noise(r, i, t, f, 0.6) - 1.0)

    d = _decide(lat, modes=("eager",))
    speed = d[d["unit"] == "x"].dropna(subset=["ci_low"])
    assert len(speed) and (speed["ci_low"] > 0).all() and (speed["ci_low"] <= speed["ci_high"]).all()


def test_the_rule_is_one_function_of_the_intervals():
    # rule.family decides from the interval ends alone, seed by seed
    figs = {
        "gap_to_oracle_lo": np.array([2.0, 2.0, -0.1, 0.2]),
        "gap_to_oracle_hi": np.array([4.0, 4.0, 0.5, 3.0]),
        "gap_to_oracle_bound_hi": np.array([5.0, 5.0, 0.8, 3.5]),
        "policy_gain_lo": np.array([1.5, -0.5, -0.5, -0.5]),
        "policy_gain_hi": np.array([3.0, 0.5, 0.5, 0.5]),
    }
    out = rule.family(figs, {"gap_to_oracle": 1.0, "policy_gain": 1.0})
    assert out["verdict"].tolist() == ["continue", "stop", "stop", "no-decision"]
    assert out["reason_code"].tolist() == ["exceeds", "uncapturable", "holds", "noise-floor"]


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


def test_thresholds_left_out_are_the_default_studys_and_unknown_ones_are_refused():
    from headroom.core import defaults

    cfg = defaults.section("decision")
    t = decision.Thresholds.of({})
    assert t.as_dict() == {k: cfg[k] for k in t.as_dict()}
    assert decision.Thresholds.of({"max_policy_gain_pct": 5.0}).max_policy_gain_pct == 5.0
    with pytest.raises(TypeError, match="max_gap_pct"):
        decision.Thresholds.of({"max_gap_pct": 1.0})


def test_graph_sweep_fusion_is_reported_not_decided():
    d = _decide(S.flat, sweep=S.graph_sweep(graph_speedup=1.5))
    row = _fig(d, "fusion_speedup_sweep")
    assert row.state == "reported" and row.estimate == pytest.approx(1.5)
    assert d["verdict"].iloc[0] == "stop"


def test_the_verdicts_sensitivity_to_the_switch_penalty_is_reported():
    life = S.lifecycle()
    tr = S.trace("ACBC" * 8)
    tm = S.timings(tr, lambda k, t, f, r, m, i: S.BASE_US[k] * _noise(r, i, t, f, 0.001), modes=("graph",))
    d = decision.decide(figures.study_figures(tr, tm, life, **FAST), None, S.environment("cuda"), **FEW)
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
    assert d["verdict"].iloc[0] == "stop" and (d["rule_version"] == "decision-v4").all()
