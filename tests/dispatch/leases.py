"""What one fresh GPU lease can be held to in the held-out dispatch test: a prediction interval whose
spread is measured between machine leases, not only between the runs of one lease.

A reference's runs are recorded in one lease; the test runs on another. On the H200 the table's
held-out gain moved more between leases (the reference's six runs 0.74-0.79%; three fresh leases
+0.819%, +0.852% and +0.843%) than between one lease's runs, so an interval built from one lease's
runs (mean +/- t(R-1) sd sqrt(1 + 1/R)) covered none of the fresh leases. Here each lease is one value: the
reference lease its runs' mean, each fresh lease its measured gain (`heldout_leases.tsv`, one row per
lease, the test's output named in it). The 95% interval for one new lease is the usual one for one
new draw from k such values, mean +/- t(k-1) sd sqrt(1 + 1/k): a one-way layout's lease effect with
the within-lease spread inside each value. It takes two fresh leases at least, and narrows as
sessions add theirs.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "data/checks/h200/heldout_leases.tsv"
COLUMNS = ("reference", "lease", "tree", "gain_pct", "record")
MIN_FRESH = 2


def fresh_gains(reference: str, record: Path = RECORD) -> list[float]:
    """The held-out gains (%) fresh leases measured on `reference`, from `record`."""
    with open(record, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    if rows and tuple(rows[0]) != COLUMNS:
        raise ValueError(f"{record}: columns {tuple(rows[0])}, expected {COLUMNS}")
    return [float(r["gain_pct"]) for r in rows if r["reference"] == reference]


def interval(recorded_runs, fresh: list[float], level: float = 0.95) -> tuple[float, float]:
    """The `level` prediction interval (%) for the gain one new lease measures, from the reference
    lease's runs and the fresh leases' gains."""
    if len(fresh) < MIN_FRESH:
        raise ValueError(
            f"{len(fresh)} fresh lease(s) recorded, at least {MIN_FRESH} needed for a between-lease "
            f"interval: add the test's measured gain on each fresh lease to {RECORD.name}"
        )
    values = np.array([float(np.mean(recorded_runs)), *fresh])
    k = values.size
    half = stats.t.ppf(0.5 + level / 2, k - 1) * values.std(ddof=1) * np.sqrt(1.0 + 1.0 / k)
    return float(values.mean() - half), float(values.mean() + half)
