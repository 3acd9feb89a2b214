"""What a recorded study would have measured under other sampler settings, from its own samples.

The portfolio keeps every sample it took, in order (portfolio/run-<r>-samples.parquet). A sampler
that stops earlier than the recorded one would have taken the first samples of each cell and no
others, so its rows can be rebuilt from the recorded ones: each cell's sampler (its stop rule,
headroom.measure.timing.sample_loop) replayed on the cell's samples in their recorded order, as
`headroom plan` replays it (headroom.measure.cost.simulated_cell), and the row's figures
(median_us, ..., reps, rse_pct, stop_reason, timed_calls, graph_replay_us, cell_wall_s pro rata)
computed again from the samples it kept, under the settings the run was recorded with (its
provenance) with ``--set``'s merged onto them. A cell whose replayed sampler asks for more samples than
were recorded keeps all of them and is counted as `short` (a setting that samples more than the
recorded one cannot be replayed: it needs the GPU).

    python3 tools/sampler_replay.py data/reference/h200/REF OUT --set adaptive.min_samples.graph=3

writes OUT, a copy of REF with its portfolio runs rebuilt (provenance: REF's, plus
`sampler_replay`: the folder and the settings) and a README listing it, which the pipeline replays
like any recorded folder: `snakemake --cores 2 --config replay=OUT` decides on what the other
sampler would have measured, beside REF's own replay. It prints, per mode, the mean samples per
cell and the timed seconds per run before and after.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from headroom.core import artifacts, config, replay  # noqa: E402
from headroom.measure import cost, portfolio, timing  # noqa: E402

CELL = ["mode", "invocation", "candidate"]


def overrides(pairs: list[str]) -> dict:
    """['adaptive.min_samples.graph=3', ...] -> the nested `portfolio:` overrides they spell, each
    value read as JSON where it parses (3, 0.5, true), else kept as text (sampler=fixed)."""
    out: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"sampler_replay: --set takes KEY=VALUE, got {pair!r}")
        *parents, leaf = key.split(".")
        node = out
        for part in parents:
            node = node.setdefault(part, {})
        try:
            node[leaf] = json.loads(value)
        except json.JSONDecodeError:
            node[leaf] = value
    return out


def recorded_settings(run: Path, over: dict) -> dict:
    """The `portfolio:` settings a run was recorded with (its provenance), ``over`` merged onto them."""
    recorded = artifacts.read_provenance(run)["params"]["portfolio"]
    return portfolio.settings(config.deep_merge(recorded, over))


def resampled_cell(row: pd.Series, cell: pd.DataFrame, rule, fixed: int) -> tuple[dict, int, bool]:
    """The row ``row`` would have been under ``rule`` (fixed: ``fixed`` samples), its samples kept
    (how many) and whether the sampler asked for more than were recorded."""
    unit = cell["latency_us"].to_numpy() * cell["calls"].to_numpy()  # one sample: a call or a replay
    x, reason, _ = cost.replayed(cell, rule, fixed)
    kept = min(x.size, unit.size)
    per_call = cell["latency_us"].to_numpy()[:kept]
    new = {
        **timing.summarize(per_call),
        "reps": kept,
        "timed_calls": int(kept * row["calls_per_sample"]),
        "rse_pct": timing.rse_pct(unit[:kept]),
        "stop_reason": reason,
        "cell_wall_s": float(row["cell_wall_s"]) * float(unit[:kept].sum() / unit.sum()),
    }
    if row["mode"] == "graph":
        new["graph_replay_us"] = float(np.median(unit[:kept]))
    return new, kept, x.size > unit.size


def resample_run(
    rows: pd.DataFrame, samples: pd.DataFrame, cfg: dict
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """One run's rows and samples as ``cfg``'s sampler would have taken them, and a summary."""
    rules, fixed = portfolio.stop_rules(cfg), cost.fixed_samples(cfg)
    cells = {k: c for k, c in samples.sort_values("rep", kind="mergesort").groupby(CELL, sort=False)}
    out, keep, short = rows.copy(), [], 0
    for i, row in rows.iterrows():
        cell = cells[tuple(row[c] for c in CELL)]
        new, kept, asked_more = resampled_cell(row, cell, rules.get(row["mode"]), fixed[row["mode"]])
        for col, value in new.items():
            if col in out.columns:  # a kernel family's rows have no graph_replay_us, say
                out.at[i, col] = value
        keep.append(cell.index[:kept])
        short += asked_more
    if {"floor_us", "floor_ratio", "near_floor"} <= set(out.columns):
        out["floor_ratio"] = out["median_us"] / out["floor_us"]
        out["near_floor"] = out["floor_ratio"] < cfg["floor_factor"]
    kept_samples = samples.loc[np.concatenate(keep)].sort_index()
    summary = {
        mode: {
            "samples_per_cell": (float(rows.loc[m, "reps"].mean()), float(out.loc[m, "reps"].mean())),
            "timed_s": (float(rows.loc[m, "cell_wall_s"].sum()), float(out.loc[m, "cell_wall_s"].sum())),
        }
        for mode in sorted(rows["mode"].unique())
        for m in [rows["mode"] == mode]
    }
    return out.astype(rows.dtypes.to_dict()), kept_samples, {"modes": summary, "short": short}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("recorded", type=Path, help="a recorded study folder (data/reference/<gpu>/<study>)")
    ap.add_argument("out", type=Path, help="the folder to write (must not exist)")
    ap.add_argument("--set", action="append", default=[], dest="sets", help="KEY=VALUE over portfolio:")
    args = ap.parse_args(argv)
    if args.out.exists():
        raise SystemExit(f"sampler_replay: {args.out} exists; name a new folder")
    replay.check_recorded(args.recorded)
    over = overrides(args.sets)
    shutil.copytree(args.recorded, args.out)
    manifest = []
    for run in replay.recorded_runs(args.recorded):
        names = {kind: f"portfolio/run-{run}{suffix}.parquet" for kind, suffix in
                 (("portfolio", ""), ("portfolio_samples", "-samples"))}  # fmt: skip
        rows, samples = (artifacts.read(args.recorded / names[k]) for k in ("portfolio", "portfolio_samples"))
        new_rows, new_samples, summary = resample_run(
            rows, samples, recorded_settings(args.recorded / names["portfolio"], over)
        )
        for kind, frame in (("portfolio", new_rows), ("portfolio_samples", new_samples)):
            prov = artifacts.read_provenance(args.recorded / names[kind])
            prov["sampler_replay"] = {"from": str(args.recorded), "set": over}
            artifacts.write(frame, args.out / names[kind], kind=kind, provenance=prov)
        print(f"run {run}: {json.dumps(summary)}")
    for path in sorted(args.out.rglob("*.parquet")):
        name = path.relative_to(args.out).as_posix()
        manifest.append(replay.manifest_row(name, artifacts.recorded_hash(path), path.stat().st_size))
    (args.out / "README.md").write_text(
        f"# {args.recorded.name}, its portfolio runs resampled\n\n"
        f"`python3 tools/sampler_replay.py {args.recorded} {args.out} "
        + " ".join(f"--set {s}" for s in args.sets)
        + "`: each cell's sampler replayed on its recorded samples under these portfolio settings.\n\n"
        + "\n".join([*replay.MANIFEST_HEADER, *manifest])
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
