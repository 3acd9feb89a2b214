"""tools/runner_identity.py and tools/pilot_compare.py, the H200 checks of a code move
(data/checks/h200/2026-12-04-session13): what they report on records whose answer is known."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from tools import pilot_compare, runner_identity

ROOT = Path(__file__).resolve().parents[2]
RECORDS = ROOT / "data/checks/h200/2026-12-04-session13"


def test_the_recorded_runner_move_compares_identical_and_a_changed_case_is_named(tmp_path, capsys):
    before, after = RECORDS / "runner_before.json", RECORDS / "runner_after.json"
    assert runner_identity.compare(before, after) == 0
    assert "57 of 57 cases identical" in capsys.readouterr().out
    doc = json.loads(after.read_text())
    key = sorted(doc["cases"])[0]
    doc["cases"][key]["launches"] = [*doc["cases"][key]["launches"], "extra_kernel"]
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(doc))
    assert runner_identity.compare(before, changed) == 1
    assert f"{key}: launches differ" in capsys.readouterr().out


@pytest.mark.parametrize("shift", [0.0, 10.0])
def test_a_pilot_is_compared_with_the_reference_runs_own_spread(tmp_path, shift):
    ref = tmp_path / "ref"
    (ref / "portfolio").mkdir(parents=True)
    cells = [("eager", i, c) for i in range(4) for c in ("a", "b")]
    for run, noise in enumerate([0.99, 1.0, 1.01], start=1):
        rows = [
            dict(run=run, mode=m, invocation=i, candidate=c, median_us=100.0 * noise) for m, i, c in cells
        ]
        pd.DataFrame(rows).to_parquet(ref / "portfolio" / f"run-{run}.parquet")
    pilot = tmp_path / "pilot.parquet"
    rows = [dict(mode=m, invocation=i, candidate=c, median_us=100.0 * (1 + shift / 100)) for m, i, c in cells]
    pd.DataFrame(rows).to_parquet(pilot)
    (row,) = pilot_compare.compare(ref, pilot).to_dict("records")
    assert row["cells"] == 8 and row["reference_runs"] == 3
    # leave one out: run 1 (0.99) against the median of 1.00 and 1.01, run 2 against 1.00, run 3 (1.01) ...
    assert row["reference_run_median_abs_pct"] == pytest.approx(100 * 0.015 / 1.005)
    assert row["pilot_signed_median_pct"] == pytest.approx(shift)
