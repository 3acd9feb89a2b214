"""sampler.md: each reference's replayed decision beside the decision on its runs resampled under
the new sampler minimums (tools/sampler_replay.py), from results/ after both were replayed:

    for ref in default-flashinfer-6x160 azure-conv-flashinfer-6x160 mooncake-conv-flashinfer-3x30 \
               moe-6x160 moe-azure-conv-6x160 rmsnorm-6x160; do
        python3 tools/sampler_replay.py data/reference/h200/$ref /tmp/sr/$ref \\
            --set adaptive.min_samples.graph=3 --set adaptive.min_samples.eager=6 > /tmp/sr/$ref.txt
        snakemake --cores 2 --config replay=/tmp/sr/$ref
    done
    snakemake --cores 2 --config 'studies=[replay-h200-default-flashinfer-6x160,...]'   # all six
    python3 data/checks/cpu/2026-12-04-session21/sampler_compare.py /tmp/sr > .../sampler.md
"""

import json
import sys
from pathlib import Path

import pandas as pd

INTRO = """Each reference's own samples, resampled under the new minimums by
`tools/sampler_replay.py` (each cell's stop rule replayed on its samples in their recorded order,
its row computed again from the samples it kept), then decided by the pipeline (`decision-v4`),
beside the reference's own replay; made on a 2-core CPU by `sampler_compare.py` (its docstring has
the commands). A cell whose replayed rule asked for more samples than were recorded kept all of its
recorded ones: there the real sampler would have taken more, so the timed seconds below are a lower
bound where many cells did so (`headroom plan`, which cycles a cell's samples instead, is the time
prediction to trust: see README.md), and those cells' medians are as precise as recorded or more.
"""
REFS = (
    "default-flashinfer-6x160",
    "azure-conv-flashinfer-6x160",
    "mooncake-conv-flashinfer-3x30",
    "moe-6x160",
    "moe-azure-conv-6x160",
    "rmsnorm-6x160",
)
FIGURES = ("gap_to_oracle", "policy_gain", "policy_gain_mde")


def figures(study: str) -> dict:
    d = pd.read_parquet(f"results/{study}/decision.parquet")
    out = {("verdict", ""): f"{d['verdict'].iloc[0]} ({d['reason_code'].iloc[0]})"}
    for r in d[d["figure"].isin(FIGURES)].itertuples(index=False):
        ci = f" [{r.ci_low:+.2f}, {r.ci_high:+.2f}]" if pd.notna(r.ci_low) else ""
        out[(r.mode, r.figure)] = f"{r.estimate:+.2f}{ci} {r.state if r.state != 'reported' else ''}".strip()
    return out


def timing(log: Path) -> str:
    runs = [
        json.loads(line.split(": ", 1)[1]) for line in log.read_text().splitlines() if line.startswith("run ")
    ]
    parts = []
    for mode in ("eager", "graph"):
        n = [r["modes"][mode]["samples_per_cell"] for r in runs]
        t = [r["modes"][mode]["timed_s"] for r in runs]
        parts.append(
            f"{mode}: {sum(a for a, _ in n) / len(n):.2f} -> {sum(b for _, b in n) / len(n):.2f} samples a cell, "
            f"{sum(a for a, _ in t) / len(t):.1f} -> {sum(b for _, b in t) / len(t):.1f} s of timed loops a run"
        )
    short = sum(r["short"] for r in runs)
    return (
        "; ".join(parts) + f"; {short} cells asked for more samples than were recorded (all of theirs kept)"
    )


def main(folder: Path) -> None:
    print("# The sampler's minimums: 6 eager calls and 3 graph replays (were 10 and 5)\n")
    print(INTRO)
    for ref in REFS:
        before, after = figures(f"replay-h200-{ref}"), figures(f"replay-{ref}")
        print(f"## {ref}\n\n{timing(folder / f'{ref}.txt')}.\n")
        print("| part | figure | recorded | resampled |\n| --- | --- | --- | --- |")
        for key in before:
            print(f"| {key[0]} | {key[1]} | {before[key]} | {after.get(key, '-')} |")
        print()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
