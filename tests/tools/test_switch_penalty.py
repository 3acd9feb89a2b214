"""tools/switch_penalty.py: the lifecycle's own switch timing once per amount of work between the
kernels, on the same seeded plan, summarised pair by pair (the GPU run is in data/checks/h200/)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from tools import switch_penalty

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "data/reference/h200/mooncake-conv-flashinfer-3x30"


def _rows(work: float, values: list[float]) -> pd.DataFrame:
    n = len(values)
    return pd.DataFrame(
        {
            "work_l2": [work] * n,
            "mode": ["eager"] * n,
            "invocation": list(range(n)),
            "candidate": ["a"] * n,
            "candidate_b": ["b"] * n,
            "value": values,
            "penalty_pct": [v / 10 for v in values],
            "same_us": [10.0] * n,
        }
    )


def test_the_summary_compares_each_setting_with_the_first_pair_by_pair():
    df = pd.concat([_rows(0.0, [1.0, 2.0, 9.0]), _rows(1.0, [0.5, 1.0, 3.0])], ignore_index=True)
    by = {r["work_l2"]: r for r in switch_penalty.summary(df)}
    assert by[0.0]["penalty_us_median"] == 2.0 and by[0.0]["paired_diff_us_median"] == 0.0
    assert by[1.0]["penalty_us_median"] == 1.0 and by[1.0]["paired_diff_us_median"] == -1.0  # -0.5, -1, -6
    assert by[1.0]["n"] == 3 and "| 1 | eager | 3 |" in switch_penalty.markdown(list(by.values()))


def test_every_setting_times_the_admitted_candidates_on_the_same_plan(monkeypatch):
    seen = []

    def fake_switch_rows(trace, candidates, cfg, device, rope_base, l2, log):
        seen.append((cfg["switch_work_l2"], sorted(candidates["candidate"]), cfg["switch_invocations"]))
        return [{"mode": "eager", "invocation": 0, "candidate": "a", "candidate_b": "b", "value": 1.0}]

    monkeypatch.setattr(switch_penalty.lifecycle, "switch_rows", fake_switch_rows)
    df = switch_penalty.measure(REFERENCE, [0.0, 2.0], invocations=3, pairs=1, reps=4)
    assert [w for w, _, _ in seen] == [0.0, 2.0] and sorted(df["work_l2"]) == [0.0, 2.0]
    cands = seen[0][1]
    assert cands == seen[1][1] and "native-sdpa-efficient" not in cands  # not admitted on the H200
    assert "native-sdpa-flash" not in cands  # nor, on these long contexts, the flash backend
    assert seen[0][2] == 3


def test_without_a_gpu_it_says_so(tmp_path, capsys):
    if switch_penalty.timing.cuda_available():
        pytest.skip("a GPU is present")
    assert switch_penalty.main(["--reference", str(REFERENCE), "--out", str(tmp_path)]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
