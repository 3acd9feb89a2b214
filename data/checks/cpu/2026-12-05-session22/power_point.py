"""Seconds of one point of the default reference's graph-mode power curve (headroom.decide.power
.curve_point: 100 simulated studies at 200 resamples, effect 0.1), three times in one process, after its
setup; the layout's k-means are cached before the first.
    python3 data/checks/cpu/2026-12-05-session22/power_point.py      (in each tree, its own PYTHONPATH)
"""

import glob
import time

import pandas as pd

from headroom.core import defaults
from headroom.decide import measured, power

R = "data/reference/h200/default-flashinfer-6x160"
POL = defaults.section("policies")
trace = pd.read_parquet(f"{R}/trace.parquet")
runs = sorted(p for p in glob.glob(f"{R}/portfolio/run-*.parquet") if "samples" not in p)
timings = pd.concat([pd.read_parquet(p) for p in runs])
options = {k: v for k, v in POL.items() if k not in ("train_fraction", "seed")}
opts, costs, modes = measured.checked_modes(
    trace, timings, pd.read_parquet(f"{R}/lifecycle.parquet"), POL["train_fraction"], options
)
graph = next(m for m in modes if m.mode == "graph")
setup = power._setup(
    graph, costs, opts, defaults.section("decision"), POL["train_fraction"], POL["seed"], power.POWER_SEEDS
)
for _ in range(3):
    t = time.perf_counter()
    point = power.curve_point(*power._args(setup), 0.1)
    print(f"{time.perf_counter() - t:.2f} s  policy_exceeds {point['policy_exceeds']:.2f}")
