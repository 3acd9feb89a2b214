"""The decision rule's validation: its error rates and its interval's coverage, simulated on a
recorded study's trace, noise and costs at a study design, with the engine and rule the pipeline runs.

    PYTHONPATH=$PWD python tools/validation/simulate.py data/reference/h200/default-gen2-6x100-c \
        --seeds 400 --runs 6 --invocations 128 --min-per-kind 64 --out data/validation/v4

writes <out>/<study>.csv (one row per deployment-profile part x scenario, and the headline rows) and
<out>/<study>.md (the acceptance table, with the command). Scenarios, per part of the deployment
profile (decode-only steps in graph mode, mixed steps in eager mode):

* ``flat``: every candidate equal — the headline should `stop` (not ``uncapturable``) and not continue;
* ``planted-3x``: headroom a deployable policy can learn (``power.beyond_category``) planted in the
  graph part at 3x the policy threshold (its truth target), the others flat — the headline should
  continue;
* ``gap-at-threshold``: headroom no key can learn (``scattered``: each invocation has its own faster
  tile) sized so the graph part's true gap to the true oracle equals its threshold, the others flat —
  the headline should rarely stop;
* coverage of the decided figures' intervals (gap, its bound, the policy figure) of their truth
  targets (the mean over seeds of each figure scored on the true surface) in every scenario.

The design: ``--runs`` runs of ``--invocations`` invocations, allocated to the step kinds as the
stratified sampler allocates them (at least ``--min-per-kind`` each, the rest by the recorded mix;
defaults: the shipped config's); each part's recorded invocations resampled to its count (stride,
with replacement when the part holds fewer: a recorded part of few distinct invocations then repeats
them, and its test invocations are not independent — its coverage is then no evidence), weighted as
the sampler weights them. A part's noise is its recorded
graph mode's: eager timings recorded before decision v4 include the host's launch path, and eager
calls timed on a busy GPU read the graph replay's time within 1-2 µs (issue 35's H200 table), so
the graph mode's noise on the part's invocations, with eager's costs (lookups, plan builds), stands
for it until a reference recorded under v4 replaces it (``--eager-noise recorded`` uses the eager
timings as recorded).
"""

from __future__ import annotations

import argparse
import sys
import time
import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from headroom.core import defaults  # noqa: E402
from headroom.decide import engine, figures, measured, power, rule  # noqa: E402
from headroom.decide.costs import LifecycleCosts, lifecycle_costs  # noqa: E402

COVERED = ("gap_to_oracle", "gap_to_oracle_bound", "policy_gain")


@dataclass
class Part:
    """One deployment-profile part at the simulated design, ready to simulate."""

    name: str
    md: measured.ModeData
    L: engine.Layout
    model: power.NoiseModel
    runs: int


def rate(x) -> tuple[float, float, float]:
    """Proportion and its 95% Clopper-Pearson interval (the Monte Carlo tolerance)."""
    x = np.asarray(x, bool)
    k, n = int(x.sum()), len(x)
    lo = stats.beta.ppf(0.025, k, n - k + 1) if k > 0 else 0.0
    hi = stats.beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return k / n, float(lo), float(hi)


def recorded(study_dir) -> tuple[dict, LifecycleCosts]:
    """({mode: ModeData} of a recorded study, its lifecycle costs)."""
    d = Path(study_dir)
    trace = pd.read_parquet(d / "trace.parquet")
    runs = sorted(
        p for p in (d / "portfolio").glob("run-*.parquet") if not p.name.endswith("-samples.parquet")
    )
    timings = pd.concat([pd.read_parquet(p) for p in runs])
    life = d / "lifecycle.parquet"
    costs = lifecycle_costs(pd.read_parquet(life)) if life.exists() else LifecycleCosts()
    return {m.mode: m for m in measured.mode_data(trace, timings)}, costs


def stratified(md: measured.ModeData, per_part: int | None) -> measured.ModeData:
    """The part's invocations at the design: ``per_part`` of them, evenly spaced (with replacement
    when the part holds fewer), in time order, each weighted by the part's recorded count / sampled."""
    n = md.us.shape[1]
    if per_part is None or per_part == n:
        return md
    idx = np.floor(np.arange(per_part) * n / per_part).astype(int)
    feats = md.features.iloc[idx].reset_index(drop=True).assign(invocation=np.arange(per_part))
    feats["weight"] = n / per_part
    return replace(md, features=feats, us=md.us[:, idx], sem2=md.sem2[:, idx], host_us=None)


def design(modes: dict, invocations: int, min_per_kind: int) -> dict[str, int]:
    """Each step kind's invocations at the design, as the stratified sampler allocates them
    (``headroom.trace.invocations.allocation``) on a window whose mix is the recorded trace's."""
    from headroom.trace.invocations import allocation

    kinds = measured.step_of(next(iter(modes.values())).features)
    sizes = {k: int((kinds == k).sum()) * 1000 for k in set(kinds)}  # the recorded mix, a long window
    return allocation(sizes, invocations, min_per_kind)


def parts(study_dir, runs: int | None, per_kind: dict, resamples: int, eager_noise: str) -> list[Part]:
    modes, costs = recorded(study_dir)
    pol = defaults.section("policies")
    opts = measured.Options.from_mapping(
        {k: v for k, v in pol.items() if k not in ("train_fraction", "seed")}
        | {"bootstrap_resamples": resamples}
    )
    out = []
    for step, mode in figures.deployment_profile().items():
        source = modes["graph"] if eager_noise == "graph" else modes[mode]
        sub = measured.part(source, step)
        if sub is None:
            continue
        sub = replace(stratified(sub, per_kind[step]), mode=mode, timing=())
        L = engine.layout(sub, opts, costs, pol["train_fraction"], pol["seed"])
        out.append(Part(f"{mode}@{step}", sub, L, power.estimate_noise(sub), runs or len(source.runs)))
    return out


def scattered(md: measured.ModeData, effect: float) -> np.ndarray:
    """Headroom no key can learn: each invocation has its own faster base config (attention: tile;
    seeded by its position), by ``effect``; every other candidate flat."""
    truth = power.flat(md)
    bases = np.array(sorted(set(md.base[~md.native])))
    want = bases[[zlib.crc32(f"scattered|{i}".encode()) % len(bases) for i in range(md.us.shape[1])]]
    fast = (md.base[None, :] == want[:, None]) & ~md.native[None, :]
    return truth * np.where(fast, 1.0 - effect, 1.0)


def sized(p: Part, make, figure: str, target: float, thresholds: dict, seeds: int = 60) -> float:
    """The effect for which ``figure``'s truth target (mean of '<figure>_true') is ``target``:
    bisection on [0, 0.9] on a pilot noise draw."""
    pilot = power.noise(p.md, p.model, seeds, p.runs, 1003)
    lo, hi = 0.0, 0.9
    for _ in range(10):
        mid = (lo + hi) / 2
        r = power.simulate(p.L, make(mid), pilot, thresholds, p.model.within_sd, only=(figure,), decide=False)
        lo, hi = (mid, hi) if np.nanmean(r[f"{figure}_true"]) < target else (lo, mid)
    return (lo + hi) / 2


def run(
    study_dir,
    *,
    seeds=400,
    runs=6,
    invocations=128,
    min_per_kind=64,
    resamples=200,
    eager_noise="graph",
    seed=0,
) -> pd.DataFrame:
    thresholds = defaults.section("decision")
    per_kind = design(recorded(study_dir)[0], invocations, min_per_kind)
    ps = parts(study_dir, runs, per_kind, resamples, eager_noise)
    planted = next(i for i, p in enumerate(ps) if p.md.mode == "graph")
    noise = [power.noise(p.md, p.model, seeds, p.runs, seed + 17 * (j + 1)) for j, p in enumerate(ps)]
    flats = [
        power.simulate(q.L, power.flat(q.md), noise[j], thresholds, q.model.within_sd)
        for j, q in enumerate(ps)
    ]
    p = ps[planted]
    thr_policy, thr_gap = thresholds["max_policy_gain_pct"], thresholds["max_gap_to_oracle_pct"]
    e3 = sized(p, lambda x: power.beyond_category(p.md, x), "policy_gain", 3 * thr_policy, thresholds)
    eg = sized(p, lambda x: scattered(p.md, x), "gap_to_oracle_bound", thr_gap, thresholds)
    scenarios = {
        "flat": (0.0, flats),
        "planted-3x": (e3, [*flats[:planted], power.simulate(p.L, power.beyond_category(p.md, e3), noise[planted], thresholds, p.model.within_sd), *flats[planted + 1 :]]),
        "gap-at-threshold": (eg, [*flats[:planted], power.simulate(p.L, scattered(p.md, eg), noise[planted], thresholds, p.model.within_sd), *flats[planted + 1 :]]),
    }  # fmt: skip
    base = {
        "study": Path(study_dir).name,
        "runs": runs,
        "invocations": invocations,
        "min_per_kind": min_per_kind,
        "seeds": seeds,
        "eager_noise": eager_noise,
    }
    rows = []
    for name, (effect, sims) in scenarios.items():
        heads = [
            rule.headline(
                {q.name: (s["verdict"][k], s["reason_code"][k]) for q, s in zip(ps, sims, strict=True)}
            )
            for k in range(seeds)
        ]
        v = np.array([h[0] for h in heads])
        code = np.array([h[1] for h in heads])
        row = {**base, "part": "headline", "scenario": name, "effect": effect}
        for event, x in (
            ("continue", v == "continue"),
            ("stop", v == "stop"),
            ("stop_not_uncapturable", (v == "stop") & (code != "uncapturable")),
        ):
            row[event], row[f"{event}_lo"], row[f"{event}_hi"] = rate(x)
        rows.append(row)
        for q, s in zip(ps, sims, strict=True):
            r = {
                **base,
                "part": q.name,
                "scenario": name,
                "effect": effect if q is p else 0.0,
                "part_invocations": q.md.us.shape[1],
            }
            for event, x in (("continue", s["verdict"] == "continue"), ("stop", s["verdict"] == "stop")):
                r[event], r[f"{event}_lo"], r[f"{event}_hi"] = rate(x)
            for f in COVERED:
                target = float(np.nanmean(s[f"{f}_true"]))
                r[f"{f}_true"] = target
                r[f"{f}_coverage"] = rate((s[f + "_lo"] <= target) & (target <= s[f + "_hi"]))[0]
                r[f"{f}_halfwidth"] = float(np.nanmedian((s[f + "_hi"] - s[f + "_lo"]) / 2))
            rows.append(r)  # fmt: skip
    return pd.DataFrame(rows)


def _pct(row, name) -> str:
    return f"{100 * row[name]:.1f}% [{100 * row[name + '_lo']:.1f}, {100 * row[name + '_hi']:.1f}]"


def table(df: pd.DataFrame, command: str) -> str:
    """The acceptance table in Markdown."""
    lines = [f"Command: `{command}`", "", f"Rule: `{rule.RULE_VERSION}`.", ""]
    lines += [
        "| scenario | headline continue | headline stop | stop (not uncapturable) |",
        "| --- | --- | --- | --- |",
    ]
    for _, r in df[df["part"] == "headline"].iterrows():
        lines.append(
            f"| {r['scenario']} | {_pct(r, 'continue')} | {_pct(r, 'stop')} | {_pct(r, 'stop_not_uncapturable')} |"
        )
    lines += [
        "",
        "| part | scenario | effect | continue | stop | coverage gap / bound / policy | truth gap / bound / policy (%) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for _, r in df[df["part"] != "headline"].iterrows():
        cov = " / ".join(f"{100 * r[f + '_coverage']:.1f}%" for f in COVERED)
        tru = " / ".join(f"{r[f + '_true']:+.2f}" for f in COVERED)
        lines.append(
            f"| {r['part']} | {r['scenario']} | {r['effect']:.3f} | {_pct(r, 'continue')} | {_pct(r, 'stop')} | {cov} | {tru} |"
        )
    return "\n".join(lines) + "\n"  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("study_dir")
    ap.add_argument("--seeds", type=int, default=400)
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--invocations", type=int, default=defaults.value("trace", "invocations"))
    ap.add_argument(
        "--min-per-kind", type=int, default=defaults.section("trace")["stratified"]["min_per_kind"]
    )
    ap.add_argument("--resamples", type=int, default=200)
    ap.add_argument("--eager-noise", choices=("graph", "recorded"), default="graph")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    t = time.time()
    df = run(args.study_dir, seeds=args.seeds, runs=args.runs, invocations=args.invocations, min_per_kind=args.min_per_kind, resamples=args.resamples, eager_noise=args.eager_noise)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    name = f"{Path(args.study_dir).name}-{args.runs}x{args.invocations}"
    df.to_csv(args.out / f"{name}.csv", index=False)
    command = "PYTHONPATH=$PWD python tools/validation/simulate.py " + " ".join(argv or sys.argv[1:])
    (args.out / f"{name}.md").write_text(table(df, command) + f"\n{time.time() - t:.0f} s on this machine.\n")
    print(table(df, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())
