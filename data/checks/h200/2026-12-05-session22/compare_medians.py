"""A rerun study's cell medians against the recorded reference's: per mode, the ratio of each
(invocation, candidate)'s median over runs (rerun / reference), beside the same ratio between the
reference's own halves (runs 1-3 / runs 4-6) and the rerun's, as the yardstick of noise.
    python3 compare_medians.py RERUN_DIR REFERENCE_DIR"""

import glob
import sys

import numpy as np
import pandas as pd


def runs(d):
    paths = sorted(p for p in glob.glob(f"{d}/portfolio/run-*.parquet") if "samples" not in p)
    return pd.concat([pd.read_parquet(p) for p in paths])


def cells(df, keep=None):
    df = df if keep is None else df[df["run"].isin(keep)]
    return df.groupby(["mode", "invocation", "candidate"])["median_us"].median()


def summary(ratio):
    r = ratio.dropna()
    q = np.quantile(r, [0.1, 0.5, 0.9])
    return f"{len(r):6d} cells  median {q[1]:.4f}  p10 {q[0]:.4f}  p90 {q[2]:.4f}  geomean {np.exp(np.log(r).mean()):.4f}"


new, ref = runs(sys.argv[1]), runs(sys.argv[2])
for mode in ("eager", "graph"):
    n, r = new[new["mode"] == mode], ref[ref["mode"] == mode]
    print(f"{mode}: rerun / reference         {summary(cells(n) / cells(r))}")
    print(f"{mode}: reference runs 1-3 / 4-6  {summary(cells(r, [1, 2, 3]) / cells(r, [4, 5, 6]))}")
    print(f"{mode}: rerun runs 1-3 / 4-6      {summary(cells(n, [1, 2, 3]) / cells(n, [4, 5, 6]))}")
