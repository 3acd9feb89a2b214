"""Noise statistics on hand-made data whose answers are known."""

import numpy as np
import pandas as pd
import pytest

from headroom.measure import noise


def _rows(medians: dict[tuple[int, int, str], float], mode: str = "eager") -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"run": r, "mode": mode, "invocation": i, "candidate": c, "median_us": m}
            for (r, i, c), m in medians.items()
        ]
    )


def _across_runs(medians: dict[tuple[int, str], list[float]]) -> dict[tuple[int, int, str], float]:
    """{(invocation, candidate): [its median in run 1, run 2, ...]} in ``_rows``' keys."""
    return {(run, i, c): m for (i, c), ms in medians.items() for run, m in enumerate(ms, start=1)}


def test_rel_std_matches_hand_computation():
    samples = pd.DataFrame(
        {
            "run": 1,
            "mode": "eager",
            "invocation": 0,
            "candidate": ["a"] * 4 + ["b"] * 4 + ["c"],
            "latency_us": [9.0, 11.0, 9.0, 11.0, 5.0, 5.0, 5.0, 5.0, 7.0],
        }
    )
    out = noise.rel_std(samples).set_index("candidate")
    # a: mean 10, sample std sqrt(4/3) -> 11.547 %; b: constant -> 0 %; c: one sample, no spread.
    assert out.loc["a", "n"] == 4
    assert out.loc["a", "rel_std_pct"] == pytest.approx(100 * np.sqrt(4 / 3) / 10)
    assert out.loc["b", "rel_std_pct"] == 0.0
    assert (out.loc["c", "n"], out.loc["c", "std_us"], out.loc["c", "rel_std_pct"]) == (1, 0.0, 0.0)


def test_median_spread_across_runs():
    rows = _rows(_across_runs({(0, "a"): [10.0, 11.0, 12.0], (0, "b"): [4.0, 4.0, 4.0]}))
    out = noise.median_spread(rows).set_index("candidate")
    assert out.loc["a", "runs"] == 3
    assert out.loc["a", "spread_pct"] == pytest.approx(100 * 2 / 11)
    assert out.loc["b", "spread_pct"] == 0.0


def test_winners_and_stability_known_answers():
    # invocation 0: b wins in every run; invocation 1: a, c, a -> unstable, modal a (2/3).
    medians = {
        (0, "a"): [5.0, 5.0, 5.0],
        (0, "b"): [4.0, 4.5, 3.9],
        (0, "c"): [6.0, 6.0, 6.0],
        (1, "a"): [2.0, 2.2, 2.0],
        (1, "b"): [3.0, 3.0, 3.0],
        (1, "c"): [2.1, 2.1, 2.1],
    }
    rows = _rows(_across_runs(medians))
    w = noise.winners(rows).set_index(["run", "invocation"])
    assert w.loc[(1, 0), "winner"] == "b"
    assert w.loc[(1, 0), "runner_up"] == "a"
    assert w.loc[(1, 0), "margin_pct"] == pytest.approx(25.0)
    assert w.loc[(2, 1), "winner"] == "c"

    s = noise.winner_stability(rows).set_index("invocation")
    assert bool(s.loc[0, "stable"]) and s.loc[0, "distinct_winners"] == 1
    assert not bool(s.loc[1, "stable"]) and s.loc[1, "distinct_winners"] == 2
    assert s.loc[1, "modal_winner"] == "a"
    assert s.loc[1, "modal_share"] == pytest.approx(2 / 3)

    summary = noise.stability_summary(rows).iloc[0]
    assert summary["stable_fraction"] == pytest.approx(0.5)
    # run pairs (1,2) (1,3) (2,3): invocation 1 disagrees in (1,2) and (2,3) -> 2 of 6 comparisons.
    assert summary["pair_disagreement"] == pytest.approx(2 / 6)


def test_winner_tie_goes_to_smaller_candidate_id():
    rows = _rows({(1, 0, "z"): 3.0, (1, 0, "m"): 3.0})
    assert noise.winners(rows).iloc[0]["winner"] == "m"


def test_floor_flags_and_run_summary():
    rows = _rows({(1, 0, "a"): 5.0, (1, 0, "b"): 50.0})
    rows["floor_us"] = 2.0
    flags = noise.floor_flags(rows, factor=3.0)
    assert list(flags["candidate"]) == ["a"]
    assert flags.iloc[0]["floor_ratio"] == pytest.approx(2.5)
    samples = pd.DataFrame(
        {
            "run": 1,
            "mode": "eager",
            "invocation": 0,
            "candidate": ["a", "a", "b", "b"],
            "latency_us": [4.0, 6.0, 50.0, 50.0],
        }
    )
    summary = noise.run_summary(rows, samples, factor=3.0).iloc[0]
    assert summary["near_floor"] == 1
    assert summary["samples"] == 4
    assert summary["rel_std_max_pct"] == pytest.approx(100 * np.sqrt(2) / 5)


def test_missing_columns_raise_naming_them():
    with pytest.raises(ValueError, match="latency_us"):
        noise.rel_std(pd.DataFrame({"run": [1], "mode": ["eager"], "invocation": [0], "candidate": ["a"]}))
    with pytest.raises(ValueError, match="factor"):
        noise.floor_flags(_rows({(1, 0, "a"): 1.0}), factor=0)


def test_sampler_summary_counts_stop_reasons_and_accepts_old_artifacts():
    rows = _rows({(1, 0, "a"): 5.0, (1, 0, "b"): 50.0, (1, 1, "a"): 6.0}, mode="graph")
    assert noise.sampler_summary(rows) is None  # recorded before the sampler: no columns, no table
    rows = rows.assign(
        reps=[5, 28, 9],
        rse_pct=[0.2, 0.9, 0.4],
        stop_reason=["target", "count_cap", "target"],
        cell_wall_s=0.01,
    )
    s = noise.sampler_summary(rows).iloc[0]
    assert (s["cells"], s["samples"], s["reps_max"], s["reps_median"]) == (3, 42, 28, 9.0)
    assert (s["target"], s["count_cap"], s["time_cap"], s["fixed"]) == (2, 1, 0, 0)
    assert s["rse_max_pct"] == 0.9 and s["sampling_s"] == pytest.approx(0.03)


def test_noise_section_replays_a_recorded_reference_without_sampler_columns():
    from pathlib import Path

    from headroom.core import artifacts
    from headroom.report.sections import noise as section

    # the references recorded before the adaptive sampler are retired (default-gen2, the last, with
    # tools/restore_reference.py): a committed one stands in with the columns the sampler added
    # taken out, which leaves exactly the columns default-gen2's runs had
    ref = Path(__file__).resolve().parents[2] / "data/reference/h200/mooncake-conv-flashinfer-3x30/portfolio"
    rows = pd.concat([artifacts.read(ref / f"run-{r}.parquet") for r in (1, 2, 3)], ignore_index=True)
    rows = rows.drop(columns=["rse_pct", "stop_reason", "cell_wall_s"])
    s = section.section(rows, None, "")
    assert any("before the adaptive sampler" in t for t in s.text)


def test_noise_section_shows_the_sampler_table_when_rows_have_its_columns():
    from headroom.report.sections import noise as section

    rows = _rows({(1, 0, "a"): 5.0, (1, 0, "b"): 6.0, (2, 0, "a"): 5.1, (2, 0, "b"): 6.2})
    rows = rows.assign(std_us=0.1, reps=10, rse_pct=0.5, stop_reason="target", cell_wall_s=0.01)
    s = section.section(rows, None, "")
    titles = [t.title for t in s.tables]
    assert any("why cells stopped" in t for t in titles), titles
    assert not any("before the adaptive sampler" in t for t in s.text)
