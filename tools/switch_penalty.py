"""The switch penalty with and without work between the two kernels, on one GPU (issue 18 item 2).

    python3 tools/switch_penalty.py --reference data/reference/h200/default-flashinfer-6x160 --out DIR \
        [--work-l2 0 1 2] [--invocations 8] [--pairs 3] [--reps 200]

The lifecycle stage times a switch as the per-call time of A,B,A,B,... minus the mean of A,A,...
and B,B,... (headroom/families/attention/lifecycle.switch_rows). Until 2026-12-01 the calls ran back to back,
so B found A's data in the L2 and the three sequences differed only in which kernel ran; in a server
a whole layer runs between two attention calls. This program runs the stage's own switch timing on
a recorded study's trace and the candidates its correctness gate admitted, once per ``--work-l2`` (the write of that many
L2s between any two timed calls: lifecycle.switch_work_l2), on the same seeded (invocation, pair)
plan, so the settings are compared pair by pair. Writes DIR/switch_penalty.csv (every row),
DIR/switch_penalty.json (per setting and mode: median, quartiles and count of the penalty in µs
and %, and the paired median difference to the first setting) and prints the Markdown table.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from headroom.core import artifacts, defaults, format  # noqa: E402
from headroom.families.attention import lifecycle  # noqa: E402
from headroom.measure import portfolio, timing  # noqa: E402
from headroom.measure.correctness import admitted  # noqa: E402


def measure(reference: Path, work_l2: list[float], invocations: int, pairs: int, reps: int) -> pd.DataFrame:
    trace = artifacts.read(reference / "trace.parquet")
    # the candidates the correctness gate admitted, as the lifecycle stage reads them
    candidates = admitted(
        artifacts.read(reference / "candidates.parquet"), artifacts.read(reference / "correctness.parquet")
    )
    rope_base = defaults.value("partition", "rope_base")
    log = logging.getLogger("switch_penalty")
    frames = []
    for w in work_l2:
        cfg = lifecycle.settings(
            {
                "switch_invocations": invocations,
                "switch_pairs": pairs,
                "switch_reps": reps,
                "switch_work_l2": w,
            }
        )
        rows = lifecycle.switch_rows(trace, candidates, cfg, "cuda", rope_base, timing.l2_bytes(), log)
        frames.append(pd.DataFrame(rows).assign(work_l2=w))
    return pd.concat(frames, ignore_index=True)


def summary(df: pd.DataFrame) -> list[dict]:
    first = df["work_l2"].iloc[0]
    key = ["mode", "invocation", "candidate", "candidate_b"]
    base = df[df["work_l2"] == first].set_index(key)["value"]
    out = []
    for (w, mode), g in df.groupby(["work_l2", "mode"], sort=True):
        paired = g.set_index(key)["value"] - base.reindex(g.set_index(key).index)
        q = np.percentile(g["value"], [25, 50, 75])
        out.append(
            {
                "work_l2": float(w),
                "mode": mode,
                "n": int(len(g)),
                "penalty_us_median": float(q[1]),
                "penalty_us_q1": float(q[0]),
                "penalty_us_q3": float(q[2]),
                "penalty_pct_median": float(g["penalty_pct"].median()),
                "same_us_median": float(g["same_us"].median()),
                "paired_diff_us_median": float(paired.median()),
            }
        )
    return out


def markdown(rows: list[dict]) -> str:
    head = (
        "| work between calls (L2s) | mode | pairs | penalty: median [q1, q3] | penalty % (median) "
        "| vs first setting (paired median) |"
    )
    lines = [head, "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        spread = format.delta_ci(
            r["penalty_us_median"], r["penalty_us_q1"], r["penalty_us_q3"], "us", digits=2
        )
        lines.append(
            f"| {r['work_l2']:g} | {r['mode']} | {r['n']} | {spread} | {format.pct(r['penalty_pct_median'], 1)} "
            f"| {format.delta(r['paired_diff_us_median'], 'us', digits=2)} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reference", type=Path, required=True, help="a recorded study (trace, candidates)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--work-l2", type=float, nargs="+", default=[0.0, 1.0, 2.0])
    ap.add_argument("--invocations", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args(argv)
    if not timing.cuda_available():
        print("switch_penalty: needs a CUDA GPU", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    df = measure(args.reference, args.work_l2, args.invocations, args.pairs, args.reps)
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / "switch_penalty.csv", index=False)
    rows = summary(df)
    env = {
        "device_name": portfolio.device_name("cuda"),
        "l2_bytes": timing.l2_bytes(),
        "reference": str(args.reference),
    }
    (args.out / "switch_penalty.json").write_text(json.dumps({"environment": env, "summary": rows}, indent=2))
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
