"""Full Monte Carlo validation of the decision on a recorded study (issue 18 item 10).

    PYTHONPATH=$PWD python tools/simulate_decision.py data/reference/h200/default-gen2 --seeds 400 --out data/validation

writes <out>/<study>.csv (one row per mode x scenario x noise scale), <out>/<study>-power.csv (power
curves per mode and noise scale), <out>/<study>-profile.csv (the deployment profile's headline on
flat surfaces), <out>/<study>.md (the tables) and <out>/<study>.json (noise models, power statements, the command,
the rule version). Every figure and verdict comes from the decision engine. See
docs/decision-validation.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from headroom.analysis import engine
from headroom.analysis import simulate as sim


def _pct(row, name: str) -> str:
    """'7.0% [4.7, 10.0]': a rate and its Clopper-Pearson interval."""
    return f"{100 * row[name]:.1f}% [{100 * row[name + '_lo']:.1f}, {100 * row[name + '_hi']:.1f}]"


SHOWN = ("continue", "stop", "gap_exceeds", "policy_exceeds", "policy_holds")
COVERAGE = (
    "gap_to_oracle_coverage_rule",
    "gap_to_oracle_coverage_t_ntest",
    "policy_gain_coverage_rule",
    "policy_gain_coverage_t_ntest",
)


def markdown(table, curves) -> str:
    """The validation's tables as Markdown (docs/decision-validation.md quotes them)."""
    head = "| mode | scenario | noise | " + " | ".join(SHOWN) + " |"
    lines = [head, "| --- " * (3 + len(SHOWN)) + "|"]
    for _, r in table.iterrows():
        lines.append(
            f"| {r['mode']} | {r['scenario']} | {r['noise_scale']:g}x | "
            + " | ".join(_pct(r, k) for k in SHOWN)
            + " |"
        )
    lines += [
        "",
        "| mode | scenario | noise | gap CI coverage (rule / t n-1) | policy CI coverage (rule / t n-1) | gap truth | policy truth |",
        "| --- " * 7 + "|",
    ]
    for _, r in table.iterrows():
        cov = [f"{100 * r[c]:.1f}%" for c in COVERAGE]
        lines.append(
            f"| {r['mode']} | {r['scenario']} | {r['noise_scale']:g}x | {cov[0]} / {cov[1]} | {cov[2]} / {cov[3]} | "
            f"{r['gap_to_oracle_bound_true']:+.2f}% | {r['policy_gain_true']:+.2f}% |"
        )
    lines += ["", "| mode | noise | power statement |", "| --- | --- | --- |"]
    for (m, k), c in curves.groupby(["mode", "noise_scale"]):
        lines.append(f"| {m} | {k:g}x | {sim.power_statement(c)['text']} |")
    return "\n".join(lines) + "\n"


def profile_markdown(profile) -> str:
    """The deployment profile's headline rates (flat surfaces) as Markdown."""
    lines = ["", "| profile headline | noise | continue | stop |", "| --- | --- | --- | --- |"]
    for _, r in profile.iterrows():
        lines.append(f"| flat | {r['noise_scale']:g}x | {_pct(r, 'continue')} | {_pct(r, 'stop')} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", type=Path)
    ap.add_argument("--seeds", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bootstrap-resamples", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path("data/validation"))
    ap.add_argument("--runs", type=int, help="portfolio runs to simulate (default: the study's)")
    ap.add_argument(
        "--invocations",
        type=int,
        help="trace length to simulate, resampled from the study's (default: its own)",
    )
    a = ap.parse_args(argv)
    for flag in ("runs", "invocations"):
        if getattr(a, flag) is not None and getattr(a, flag) < (3 if flag == "runs" else 8):
            ap.error(f"--{flag} {getattr(a, flag)}: needs at least {3 if flag == 'runs' else 8}")
    design = sim.Design(a.runs, a.invocations)
    t0 = time.time()
    table, curves = sim.validate(
        a.study, seeds=a.seeds, seed=a.seed, bootstrap_resamples=a.bootstrap_resamples, design=design
    )
    a.out.mkdir(parents=True, exist_ok=True)
    name = a.study.name + ("" if design == sim.Design() else f"-{a.runs or 'r'}x{a.invocations or 'n'}")
    table.round(6).to_csv(a.out / f"{name}.csv", index=False)
    curves.round(6).to_csv(a.out / f"{name}-power.csv", index=False)
    meta = {
        "command": "python tools/simulate_decision.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "rule_version": engine.RULE_VERSION,
        "seeds": a.seeds,
        "design": {"runs": int(table["runs"].iloc[0]), "invocations": int(table["invocations"].iloc[0])},
        "bootstrap_resamples": a.bootstrap_resamples,
        "noise": {m: vars(sim.load_recorded_mode(a.study, m).model) for m in ("graph", "eager")},
        "power": {
            f"{m}@{k}x": sim.power_statement(c)["text"]
            for (m, k), c in curves.groupby(["mode", "noise_scale"])
        },
        "seconds": round(time.time() - t0, 1),
    }
    (a.out / f"{name}.json").write_text(json.dumps(meta, indent=2, default=float) + "\n")
    profile = sim.profile_mc(
        a.study, seeds=a.seeds, seed=a.seed, bootstrap_resamples=a.bootstrap_resamples, design=design
    )
    profile.round(6).to_csv(a.out / f"{name}-profile.csv", index=False)
    (a.out / f"{name}.md").write_text(markdown(table, curves) + profile_markdown(profile))
    print(json.dumps(meta, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
