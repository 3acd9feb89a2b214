"""The one interval (decide/interval.py): the two-way bootstrap's resamples and its percentile ends."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np

from headroom.decide import engine, interval


def test_invocation_resamples_keep_each_strata_size_and_run_resamples_keep_r():
    strata = np.array([0, 0, 0, 1, 1, 2])
    counts = interval.invocation_counts(strata, 500, np.random.default_rng(0))
    assert counts.shape == (500, 6)
    for code, size in ((0, 3), (1, 2), (2, 1)):
        np.testing.assert_array_equal(counts[:, strata == code].sum(axis=1), size)
    runs = interval.run_counts(6, 500, np.random.default_rng(1))
    np.testing.assert_array_equal(runs.sum(axis=1), 6)
    assert (runs.max(axis=1) > 1).any()  # with replacement


def test_a_pair_enters_with_the_product_of_its_runs_draws_and_never_pairs_a_run_with_itself():
    A, B = engine.pairs(3)
    counts = np.array([[2.0, 1.0, 0.0], [3.0, 0.0, 0.0]])
    w = interval.pair_weights(counts, A, B)
    assert w[0].tolist() == [2.0, 0.0, 2.0, 0.0, 0.0, 0.0]  # (0,1), (0,2), (1,0), (1,2), (2,0), (2,1)
    per = np.arange(6, dtype=float)[None, :, None].repeat(2, axis=2)
    pooled = interval.pooled(per, w)
    assert pooled[0, 0] == (0 * 2 + 2 * 2) / 4 and np.isnan(pooled[0, 1])  # one run drawn: no pair


def test_the_percentile_ends_and_the_bootstrap_p_value():
    boot = np.linspace(0.0, 10.0, 1001)[None]
    lo, hi = interval.percentile(boot, 0.95)
    assert np.allclose([lo[0], hi[0]], [0.25, 9.75])
    mostly_nan = np.where(np.arange(1001) < 600, np.nan, boot)
    assert np.isnan(interval.percentile(mostly_nan, 0.95)[0]).all()
    assert interval.p_above(boot, 0.0)[0] == 2.0 / 1002.0  # never 0
    assert interval.p_above(boot, 10.0)[0] == 1.0


def test_the_two_way_bootstrap_covers_the_mean_of_a_crossed_design():
    # x[r, i] = run offset + invocation effect + noise: the cross-run figure (mean over pairs of run
    # b's mean) has two sampled sources; the crossed bootstrap's 95% interval must cover the truth
    rng = np.random.default_rng(7)
    R, n, seeds, hits = 6, 40, 200, 0
    A, B = engine.pairs(R)
    for _ in range(seeds):
        x = (
            0.5 * rng.standard_normal((R, 1))
            + rng.standard_normal((1, n))
            + 0.3 * rng.standard_normal((R, n))
        )
        ic = interval.invocation_counts(np.zeros(n), 400, rng)
        rc = interval.run_counts(R, 400, rng)
        per_boot = (x[B] @ ic.T / n)[None]  # (1, P, resamples)
        lo, hi = interval.percentile(interval.pooled(per_boot, interval.pair_weights(rc, A, B)), 0.95)
        hits += lo[0] <= 0.0 <= hi[0]
    assert 0.88 <= hits / seeds <= 1.0


def test_the_interval_stands_below_the_engine():
    tree = ast.parse(Path("headroom/decide/interval.py").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in imported if m.startswith("headroom")}
