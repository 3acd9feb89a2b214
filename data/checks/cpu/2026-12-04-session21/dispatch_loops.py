"""Does a dispatch-timing loop of 20,000 lookups give what one of 200,000 gives? The lifecycle
stage's dispatch rows (headroom.measure.lifecycle.dispatch_rows: ns per lookup of each fitted
policy, median of 3 loops, net of an empty loop) on the default reference's trace and candidates,
three rounds alternating the two loop lengths, in one process on this host's CPU (the figure is a
host-side lookup: no GPU is involved).

    python3 data/checks/cpu/2026-12-04-session21/dispatch_loops.py OUT.csv
"""

import sys
import time

import pandas as pd

from headroom.core import artifacts
from headroom.families.attention.keying import ATTENTION
from headroom.measure.lifecycle import dispatch_rows, settings

REF = "data/reference/h200/default-flashinfer-6x160"
trace = artifacts.read(f"{REF}/trace.parquet")
lifecycle = artifacts.read(f"{REF}/lifecycle.parquet")
candidates = sorted(lifecycle[lifecycle["kind"] == "compile"]["candidate"])
fit = {"train_fraction": 0.5, "clusters": 4, "seed": 0}  # the default study's policies section
rows = []
for rnd in range(3):
    for lookups in (200000, 20000):
        t0 = time.perf_counter()
        got = dispatch_rows(trace, candidates, settings({"dispatch_lookups": lookups}), "cpu", fit, ATTENTION)
        wall = time.perf_counter() - t0
        rows.append(
            {"round": rnd, "lookups": lookups, "wall_s": wall, **{r["policy"]: r["value"] for r in got}}
        )
pd.DataFrame(rows).to_csv(sys.argv[1], index=False)
