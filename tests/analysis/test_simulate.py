"""The simulator recovers the noise it was given; its vectorized fast path is the real procedure; and a
reduced Monte Carlo holds the decision to the acceptance bounds of issue 10 (docs/decision-validation.md).

Monte Carlo tolerance: a rate's bound is checked against its 95% Clopper-Pearson interval from the
seeds run (e.g. 200 seeds with 0 events: upper bound 1.8%), so a test fails only when the bound is
violated beyond Monte Carlo error.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headroom.core import defaults
from headroom.decide import decision, engine, figures
from headroom.decide import power as sim

REFERENCE = "data/reference/h200/default-gen2"
CUDA = pd.DataFrame([{"device": "cuda"}])


@pytest.fixture(scope="module")
def graph():
    return sim.reference_mode(REFERENCE, "graph")


@pytest.fixture(scope="module", params=["graph", "eager"])
def study(request):
    s = sim.load_recorded_mode(REFERENCE, request.param)
    return s, sim.layout(s)


def test_noise_estimate_recovers_planted_components(graph):
    model = sim.NoiseModel("graph", 0.01, 0.02, 0.3, 0.03, 0.01, 0.001)
    us = sim.draw_batch(sim.recorded_truth(graph), model, 1, 40, np.random.default_rng(0))[0]
    est = sim.estimate_noise(sim.with_us(graph, us))
    assert est.run_sd == pytest.approx(0.01, rel=0.35)
    assert est.block_sd == pytest.approx(0.02, rel=0.2)
    assert est.cand_run_sd == pytest.approx(0.03, rel=0.25)
    assert est.resid_sd == pytest.approx(0.01, rel=0.2)


def test_eager_between_run_variance_dwarfs_what_the_samples_imply():
    eager = sim.estimate_noise(sim.reference_mode(REFERENCE, "eager"))
    assert eager.between_over_within > 50


def _recorded_decision():
    """decision.parquet's rows as the pipeline's decision stage computes them on the reference."""
    d = Path(REFERENCE)
    runs = pd.concat([pd.read_parquet(p) for p in sorted((d / "portfolio").glob("run-?.parquet"))])
    pol = defaults.section("policies")  # train_fraction and seed included, as the stage passes them
    inputs = (pd.read_parquet(d / "trace.parquet"), runs, pd.read_parquet(d / "lifecycle.parquet"))
    figs = figures.study_figures(*inputs, **pol)
    return decision.decide(figs, None, CUDA, confidence=pol["confidence"], **defaults.section("decision"))


def test_the_simulators_one_seed_call_reproduces_decision_parquet_exactly():
    """The simulator, given a recorded study's own medians and their standard errors as its one seed,
    gives decision.parquet's figures, CIs, states and mode verdicts bit for bit: one engine. The
    generation-2 reference's eager mode is charged plan builds per shape."""
    table = _recorded_decision()
    for mode in ("graph", "eager"):
        s = sim.load_recorded_mode(
            REFERENCE, mode, bootstrap_resamples=defaults.value("policies", "bootstrap_resamples")
        )
        assert mode == "graph" or s.costs.plan_us_by_shape  # plan charges are exercised
        us, sem2 = s.md.us[None], s.md.sem2[None]
        mc = sim.run_mc(s, sim.layout(s), np.ones(us.shape[2:]), us, redraw=False, sem2=sem2)
        rows = table[table["mode"] == mode].set_index("figure")
        for f in ("gap_to_oracle", "policy_gain", "phase_split_gain", "kernel_vs_best_unfused"):
            got = [mc[k].iloc[0] for k in (f, f"{f}_lo", f"{f}_hi", f"{f}_se")]
            assert got == [rows.loc[f, k] for k in ("estimate", "ci_low", "ci_high", "se")], (mode, f)
        for f in engine.DECIDED:
            assert mc[f"{f}_state"].iloc[0] == rows.loc[f, "state"], (mode, f)
        assert mc["verdict"].iloc[0] == rows["mode_verdict"].iloc[0], mode


def test_simulated_medians_carry_their_standard_error(study):
    s, L = study
    mc_small = sim.run_mc(s, L, sim.flat(s.md), sim._noise(s.md, s.model, 4, 3, 1), redraw=False)
    assert np.isfinite(mc_small["policy_gain"]).all()
    us = np.full((1, 1, 2, 2), 100.0)
    assert sim._sem2(us, s.model) == pytest.approx((s.model.within_sd * 100.0) ** 2)


def test_scaled_noise_carries_scaled_standard_errors(study, monkeypatch):
    """At noise x k every simulated median's standard error is k x the study's within-run sd (the
    residual it is part of is scaled by k): regret-aware sees the noise it is fitted under. (Before,
    the engine got the 1x standard error at every scale.)"""
    s, L = study
    seen = []
    real = engine.figures

    def spy(L, b, truth=None):
        seen.append((b.us, b.sem2))
        return real(L, b, truth)

    monkeypatch.setattr(engine, "figures", spy)
    for k in (0.5, 1.0, 4.0):
        sim.run_mc(s, L, sim.flat(s.md), sim._noise(s.md, s.model, 2, 3, 1), k, redraw=False)
        us, sem2 = seen[-1]
        assert np.sqrt(sem2) == pytest.approx(k * s.model.within_sd * us, rel=1e-12), k


# ----------------------------------------------------------------------------------------------
# Reduced Monte Carlo: the acceptance bounds (the full run: tools/simulate_decision.py)
# ----------------------------------------------------------------------------------------------

SEEDS = 200


def _ok_at_most(x, bound):
    """The rate's 95% Monte Carlo interval reaches down to ``bound`` or below."""
    return sim._rate(x)[1] <= bound


def _ok_at_least(x, bound):
    return sim._rate(x)[2] >= bound


@pytest.fixture(scope="module")
def noise(study):
    s, p = study
    return sim._noise(s.md, s.model, SEEDS, 3, 11), sim._noise(s.md, s.model, 60, 3, 12)


@pytest.mark.parametrize("scale", [0.5, 1.0, 4.0])
def test_flat_truth_rarely_continues(study, noise, scale):
    s, L = study
    mc = sim.run_mc(s, L, sim.flat(s.md), noise[0], scale)
    assert _ok_at_most(mc["verdict"] == "continue", 0.05)
    assert (mc["gap_to_oracle_true"].abs() < 1e-9).all()  # flat: the truth of the gap is exactly 0
    # the rule's interval (decision-v3.3's) alone says what the rule's verdict says about stop (the
    # candidates' states are read the way the rule reads its own); at three runs it is v3.1's
    assert (mc["stop_rule"] == (mc["verdict"] == "stop")).all()
    assert (mc["stop_boot_t"] == mc["stop_rule"]).all()
    if s.md.mode == "graph" and scale == 1.0:
        # Known shortfall, not hidden: the gap holds on a bound biased up by the winner's curse, so
        # graph-mode stop on a flat surface is 41.0% here at the reference's 48 invocations under the
        # bootstrap-t interval of decision-v3.1 (58.5% under v3's Welch t; target 80%: wider at three
        # runs, docs/decision-validation.md). The bound here guards against it getting worse.
        assert _ok_at_least(mc["verdict"] == "stop", 0.35)


def test_boundary_nulls_rarely_exceed_and_rarely_stop(study, noise):
    s, L = study
    md, thr = s.md, s.thresholds
    cases = (
        (lambda x: sim.phase_split(md, x), "gap_to_oracle_bound", thr["max_gap_to_oracle_pct"], "gap"),
        (lambda x: sim.beyond_phase(md, x), "policy_gain", thr["max_policy_gain_pct"], "policy"),
    )
    for make, figure, target, name in cases:
        e = sim.effect_for_truth(s, L, make, target, figure, noise[1])
        mc = sim.run_mc(s, L, make(e), noise[0])
        tol = 0.25 if md.mode == "graph" else 0.6  # pilot vs run: MC error (eager's truth is noisy)
        assert mc[f"{figure}_true"].mean() == pytest.approx(target, abs=tol)
        assert _ok_at_most(
            mc[f"{name}_to_oracle_state" if name == "gap" else "policy_gain_state"] == "exceeds", 0.05
        )
        assert _ok_at_most(mc["verdict"] == "stop", 0.05), name  # P(stop | a figure at its threshold)


def test_pure_phase_split(study, noise):
    s, L = study
    mc = sim.run_mc(s, L, sim.phase_split(s.md), noise[0])
    target = mc["policy_gain_true"].mean()  # < 0: fitted policies switch among equal tiles and pay for it
    covers = (mc["policy_gain_lo"] <= target) & (target <= mc["policy_gain_hi"])
    assert _ok_at_least(covers, 0.90)
    if s.md.mode == "graph":
        # 24 redrawn test invocations: the 9% gap is detected in ~99% of seeds; each continue names
        # the phase split
        assert _ok_at_least(mc["verdict"] == "continue", 0.85)
        assert (mc["names_phase_split"] == (mc["verdict"] == "continue")).all()
        free = replace(s, costs=sim.LifecycleCosts())  # without lifecycle costs the truth is 0
        mc0 = sim.run_mc(free, sim.layout(free), sim.phase_split(s.md), noise[0])
        assert _ok_at_least(mc0["policy_gain"].abs() <= 0.3, 0.95)


def test_the_profile_headline_is_one_holm_family_of_its_parts():
    """The deployment profile's headline decides its parts' four figures as one Holm family: it
    continues exactly when one of them exceeds there, which is never more often than in the part's
    own mode family; flat parts rarely continue; effects are planted in the graph part."""
    parts = sim.profile_parts(REFERENCE)
    assert [p.step for p in parts] == list(figures.deployment_profile())
    assert parts[sim.planted_part(parts)].s.md.mode == "graph"
    mcs = [sim.run_mc(p.s, p.L, sim.flat(p.s.md), sim._part_noise(p, 60, 0)) for p in parts]
    out = sim.profile_rule(parts, mcs)
    assert out["exceeds"].shape == (60, 2 * len(parts))
    assert ((out["verdict"] == "continue") == out["exceeds"].any(axis=1)).all()
    for j, mc in enumerate(mcs):
        assert (out["exceeds"][:, 2 * j + 1] <= (mc["policy_gain_state"] == "exceeds")).all()
    assert _ok_at_most(out["verdict"] == "continue", 0.05)


def test_power_is_stated_without_calling_a_bound_an_mde():
    reached = pd.DataFrame({"true_policy_gain_pct": [0.0, 2.0, 4.0], "policy_exceeds": [0.0, 0.6, 1.0]})
    st = sim.power_statement(reached)
    assert st["mde_pct"] == pytest.approx(2.0 + 0.2 / 0.4 * 2.0) and "minimum detectable" in st["text"]
    short = pd.DataFrame({"true_policy_gain_pct": [0.0, 12.3], "policy_exceeds": [0.0, 0.16]})
    st = sim.power_statement(short)
    assert not np.isfinite(st["mde_pct"])
    assert st["text"] == "no effect up to 12.30% reaches 80% power (largest power seen 16%)"


def test_graph_power_grows_with_the_planted_effect_and_noise_matters(study, noise):
    s, L = study
    if s.md.mode != "graph":
        pytest.skip("eager's power at the reference's length is near its floor (docs/decision-validation.md)")
    curve = sim.power_curve(s, L, noise[1], effects=(0.0, 0.35), scales=(0.25, 4.0))
    quiet = curve[curve["noise_scale"] == 0.25].set_index("effect")["policy_exceeds"]
    loud = curve[curve["noise_scale"] == 4.0].set_index("effect")["policy_exceeds"]
    assert quiet[0.0] <= 0.05 and quiet[0.35] >= 0.8 and loud[0.35] < quiet[0.35]


def test_a_design_spends_the_same_cells_on_more_runs():
    """``Design`` simulates another study design on a recorded study's noise: 6 runs of half the
    trace time as many cells as 3 runs of all of it, and narrow the gap bound's interval (its run
    part has R - 1 degrees of freedom), which is what lets a flat graph surface reach `stop`."""
    s = sim.load_recorded_mode("data/reference/h200/default-gen2-long", "graph")
    widths = {}
    for runs, n in ((3, 200), (6, 100)):
        d, r = sim.Design(runs, n).apply(s, seed=1)
        assert (r, d.md.us.shape[1], d.md.us.shape[0]) == (runs, n, 3)  # the recorded runs stay the source
        mc = sim.run_mc(d, sim.layout(d), sim.flat(d.md), sim._noise(d.md, s.model, 40, r, 5))
        widths[runs] = float((mc["gap_to_oracle_bound_hi"] - mc["gap_to_oracle_bound_lo"]).median())
    assert widths[6] < 0.6 * widths[3]
    same, runs = sim.Design().apply(s)
    assert same is not s and same.md is s.md and runs == len(s.md.runs)


def test_the_eager_gap_bound_is_a_winners_curse_that_more_runs_do_not_shrink():
    """Eager `stop` on a flat surface (true gap 0) is bound by the gap bound's mean, not its width:
    run b's own per-invocation oracle over the candidates sits ~20% above on eager's per-cell noise,
    the same at 6 runs as at 3, and it shrinks in proportion to the noise; at 1% of the noise eager
    stops (docs/decision-validation.md, the length the profile headline needs)."""
    grid = ((sim.Design(), (1.0, 0.01)), (sim.Design(runs=6), (1.0,)))
    one, small, six = (r for _, r in sim.stop_sweep(REFERENCE, grid, seeds=20).iterrows())
    assert one["gap_to_oracle_bound_mean"] - one["gap_to_oracle_bound_halfwidth"] > 5  # % (threshold 1%)
    assert six["gap_to_oracle_bound_mean"] == pytest.approx(one["gap_to_oracle_bound_mean"], rel=0.1)
    assert six["gap_to_oracle_bound_halfwidth"] < one["gap_to_oracle_bound_halfwidth"]
    assert small["gap_to_oracle_bound_mean"] == pytest.approx(0.01 * one["gap_to_oracle_bound_mean"], rel=0.3)
    assert one["stop"] == six["stop"] == 0.0 and one["gap_holds"] == 0.0
    assert small["stop"] == 1.0
