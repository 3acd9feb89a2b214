"""Cell medians of two trees' portfolio runs on one host in one sitting: per mode, each (invocation,
candidate)'s median over the runs both recorded, AFTER / BEFORE, beside the same ratio between the
AFTER study's own runs (run 1 / run 2, and runs 1-3 / 4-6 where it has six) as the yardstick of noise.
    python3 same_host_medians.py AFTER_DIR BEFORE_DIR"""

import glob
import re
import sys

import numpy as np
import pandas as pd


def runs(d):
    paths = [p for p in glob.glob(f"{d}/portfolio/run-*.parquet") if re.search(r"run-\d+\.parquet$", p)]
    return pd.concat([pd.read_parquet(p) for p in sorted(paths)])


def cells(df, keep):
    return df[df["run"].isin(keep)].groupby(["mode", "invocation", "candidate"])["median_us"].median()


def summary(ratio):
    r = ratio.dropna()
    q = np.quantile(r, [0.1, 0.5, 0.9])
    return f"{len(r):6d} cells  median {q[1]:.4f}  p10 {q[0]:.4f}  p90 {q[2]:.4f}  geomean {np.exp(np.log(r).mean()):.4f}"


after, before = runs(sys.argv[1]), runs(sys.argv[2])
both = sorted(set(after["run"]) & set(before["run"]))
print(f"runs both trees recorded: {both}")
for mode in ("eager", "graph"):
    a, b = after[after["mode"] == mode], before[before["mode"] == mode]
    print(f"{mode}: after / before, runs {both}   {summary(cells(a, both) / cells(b, both))}")
    if len(both) >= 2:
        print(
            f"{mode}: before run {both[0]} / run {both[1]}        {summary(cells(b, both[:1]) / cells(b, both[1:2]))}"
        )
        print(
            f"{mode}: after run {both[0]} / run {both[1]}         {summary(cells(a, both[:1]) / cells(a, both[1:2]))}"
        )
    if set(after["run"]) >= {1, 2, 3, 4, 5, 6}:
        print(f"{mode}: after runs 1-3 / 4-6          {summary(cells(a, [1, 2, 3]) / cells(a, [4, 5, 6]))}")
