"""The simulator recovers the noise it was given, and the rule does not read flat noise as headroom."""

from __future__ import annotations

import numpy as np
import pytest

from headroom.analysis import simulate as sim

REFERENCE = "data/reference/h200/default"


@pytest.fixture(scope="module")
def graph():
    return sim.reference_mode(REFERENCE, "graph")


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


def test_flat_truth_with_the_references_graph_noise_rarely_continues(graph):
    mc = sim.monte_carlo(graph, sim.flat(graph), sim.estimate_noise(graph), seeds=12, seed=1)
    assert (mc["verdict"] == "continue").sum() <= 1
    assert (mc["gap_to_oracle_true"].abs() < 1e-9).all()  # flat: the truth of the gap is exactly 0
