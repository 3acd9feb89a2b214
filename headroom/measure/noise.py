"""Noise statistics of the portfolio measurements: pure functions over DataFrames.

Inputs are the portfolio artifacts as DataFrames (one or several runs concatenated):
- samples: columns run, mode, invocation, candidate, latency_us (portfolio/run-{r}-samples)
- rows: columns run, mode, invocation, candidate, median_us, and for the floor checks floor_us
  (portfolio/run-{r})

Functions (each returns a new DataFrame; nothing is read from disk, nothing is mutated):
- :func:`rel_std` relative standard deviation per (run, mode, invocation, candidate)
- :func:`median_spread` run-to-run spread of each (mode, invocation, candidate) median
- :func:`winners` fastest candidate per (run, mode, invocation) and its margin
- :func:`winner_stability` per (mode, invocation): does the winner change between runs?
- :func:`stability_summary` per mode: the fraction of invocations whose winner is the same in
  every run, and of run pairs that disagree
- :func:`floor_flags` rows whose median lies within ``factor`` times the harness floor
- :func:`run_summary` one row per (run, mode) for the run log and the report
- :func:`sampler_summary` one row per (run, mode): how the sampler spent its samples, the noise
  it reached and why its cells stopped (None for artifacts recorded before the adaptive sampler)
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import combinations

import numpy as np
import pandas as pd

from headroom.core import contracts, defaults

KEY = ["run", "mode", "invocation", "candidate"]
#: The portfolio columns the sampler writes (absent in studies recorded before it).
SAMPLER_COLUMNS = ["reps", "rse_pct", "stop_reason", "cell_wall_s"]


def _require(df: pd.DataFrame, columns: list[str], name: str) -> None:
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise ValueError(f"{name} lacks column(s) {missing}; it has {list(df.columns)}")
    if df.empty:
        raise ValueError(f"{name} is empty")


def _per_group(df: pd.DataFrame, by: list[str], stats: Callable[[tuple, pd.DataFrame], dict]) -> pd.DataFrame:
    """One row per group of ``df`` by the columns ``by``, in sorted order: the group's ``by`` values,
    then ``stats(key, group)``."""
    rows = [{**dict(zip(by, key, strict=True)), **stats(key, grp)} for key, grp in df.groupby(by, sort=True)]
    return pd.DataFrame.from_records(rows)


def _median_p90_max(values: pd.Series, name: str) -> dict[str, float]:
    """``{name}_median_pct``, ``{name}_p90_pct`` and ``{name}_max_pct`` of ``values``."""
    return {
        f"{name}_median_pct": float(values.median()),
        f"{name}_p90_pct": float(values.quantile(0.9)),
        f"{name}_max_pct": float(values.max()),
    }


def rel_std(samples: pd.DataFrame) -> pd.DataFrame:
    """n, mean_us, std_us (ddof=1) and rel_std_pct = 100 * std / mean per (run, mode, invocation,
    candidate) of the samples table."""
    _require(samples, KEY + ["latency_us"], "samples")
    g = samples.groupby(KEY, sort=True)["latency_us"]
    out = g.agg(n="size", mean_us="mean", std_us="std")  # pandas' grouped std: ddof=1, vectorized
    out.loc[out["n"] == 1, "std_us"] = 0.0  # one sample: no spread (pandas says NaN)
    out["rel_std_pct"] = 100.0 * out["std_us"] / out["mean_us"]
    return out.reset_index()


def median_spread(rows: pd.DataFrame) -> pd.DataFrame:
    """Across runs, per (mode, invocation, candidate): runs, min/max/median of the per-run medians
    and spread_pct = 100 * (max - min) / median of medians."""
    _require(rows, KEY + ["median_us"], "rows")
    g = rows.groupby(["mode", "invocation", "candidate"], sort=True)["median_us"]
    out = g.agg(runs="size", median_min_us="min", median_max_us="max", median_of_runs_us="median")
    out["spread_pct"] = 100.0 * (out["median_max_us"] - out["median_min_us"]) / out["median_of_runs_us"]
    return out.reset_index()


def winners(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (run, mode, invocation): winner (smallest median_us; ties go to the smaller candidate
    id so the answer is deterministic), winner_us, runner_up, runner_up_us, margin_pct =
    100 * (runner_up_us - winner_us) / winner_us (NaN with a single candidate)."""
    _require(rows, KEY + ["median_us"], "rows")
    ordered = rows.sort_values(["run", "mode", "invocation", "median_us", "candidate"], kind="mergesort")

    def stats(_key: tuple, grp: pd.DataFrame) -> dict:
        best = grp.iloc[0]
        second = grp.iloc[1] if len(grp) > 1 else None
        runner_up_us = float(second["median_us"]) if second is not None else np.nan
        return {
            "winner": best["candidate"],
            "winner_us": float(best["median_us"]),
            "runner_up": second["candidate"] if second is not None else None,
            "runner_up_us": runner_up_us,
            "margin_pct": 100.0 * (runner_up_us - best["median_us"]) / best["median_us"],
        }

    return _per_group(ordered, ["run", "mode", "invocation"], stats)


def winner_stability(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (mode, invocation): runs, distinct_winners, stable (same winner in every run),
    modal_winner (most frequent; ties to the smaller id), modal_share (fraction of runs it won)."""

    def stats(_key: tuple, grp: pd.DataFrame) -> dict:
        counts = grp["winner"].value_counts()
        top = counts.max()
        return {
            "runs": len(grp),
            "distinct_winners": int(counts.size),
            "stable": bool(counts.size == 1),
            "modal_winner": sorted(counts[counts == top].index)[0],
            "modal_share": float(top / len(grp)),
        }

    return _per_group(winners(rows), ["mode", "invocation"], stats)


def stability_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Per mode: invocations, runs, stable_fraction (invocations whose winner is the same in every
    run) and pair_disagreement (fraction of (invocation, run pair) whose winners differ)."""

    def stats(_key: tuple, grp: pd.DataFrame) -> dict:
        by_inv = grp.pivot(index="invocation", columns="run", values="winner")
        runs = list(by_inv.columns)
        stable = by_inv.nunique(axis=1, dropna=True) == 1
        pairs = list(combinations(runs, 2))
        if pairs:
            differ = [(by_inv[a] != by_inv[b]).mean() for a, b in pairs]
            disagreement = float(np.mean(differ))
        else:
            disagreement = np.nan
        return {
            "invocations": len(by_inv),
            "runs": len(runs),
            "stable_fraction": float(stable.mean()),
            "pair_disagreement": disagreement,
        }

    return _per_group(winners(rows), ["mode"], stats)


def floor_flags(rows: pd.DataFrame, factor: float) -> pd.DataFrame:
    """Rows whose median_us < factor * floor_us, with floor_ratio = median_us / floor_us: there the
    harness (launch path, event records), not the kernel, dominates the figure."""
    if factor <= 0:
        raise ValueError(f"factor must be positive, got {factor}")
    _require(rows, KEY + ["median_us", "floor_us"], "rows")
    out = rows[KEY + ["median_us", "floor_us"]].copy()
    out["floor_ratio"] = out["median_us"] / out["floor_us"]
    return out[out["median_us"] < factor * out["floor_us"]].reset_index(drop=True)


def run_summary(rows: pd.DataFrame, samples: pd.DataFrame, factor: float | None = None) -> pd.DataFrame:
    """One row per (run, mode): measurements, samples, median / p90 / max rel_std_pct and the
    number of rows within ``factor`` times the floor (left out: the default study's
    `portfolio.floor_factor`)."""
    if factor is None:
        factor = defaults.value("portfolio", "floor_factor")
    rs = rel_std(samples)
    flags = floor_flags(rows, factor) if "floor_us" in rows.columns else rows.iloc[0:0]

    def stats(key: tuple, grp: pd.DataFrame) -> dict:
        run, mode = key
        return {
            "measurements": len(grp),
            "samples": int(grp["n"].sum()),
            **_median_p90_max(grp["rel_std_pct"], "rel_std"),
            "near_floor": int(((flags["run"] == run) & (flags["mode"] == mode)).sum()),
        }

    return _per_group(rs, ["run", "mode"], stats)


def sampler_summary(rows: pd.DataFrame) -> pd.DataFrame | None:
    """Per (run, mode): cells, samples (sum of reps), reps_median / reps_max, rse_median_pct /
    rse_p90_pct / rse_max_pct (the median's relative standard error each cell reached), one column
    per stop reason (cells that stopped so: fixed, target, count_cap, time_cap) and sampling_s (the
    cells' timing loops, summed). None when ``rows`` lack the sampler's columns (older artifacts)."""

    if not set(SAMPLER_COLUMNS) <= set(rows.columns):
        return None
    _require(rows, KEY + SAMPLER_COLUMNS, "rows")

    def stats(_key: tuple, grp: pd.DataFrame) -> dict:
        reasons = grp["stop_reason"].value_counts()
        return {
            "cells": len(grp),
            "samples": int(grp["reps"].sum()),
            "reps_median": float(grp["reps"].median()),
            "reps_max": int(grp["reps"].max()),
            **_median_p90_max(grp["rse_pct"], "rse"),
            **{reason: int(reasons.get(reason, 0)) for reason in contracts.STOP_REASONS},
            "sampling_s": float(grp["cell_wall_s"].sum()),
        }

    return _per_group(rows, ["run", "mode"], stats)
