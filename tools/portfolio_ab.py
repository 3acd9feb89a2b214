"""An A/B of portfolio settings on the GPU: does a harness setting change what a cell measures?

Each arm is the default study's `portfolio:` section with KEY=VALUE overrides. The arms' runs
alternate A B B A ... (each a fresh process, as the study's runs are) over a measured study's own
trace, every EVERY-th invocation, and its admitted candidates (results/STUDY: trace, candidates and
correctness). Per pair of runs and mode, the ratio of each cell's median to the other run's is
summarised by its median and its 10th-90th percentiles: a setting that changes nothing measured
gives cross-arm pairs like the same-arm pairs (what two processes of one setting differ by). Each
run's untimed seconds (warm-up, captures, plans) and its wall time come beside them.

    python3 tools/portfolio_ab.py --results results/default --out OUT \\
        --arm warmup_reps=20 --arm warmup_reps=5 [--every 4] [--rounds 2] [--mode eager]

An arm is KEY=VALUE[,KEY=VALUE], a dotted KEY reaching into a section (adaptive.min_samples.graph=3).

Writes OUT/cells.parquet (every run's rows, with `arm` and `round`), OUT/pairs.csv and
OUT/summary.md. Needs CUDA (the interpreter times nothing a GPU would).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import sampler_replay  # noqa: E402  (tools/, beside this script)

from headroom.core import artifacts, config  # noqa: E402


def parse_arm(text: str) -> dict:
    """'k=v,a.b=v2' -> the nested `portfolio:` overrides they spell (sampler_replay.overrides)."""
    return sampler_replay.overrides(text.split(","))


def inputs(results: Path, every: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The study's trace (every EVERY-th invocation) and its admitted candidates."""
    from headroom.measure.correctness import admitted

    trace = artifacts.read(results / "trace.parquet")
    trace = trace.sort_values("invocation").iloc[::every].reset_index(drop=True)
    cands = admitted(
        artifacts.read(results / "candidates.parquet"), artifacts.read(results / "correctness.parquet")
    )
    return trace, cands.reset_index(drop=True)


def child(args: argparse.Namespace) -> None:
    """One run in this fresh process: the arm's section over the inputs; its rows, and its wall,
    timed and untimed seconds (read from the run's own log line), out."""
    import logging

    from headroom.families.attention import portfolio

    trace, cands = inputs(Path(args.results), args.every)
    section = {**json.loads(args.section), "mode": args.mode}
    lines: list[str] = []
    log = logging.getLogger("portfolio_ab")
    log.setLevel(logging.INFO)
    log.addHandler(type("Keep", (logging.Handler,), {"emit": lambda self, r: lines.append(r.getMessage())})())
    t0 = time.perf_counter()
    rows, _ = portfolio.run(trace, cands, section, run=args.round, device="cuda", log=log, progress=False)
    wall = time.perf_counter() - t0
    rows.to_parquet(args.child_out)
    spent = next(line for line in lines if "outside the timed loops" in line)
    untimed = {k: float(v) for k, v in re.findall(r"([a-z][a-z -]+?) ([0-9.]+) s", spent.split(": ", 1)[1])}
    facts = {"wall_s": wall, "timed_s": float(rows["cell_wall_s"].sum()), "untimed_s": untimed}
    Path(args.child_out).with_suffix(".json").write_text(json.dumps(facts))


def ratios(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Per mode: b's median over a's, cell by cell (mode, invocation, candidate)."""
    key = ["mode", "invocation", "candidate"]
    m = a[key + ["median_us"]].merge(b[key + ["median_us"]], on=key, suffixes=("_a", "_b"))
    m["ratio"] = m["median_us_b"] / m["median_us_a"]
    return m


def summarise(runs: dict[tuple[str, int], pd.DataFrame], facts: dict, arms: dict[str, dict]) -> tuple:
    """(pairs, summary.md's text): per pair of runs and mode, the ratios of their cells' medians
    (the later arm's over the earlier's, B over A), with each run's wall, timed and untimed seconds."""
    pairs = []
    for (ka, a), (kb, b) in itertools.combinations(sorted(runs.items()), 2):
        for mode, grp in ratios(a, b).groupby("mode"):
            r = grp["ratio"].to_numpy()
            pairs.append(
                {
                    "run_a": f"{ka[0]}{ka[1]}",
                    "run_b": f"{kb[0]}{kb[1]}",
                    "same_arm": ka[0] == kb[0],
                    "mode": mode,
                    "cells": len(r),
                    "median_ratio": float(np.median(r)),
                    "p10_ratio": float(np.percentile(r, 10)),
                    "p90_ratio": float(np.percentile(r, 90)),
                    "geomean_ratio": float(np.exp(np.mean(np.log(r)))),
                }
            )
    pairs = pd.DataFrame(pairs)
    lines = ["# portfolio A/B", ""]
    lines += [f"- arm {name}: {json.dumps(over)}" for name, over in arms.items()]
    lines += ["", "| run | wall s | timed s | " + " | ".join(next(iter(facts.values()))["untimed_s"]) + " |"]
    lines += ["| --- " * (3 + len(next(iter(facts.values()))["untimed_s"])) + "|"]
    for (arm, rnd), f in sorted(facts.items()):
        untimed = " | ".join(f"{v:.2f}" for v in f["untimed_s"].values())
        lines.append(f"| {arm}{rnd} | {f['wall_s']:.1f} | {f['timed_s']:.2f} | {untimed} |")
    lines += ["", "Per pair of runs, each cell's median in the second over the first:", ""]
    lines += ["```", pairs.round(4).to_string(index=False), "```"]
    return pairs, "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", required=True, help="a measured study's results folder (results/STUDY)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--arm", action="append", default=[], help="KEY=VALUE[,KEY=VALUE] over portfolio:")
    ap.add_argument("--every", type=int, default=4, help="time every N-th invocation of the trace")
    ap.add_argument("--rounds", type=int, default=2, help="A B B A ... rounds (each arm once a round)")
    ap.add_argument("--mode", default="eager", choices=("eager", "graph", "both"))
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    ap.add_argument("--section", help=argparse.SUPPRESS)
    ap.add_argument("--round", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_out:
        child(args)
        return 0
    if len(args.arm) != 2 or args.every < 1 or args.rounds < 1:
        raise SystemExit("portfolio_ab: two --arm, --every >= 1 and --rounds >= 1")
    from headroom.core import defaults

    base = {k: v for k, v in defaults.section("portfolio").items() if k != "runs"}
    arms = {name: parse_arm(text) for name, text in zip("AB", args.arm, strict=True)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs, facts = {}, {}
    for rnd in range(1, args.rounds + 1):
        for name in "AB" if rnd % 2 else "BA":
            path = out / f"run-{name}{rnd}.parquet"
            section = json.dumps(config.deep_merge(base, arms[name]))
            cmd = [sys.executable, __file__, "--results", args.results, "--out", args.out, "--every", str(args.every),
                   "--mode", args.mode, "--child-out", str(path), "--section", section, "--round", str(rnd)]  # fmt: skip
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"portfolio_ab: run {name}{rnd} failed:\n{proc.stderr[-3000:]}")
            runs[(name, rnd)] = pd.read_parquet(path).assign(arm=name, round=rnd)
            facts[(name, rnd)] = json.loads(path.with_suffix(".json").read_text())
            print(f"run {name}{rnd}: {facts[(name, rnd)]['wall_s']:.1f} s", flush=True)
    pd.concat(runs.values(), ignore_index=True).to_parquet(out / "cells.parquet")
    pairs, text = summarise(runs, facts, arms)
    pairs.to_csv(out / "pairs.csv", index=False)
    (out / "summary.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
