"""Each report section's seconds in one process, on a replay's results: the calls the report draws side
by side (headroom.report.build._drawn, and a heatmap's parts where the tree draws them apart), timed one
after another.
    python3 data/checks/cpu/2026-12-05-session22/report_sections.py results/replay-h200-default-flashinfer-6x160
"""

import glob
import sys
import time

import pandas as pd

from headroom.core import artifacts, parallel
from headroom.report import build

R = sys.argv[1]
calls = []


def collect(c, workers=None):
    calls.extend(c)
    return []


def read(name):
    return artifacts.read(f"{R}/{name}.parquet") if glob.glob(f"{R}/{name}.parquet") else None


def runs(pattern):
    return pd.concat([artifacts.read(p) for p in sorted(glob.glob(f"{R}/portfolio/{pattern}"))])


parallel.forked_map = collect
inputs = {n: read(n) for n in build.INPUTS if n not in ("portfolio", "samples")}
inputs["portfolio"], inputs["samples"] = runs("run-?.parquet"), runs("run-?-samples.parquet")
build._sections(inputs, {}, lambda n: "")
for fn, args in calls:
    t = time.perf_counter()
    fn(*args)
    print(f"{time.perf_counter() - t:6.2f} s  {fn.__module__}.{fn.__name__}")
