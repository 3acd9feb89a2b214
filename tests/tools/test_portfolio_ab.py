"""tools/portfolio_ab.py, the A/B of portfolio settings: its arms as typed, and its pairs of runs
(cell-by-cell ratios of medians, same-arm pairs told from cross-arm ones)."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import portfolio_ab  # noqa: E402


def test_an_arm_reads_numbers_and_booleans_as_such():
    assert portfolio_ab.parse_arm("warmup_reps=5,flush_l2=true,work_us=250.5") == {
        "warmup_reps": 5, "flush_l2": True, "work_us": 250.5
    }  # fmt: skip
    assert portfolio_ab.parse_arm("sampler=fixed") == {"sampler": "fixed"}
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        portfolio_ab.parse_arm("warmup_reps")


def _run(scale: float) -> pd.DataFrame:
    cells = [("eager", i, c, 10.0 * (i + 1)) for i in range(4) for c in ("x", "y")]
    return pd.DataFrame(cells, columns=["mode", "invocation", "candidate", "median_us"]).assign(
        median_us=lambda d: d["median_us"] * scale
    )


def test_pairs_compare_each_cell_with_its_twin_and_say_which_pairs_share_an_arm():
    runs = {("A", 1): _run(1.0), ("B", 1): _run(1.1), ("B", 2): _run(1.1), ("A", 2): _run(1.0)}
    facts = {k: {"wall_s": 1.0, "timed_s": 0.5, "untimed_s": {"eager warm-up": 0.2}} for k in runs}
    pairs, text = portfolio_ab.summarise(runs, facts, {"A": {"warmup_reps": 20}, "B": {"warmup_reps": 5}})
    assert len(pairs) == 6 and (pairs["cells"] == 8).all()
    same = pairs[pairs["same_arm"]]
    assert sorted(zip(same["run_a"], same["run_b"], strict=True)) == [("A1", "A2"), ("B1", "B2")]
    assert same["median_ratio"].tolist() == pytest.approx([1.0, 1.0])
    cross = pairs[~pairs["same_arm"]]
    assert cross["run_a"].str.startswith("A").all()  # B over A, whatever order they ran in
    assert cross["geomean_ratio"].tolist() == pytest.approx([1.1] * 4)
    assert '- arm B: {"warmup_reps": 5}' in text and "| A1 | 1.0 | 0.50 | 0.20 |" in text
