"""tools/sampler_replay.py: a recorded run's rows rebuilt under other sampler settings from the
samples it kept, in their recorded order; the recorded settings give the recorded rows back."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headroom.core import artifacts
from headroom.measure import timing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import sampler_replay  # noqa: E402

REF = ROOT / "data/reference/h200/default-flashinfer-6x160/portfolio"


@pytest.fixture(scope="module")
def recorded():
    rows, samples = artifacts.read(REF / "run-1.parquet"), artifacts.read(REF / "run-1-samples.parquet")
    keep = rows["invocation"].isin(sorted(rows["invocation"].unique())[:3])  # three invocations: fast
    cells = rows.loc[keep, ["mode", "invocation", "candidate"]]
    return rows[keep].reset_index(drop=True), samples.merge(cells, on=["mode", "invocation", "candidate"])


def test_the_recorded_settings_give_the_recorded_rows(recorded):
    rows, samples = recorded
    recorded_cfg = sampler_replay.recorded_settings(REF / "run-1.parquet", {})
    assert recorded_cfg["adaptive"]["min_samples"] == {"eager": 10, "graph": 5}  # not today's default
    again, kept, summary = sampler_replay.resample_run(rows, samples, recorded_cfg)
    pd.testing.assert_frame_equal(again, rows)
    assert len(kept) == len(samples) and summary["short"] == 0


def test_a_smaller_minimum_keeps_each_cells_first_samples(recorded):
    rows, samples = recorded
    cfg = sampler_replay.recorded_settings(
        REF / "run-1.parquet", {"adaptive": {"min_samples": {"graph": 3, "eager": 6}}}
    )
    new, kept, summary = sampler_replay.resample_run(rows, samples, cfg)
    assert (new["reps"] <= rows["reps"]).all()
    for mode, least in (("eager", 6), ("graph", 3)):
        reps = new.loc[new["mode"] == mode, "reps"]
        assert reps.min() == least and (reps > least).any()  # a noisy cell samples on past the minimum
    for row in new.sample(20, random_state=0).itertuples(index=False):
        cell = samples[(samples["mode"] == row.mode) & (samples["invocation"] == row.invocation)
                       & (samples["candidate"] == row.candidate)].sort_values("rep")  # fmt: skip
        first = cell["latency_us"].to_numpy()[: row.reps]
        assert row.median_us == pytest.approx(float(np.median(first)))
        assert row.rse_pct == pytest.approx(timing.rse_pct(first * cell["calls"].to_numpy()[: row.reps]))
        assert row.timed_calls == row.reps * row.calls_per_sample
    assert len(kept) == new["reps"].sum()
    before, after = summary["modes"]["graph"]["samples_per_cell"]
    assert after < before


def test_settings_are_read_as_nested_keys_and_values():
    assert sampler_replay.overrides(["adaptive.min_samples.graph=3", "reps=100"]) == {
        "adaptive": {"min_samples": {"graph": 3}}, "reps": 100
    }  # fmt: skip
    with pytest.raises(SystemExit, match="KEY=VALUE"):
        sampler_replay.overrides(["reps"])
