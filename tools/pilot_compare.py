"""A pilot run's medians beside a reference's: is the pilot within the reference's own run-to-run noise?

    python3 tools/pilot_compare.py REFERENCE_DIR PILOT_RUN.parquet [--out FILE.md]

Per (mode, invocation, candidate) cell, the pilot's median_us against the median over the reference's
runs of that cell, as a percentage difference; beside it, each reference run against the median of
the other runs (leave one out): the spread a run of the reference itself shows. The pilot is within
noise when its |difference| quantiles (median, 90th percentile) are not above the reference runs'
own (reported per mode; the comparison is what a reviewer reads, not a test).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

CELL = ["mode", "invocation", "candidate"]


def _runs(folder: Path) -> pd.DataFrame:
    paths = sorted(p for p in (folder / "portfolio").glob("run-*.parquet") if "samples" not in p.name)
    frames = [pd.read_parquet(p) for p in paths]
    if not frames:
        raise SystemExit(f"{folder}: no portfolio/run-<r>.parquet")
    return pd.concat(frames)[["run", *CELL, "median_us"]]


def _pct(a: pd.Series, b: pd.Series) -> pd.Series:
    return 100.0 * (a - b) / b


def compare(reference: Path, pilot: Path) -> pd.DataFrame:
    ref = _runs(reference).pivot_table(index=CELL, columns="run", values="median_us")
    got = pd.read_parquet(pilot).set_index(CELL)["median_us"]
    cells = ref.index.intersection(got.index)
    rows = []
    for mode in sorted(set(cells.get_level_values("mode"))):
        sub = ref.loc[[c for c in cells if c[0] == mode]]
        pilot_d = _pct(got.loc[sub.index], sub.median(axis=1)).abs()
        loo = pd.concat([_pct(sub[r], sub.drop(columns=r).median(axis=1)).abs() for r in sub.columns])
        rows.append(
            {
                "mode": mode,
                "cells": len(sub),
                "reference_runs": sub.shape[1],
                "pilot_vs_reference_median_abs_pct": float(np.median(pilot_d)),
                "pilot_p90_abs_pct": float(np.quantile(pilot_d, 0.9)),
                "reference_run_median_abs_pct": float(np.median(loo)),
                "reference_run_p90_abs_pct": float(np.quantile(loo, 0.9)),
                "pilot_signed_median_pct": float(np.median(_pct(got.loc[sub.index], sub.median(axis=1)))),
            }
        )
    return pd.DataFrame(rows)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reference", type=Path)
    parser.add_argument("pilot", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    table = compare(args.reference, args.pilot)
    try:
        text = table.to_markdown(index=False, floatfmt=".2f")
    except ImportError:  # pandas' markdown needs tabulate
        text = table.round(2).to_string(index=False)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
