"""What a study could detect (decide/power.py): the noise model recovers what it was given, simulated
studies are decided by the pipeline's own engine and rule, and the power statement never calls a
bound an MDE."""

from __future__ import annotations

import glob
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from headroom.core import defaults
from headroom.decide import decision, engine, figures, measured, power, rule

REFERENCE = "data/reference/h200/default-flashinfer-6x160"
POL = defaults.section("policies")
TF, SEED = POL["train_fraction"], POL["seed"]


@pytest.fixture(scope="module")
def recorded():
    trace = pd.read_parquet(f"{REFERENCE}/trace.parquet")
    runs = sorted(p for p in glob.glob(f"{REFERENCE}/portfolio/run-*.parquet") if "samples" not in p)
    timings = pd.concat([pd.read_parquet(p) for p in runs])
    life = pd.read_parquet(f"{REFERENCE}/lifecycle.parquet")
    options = {k: v for k, v in POL.items() if k not in ("train_fraction", "seed")}
    opts, costs, modes = measured.checked_modes(trace, timings, life, TF, options)
    return (trace, timings, life), replace(opts, bootstrap_resamples=200), costs, {m.mode: m for m in modes}


def test_noise_estimate_recovers_planted_components(recorded):
    graph = recorded[3]["graph"]
    model = power.NoiseModel("graph", 0.01, 0.02, 0.3, 0.03, 0.01, 0.001)
    us = power.draw_batch(power.recorded_truth(graph), model, 1, 40, np.random.default_rng(0))[0]
    est = power.estimate_noise(replace(graph, us=us, runs=list(range(40)), sem2=np.zeros_like(us)))
    assert est.run_sd == pytest.approx(0.01, rel=0.5)  # 40 run offsets, blocks correlated along the trace
    assert est.block_sd == pytest.approx(0.02, rel=0.2)
    assert est.cand_run_sd == pytest.approx(0.03, rel=0.25)
    assert est.resid_sd == pytest.approx(0.01, rel=0.2)


def test_a_simulated_study_of_one_seed_is_decided_as_the_pipeline_decides_it(recorded):
    # the simulator's rule.family on the engine's arrays gives the states decision.parquet holds
    inputs, _, _, _ = recorded
    figs = figures.study_figures(*inputs, **POL, switch_sensitivity=False)
    d = decision.decide(figs, None, pd.DataFrame([{"device": "cuda"}]), **defaults.section("decision"))
    opts = measured.Options.from_mapping(
        {k: v for k, v in POL.items() if k not in ("train_fraction", "seed")}
    )
    _, costs, modes = measured.checked_modes(*inputs, TF, {})
    md = next(m for m in modes if m.mode == "graph")
    f = engine.figures(engine.layout(md, opts, costs, TF, SEED), engine.Batch(md.us[None], md.sem2[None]))
    thr = {g: defaults.value("decision", rule.THRESHOLD_OF[g]) for g in rule.DECIDED}
    states = rule.family(f, thr)
    row = d[(d["mode"] == "graph") & (d["figure"] == "gap_to_oracle")].iloc[0]
    assert row["estimate"] == pytest.approx(float(f["gap_to_oracle"][0]))
    assert row["state"] == states["gap_to_oracle_state"][0] and row["mode_verdict"] == states["verdict"][0]


def test_the_power_statement_never_calls_a_bound_an_mde():
    reached = [
        {"true_policy_gain_pct": 0.0, "policy_exceeds": 0.0},
        {"true_policy_gain_pct": 2.0, "policy_exceeds": 0.6},
        {"true_policy_gain_pct": 4.0, "policy_exceeds": 1.0},
    ]
    st = power.power_statement(reached)
    assert st["mde_pct"] == pytest.approx(2.0 + 0.2 / 0.4 * 2.0) and "minimum detectable" in st["text"]
    short = [
        {"true_policy_gain_pct": 0.0, "policy_exceeds": 0.0},
        {"true_policy_gain_pct": 12.3, "policy_exceeds": 0.16},
    ]
    st = power.power_statement(short)
    assert not np.isfinite(st["mde_pct"])
    assert st["text"] == "no effect up to 12.30% reaches 80% power (largest power seen 16%)"


def test_power_grows_with_the_planted_effect_on_the_studys_own_noise(recorded):
    _, opts, costs, modes = recorded
    md = modes["graph"]
    L = engine.layout(md, opts, costs, TF, SEED)
    model = power.estimate_noise(md)
    curve = power.power_curve(
        md, L, model, power.noise(md, model, 40, 6, 0), defaults.section("decision"), effects=(0.0, 0.25)
    )
    none, big = curve
    assert none["policy_exceeds"] <= 0.05 and big["policy_exceeds"] >= 0.8 and big["true_policy_gain_pct"] > 5


def test_redrawn_test_invocations_stay_in_their_strata(recorded):
    _, opts, costs, modes = recorded
    L = engine.layout(modes["graph"], opts, costs, TF, SEED)
    rows = power.redraw_rows(L, 50, np.random.default_rng(0))
    strata = L.strata[L.n_train :]
    assert (strata[rows] == strata[None, :]).all()


def test_the_decision_stage_states_the_power_of_each_decided_mode(recorded):
    # eager timings of this reference include the host: not decided, so no power is stated for them
    _, opts, costs, modes = recorded
    out = power.detectable_effect(
        modes["graph"], costs, opts, defaults.section("decision"), TF, SEED, seeds=30
    )
    assert out["runs"] == 6 and out["invocations"] == 160 and out["mode"] == "graph"
    assert np.isfinite(out["mde_pct"]) and 1.0 < out["mde_pct"] < 6.0


def test_power_in_forked_workers_states_what_one_process_states(recorded):
    # issue 36 item 3: the (mode, effect) points run in parallel with the same numbers
    _, opts, costs, modes = recorded
    args = (list(modes.values()), costs, opts, defaults.section("decision"), TF, SEED)
    one = power.detectable_effects(*args, seeds=20, workers=1)
    two = power.detectable_effects(*args, seeds=20, workers=2)
    assert one == two and set(one) == {"eager", "graph"}
