"""The held-out GPU test's between-lease interval, on the CPU: the record it reads and the interval
it builds (tests/dispatch/leases.py)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.dispatch import leases

RUNS = [0.748, 0.741, 0.761, 0.766, 0.74, 0.785]  # default-flashinfer-6x160's recorded runs


def test_the_record_names_each_fresh_lease_and_its_gain():
    gains = leases.fresh_gains("default-flashinfer-6x160")
    assert len(gains) >= leases.MIN_FRESH
    assert leases.fresh_gains("no-such-reference") == []


def test_the_interval_covers_the_fresh_leases_the_one_lease_interval_missed():
    lo, hi = leases.interval(RUNS, [0.819, 0.852])
    # the usual one-new-draw interval on three lease values, t(2) = 4.303
    values = np.array([np.mean(RUNS), 0.819, 0.852])
    half = 4.302653 * values.std(ddof=1) * np.sqrt(4 / 3)
    assert (lo, hi) == pytest.approx((values.mean() - half, values.mean() + half), abs=1e-6)
    assert lo < 0.819 < 0.852 < hi
    # and it still fails a table whose choices gain nothing, or lose
    assert lo > 0.0


def test_each_recorded_lease_lay_inside_the_interval_of_the_leases_before_it():
    # out of sample: each lease after the first two was measured after its interval was built
    gains = leases.fresh_gains("default-flashinfer-6x160")
    for k in range(leases.MIN_FRESH, len(gains)):
        lo, hi = leases.interval(RUNS, gains[:k])
        assert lo <= gains[k] <= hi, (k, gains[k], lo, hi)


def test_too_few_fresh_leases_is_one_line_naming_the_record():
    with pytest.raises(ValueError, match=r"1 fresh lease\(s\) recorded, at least 2 .*heldout_leases.tsv"):
        leases.interval(RUNS, [0.819])


def test_a_record_with_other_columns_is_refused(tmp_path):
    bad = tmp_path / "leases.tsv"
    bad.write_text("reference\tgain\nx\t1.0\n")
    with pytest.raises(ValueError, match=r"columns \('reference', 'gain'\), expected"):
        leases.fresh_gains("x", bad)
