"""Full Monte Carlo validation of the decision on a recorded study (issue 18 items 7 and 10).

    PYTHONPATH=$PWD python tools/simulate_decision.py data/reference/h200/default-gen2 --seeds 400 --out data/validation

writes <out>/<study>.csv (one row per mode x scenario x noise scale: rates, each candidate interval's
coverage and CI-alone states), <out>/<study>-power.csv (power curves per mode and noise scale),
<out>/<study>-profile.csv (the deployment profile's headline on flat surfaces),
<out>/<study>-profile-scenarios.csv and -profile-power.csv (its boundary nulls, coverage and power),
<out>/<study>.md (the tables) and <out>/<study>.json (noise models, power statements, the command,
the rule version). --scenarios-only, --effects-from and --profile-only run parts of it. Every figure
and verdict comes from the decision engine. See docs/decision-validation.md.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from pathlib import Path

import pandas as pd

from headroom.decide import engine
from headroom.decide import power as sim


def _pct(row, name: str) -> str:
    """'7.0% [4.7, 10.0]': a rate and its Clopper-Pearson interval."""
    return f"{100 * row[name]:.1f}% [{100 * row[name + '_lo']:.1f}, {100 * row[name + '_hi']:.1f}]"


SHOWN = ("continue", "stop", "gap_exceeds", "policy_exceeds", "policy_holds")
# welch (v3's rule), t_ntest, boot_t (v3.1's), boot_t_u, boot_t_c, boot_t_c1 (v3.3's candidates), rule
CANDIDATES = tuple(sim.INTERVALS)
LABEL = {
    "welch": "Welch",
    "t_ntest": "t n-1",
    "boot_t": "boot-t",
    "boot_t_u": "boot-t u",
    "boot_t_c": "boot-t c",
    "boot_t_c1": "boot-t c1",
    "rule": "rule",
}
LABELS = " / ".join(LABEL[iv] for iv in CANDIDATES)
# per scenario, the CI-alone states a candidate interval is judged on (``simulate.candidate_states``)
JUDGED = {
    "flat": ("stop",),
    "boundary-gap": ("gap_exceeds", "stop"),
    "boundary-policy": ("policy_exceeds", "policy_holds"),
}


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _head(*names) -> list[str]:
    return [_row(names), "| --- " * len(names) + "|"]


def _coverage(r, figure: str) -> str:
    return " / ".join(f"{100 * r[f'{figure}_coverage_{iv}']:.1f}%" for iv in CANDIDATES)


def coverage_lines(table, label: str = "mode") -> list[str]:
    """Coverage of the gap and policy CIs per candidate interval, with the truth targets."""
    lines = _head(label, "scenario", "noise", f"gap CI coverage ({LABELS})",
                  f"policy CI coverage ({LABELS})", "gap truth", "policy truth")  # fmt: skip
    for _, r in table.iterrows():
        noise = f"{r['noise_scale']:g}x" if "noise_scale" in r else "1x"
        lines.append(_row([r[label], r["scenario"], noise, _coverage(r, "gap_to_oracle"),
                           _coverage(r, "policy_gain"), f"{r['gap_to_oracle_bound_true']:+.2f}%",
                           f"{r['policy_gain_true']:+.2f}%"]))  # fmt: skip
    return lines


def candidate_lines(table) -> list[str]:
    """What each candidate interval alone would decide where it matters: flat at 1x (stop), the
    boundary nulls (exceeds, and stop or holds)."""
    lines = _head("mode", "scenario", "state", *(f"{iv}" for iv in CANDIDATES))
    for _, r in table.iterrows():
        if r["scenario"] != "flat" or r["noise_scale"] == 1.0:
            for state in JUDGED[r["scenario"]]:
                lines.append(
                    _row([r["mode"], r["scenario"], state, *(_pct(r, f"{state}_{iv}") for iv in CANDIDATES)])
                )
    return lines


def _power_groups(curves):
    """The power curves per (mode, noise scale); none when the power curves were not run."""
    return curves.groupby(["mode", "noise_scale"]) if len(curves) else []


def markdown(table, curves) -> str:
    """The validation's tables as Markdown (docs/decision-validation.md quotes them)."""
    lines = _head("mode", "scenario", "noise", *SHOWN)
    for _, r in table.iterrows():
        lines.append(_row([r["mode"], r["scenario"], f"{r['noise_scale']:g}x", *(_pct(r, k) for k in SHOWN)]))
    lines += ["", *coverage_lines(table), "", *candidate_lines(table)]
    lines += ["", *_head("mode", "noise", "power statement")] if len(curves) else []
    for (m, k), c in _power_groups(curves):
        lines.append(_row([m, f"{k:g}x", sim.power_statement(c)["text"]]))
    return "\n".join(lines) + "\n"


def profile_markdown(profile, scenarios, curve) -> str:
    """The deployment profile's headline: flat rates, boundary nulls, coverage, power (Markdown)."""
    lines = ["", *_head("profile headline", "noise", "continue", "stop")]
    for _, r in profile.iterrows():
        lines.append(_row(["flat", f"{r['noise_scale']:g}x", _pct(r, "continue"), _pct(r, "stop")]))
    shown = ("continue", "stop", "gap_exceeds", "policy_exceeds", "policy_holds")
    lines += ["", *_head("profile headline, planted part", "scenario", *shown)]
    for _, r in scenarios.iterrows():
        lines.append(_row([r["part"], r["scenario"], *(_pct(r, k) for k in shown)]))
    lines += ["", *coverage_lines(scenarios, "part"), ""]
    lines += [f"Profile power ({curve['part'].iloc[0]}, noise 1x): {sim.power_statement(curve)['text']}."]
    return "\n".join(lines) + "\n"


def _profile(a, design, name: str) -> dict:
    """The deployment profile's Monte Carlo: writes <name>-profile*.csv; returns its power statement."""
    profile = sim.profile_mc(
        a.study, seeds=a.seeds, seed=a.seed, bootstrap_resamples=a.bootstrap_resamples, design=design
    )
    scenarios, curve = sim.profile_scenarios(
        a.study, seeds=a.seeds, seed=a.seed, bootstrap_resamples=a.bootstrap_resamples, design=design
    )
    profile.round(6).to_csv(a.out / f"{name}-profile.csv", index=False)
    scenarios.round(6).to_csv(a.out / f"{name}-profile-scenarios.csv", index=False)
    curve.round(6).to_csv(a.out / f"{name}-profile-power.csv", index=False)
    return {"text": profile_markdown(profile, scenarios, curve), "power": sim.power_statement(curve)["text"]}


def _parser() -> argparse.ArgumentParser:
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
    ap.add_argument("--modes", default="graph,eager", help="modes to simulate, comma-separated")
    ap.add_argument(
        "--scenarios-only",
        action="store_true",
        help="the scenarios alone: no power curves, no profile (files <study>-scenarios-<modes>.*)",
    )
    ap.add_argument(
        "--effects-from",
        type=Path,
        help="a validation csv whose boundary-null effects to reuse (same study, design and --seed)",
    )
    ap.add_argument(
        "--stop-sweep",
        action="store_true",
        help="only P(stop | flat) of eager mode and the profile against design and noise (STOP_GRID)",
    )
    ap.add_argument(
        "--profile-only",
        action="store_true",
        help="rerun only the deployment profile's Monte Carlo; the per-mode tables are read from <out>",
    )
    return ap


# --stop-sweep: the designs and noise scales P(stop | flat) is priced at (docs/decision-validation.md)
STOP_GRID = (
    (sim.Design(6, 100), (1.0, 0.25, 0.1, 0.075, 0.06, 0.05, 0.04, 0.03, 0.02, 0.01)),
    (sim.Design(6, 400), (1.0,)),
    (sim.Design(12, 100), (1.0,)),
)


@functools.cache
def _gpu_s(runs: int, invocations: int) -> float:
    """`headroom plan`'s predicted GPU seconds of the default study at this design."""
    import copy

    from headroom.core import config as hconfig
    from headroom.measure import cost
    from headroom.trace import source

    cfg = copy.deepcopy(hconfig.load(cost.PROJECT_ROOT / "config" / "config.yaml"))
    cfg["trace"]["invocations"], cfg["portfolio"]["runs"] = invocations, runs
    study = hconfig.plan_studies(
        {**cfg, "studies": ["default"]}, cuda_available=True, check_source=source.check
    )
    return cost.plan_study("default", study["default"], cost.fit(cost.references())).gpu_s


def _fmt(r, key: str, text) -> str:
    """``text(value)`` of a table cell, blank where the row has none (the profile's rows)."""
    return text(r[key]) if key in r and pd.notna(r[key]) else ""


def stop_sweep_lines(table) -> list[str]:
    """The --stop-sweep table (Markdown)."""
    lines = _head("part", "runs x invocations", "GPU s (plan)", "noise", "stop", "gap holds", "policy holds",
                  "gap bound mean / half-width", "cross-run gap half-width")  # fmt: skip
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    for _, r in table.iterrows():
        bound = _fmt(r, "gap_to_oracle_bound_mean", lambda x: f"{x:+.2f}%")
        bound += _fmt(r, "gap_to_oracle_bound_halfwidth", lambda x: f" / {x:.2f} pp")
        cells = [
            r["part"],
            f"{r['runs']} x {r['invocations']}",
            f"{r['gpu_s']:.0f}",
            f"{r['noise_scale']:g}x",
        ]
        cells += [_pct(r, "stop"), _fmt(r, "gap_holds", pct), _fmt(r, "policy_holds", pct), bound]
        lines.append(_row([*cells, _fmt(r, "gap_to_oracle_halfwidth", lambda x: f"{x:.2f} pp")]))
    return lines


def stop_sweep(a, command: str) -> dict:
    """P(stop | flat) of eager mode alone and of the deployment profile's headline against the design
    and the noise scale (``STOP_GRID``): <out>/<study>-stop-sweep.{csv,md,json}."""
    t0 = time.time()
    kw = {"seeds": a.seeds, "seed": a.seed, "bootstrap_resamples": a.bootstrap_resamples}
    eager = sim.stop_sweep(a.study, STOP_GRID, **kw).assign(part="eager")
    prof = [sim.profile_mc(a.study, scales=k, design=d, **kw) for d, k in STOP_GRID]
    prof = pd.concat(prof, ignore_index=True).assign(part="profile headline", mode="profile")
    prof["invocations"] = [d.invocations for d, k in STOP_GRID for _ in k]
    table = pd.concat([eager, prof], ignore_index=True)
    table["gpu_s"] = [
        _gpu_s(int(r), int(n)) for r, n in zip(table["runs"], table["invocations"], strict=True)
    ]
    name = a.study.name + "-stop-sweep"
    table.round(6).to_csv(a.out / f"{name}.csv", index=False)
    (a.out / f"{name}.md").write_text("\n".join(stop_sweep_lines(table)) + "\n")
    meta = {"command": command, "rule_version": engine.RULE_VERSION, "seeds": a.seeds,
            "seconds": round(time.time() - t0, 1)}  # fmt: skip
    (a.out / f"{name}.json").write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _effects(path: Path | None) -> dict | None:
    """{(mode, scenario): effect} of the boundary nulls in an earlier validation csv."""
    if path is None:
        return None
    rows = pd.read_csv(path)
    rows = rows[rows["scenario"].str.startswith("boundary-")]
    return {(r["mode"], r["scenario"]): float(r["effect"]) for _, r in rows.iterrows()}


def _modes(a, design, name: str, command: str) -> tuple:
    """The per-mode Monte Carlo (or, with --profile-only, its files): (table, curves, meta)."""
    if a.profile_only:
        meta = json.loads((a.out / f"{name}.json").read_text())
        meta["profile_command"] = command
        return pd.read_csv(a.out / f"{name}.csv"), pd.read_csv(a.out / f"{name}-power.csv"), meta
    t0 = time.time()
    table, curves = sim.validate(
        a.study,
        seeds=a.seeds,
        seed=a.seed,
        modes=tuple(a.modes.split(",")),
        bootstrap_resamples=a.bootstrap_resamples,
        design=design,
        power=not a.scenarios_only,
        effects=_effects(a.effects_from),
    )
    table.round(6).to_csv(a.out / f"{name}.csv", index=False)
    if len(curves):
        curves.round(6).to_csv(a.out / f"{name}-power.csv", index=False)
    meta = {
        "command": command,
        "rule_version": engine.RULE_VERSION,
        "seeds": a.seeds,
        "design": {"runs": int(table["runs"].iloc[0]), "invocations": int(table["invocations"].iloc[0])},
        "bootstrap_resamples": a.bootstrap_resamples,
        "noise": {m: vars(sim.load_recorded_mode(a.study, m).model) for m in ("graph", "eager")},
        "power": {f"{m}@{k}x": sim.power_statement(c)["text"] for (m, k), c in _power_groups(curves)},
        "seconds": round(time.time() - t0, 1),
    }
    return table, curves, meta


def main(argv=None) -> int:
    ap = _parser()
    a = ap.parse_args(argv)
    for flag in ("runs", "invocations"):
        if getattr(a, flag) is not None and getattr(a, flag) < (3 if flag == "runs" else 8):
            ap.error(f"--{flag} {getattr(a, flag)}: needs at least {3 if flag == 'runs' else 8}")
    design = sim.Design(a.runs, a.invocations)
    name = a.study.name + ("" if design == sim.Design() else f"-{a.runs or 'r'}x{a.invocations or 'n'}")
    if a.profile_only and not (a.out / f"{name}.csv").exists():
        ap.error(f"--profile-only: {a.out / name}.csv is missing (run without --profile-only first)")
    if a.scenarios_only:
        name += "-scenarios-" + a.modes.replace(",", "-")
    a.out.mkdir(parents=True, exist_ok=True)
    command = "python tools/simulate_decision.py " + " ".join(sys.argv[1:] if argv is None else argv)
    if a.stop_sweep:
        print(json.dumps(stop_sweep(a, command), indent=2))
        return 0
    table, curves, meta = _modes(a, design, name, command)
    t0 = time.time()
    profile = {"text": ""} if a.scenarios_only else _profile(a, design, name)
    if not a.scenarios_only:
        meta["profile_power"], meta["profile_seconds"] = profile["power"], round(time.time() - t0, 1)
    (a.out / f"{name}.json").write_text(json.dumps(meta, indent=2, default=float) + "\n")
    (a.out / f"{name}.md").write_text(markdown(table, curves) + profile["text"])
    print(json.dumps(meta, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
