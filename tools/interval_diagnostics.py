"""Three diagnostics of the rule's intervals on a recorded study (docs/decision-validation.md, "What
the misses are made of"). Each runs the simulator's own cells (``simulate.run_mc``, the
scenarios' noise seed, test invocations redrawn) and prints one line per figure or row:

    PYTHONPATH=$PWD python tools/interval_diagnostics.py se-ratio data/reference/h200/default-gen2 graph
    PYTHONPATH=$PWD python tools/interval_diagnostics.py exceeds data/reference/h200/default-gen2 graph
    PYTHONPATH=$PWD python tools/interval_diagnostics.py prefills data/reference/h200/azure-conv-gen2-6x100 graph --effect 0.154578

* ``se-ratio``: on a flat surface (every figure's truth exactly 0 for the gap), the spread of each
  decided figure's estimate against its truth target beside its mean standard error and that SE's two
  parts (the jackknife over runs and the invocation bootstrap): a ratio above 1 is an interval wider
  than its figure's noise (over-coverage); then the root of the mean unbiased run part
  (``interval.run_variance_unbiased``, from 4 runs; nan below) and of the components' run part
  (``interval.run_variance_components``, decision v3.3's candidates) with its median df.
* ``exceeds``: what each candidate interval's lower end alone says of the gap (``<iv>`` above the
  threshold) on a pure phase split (``--effect``, default the tests' 0.15) and on a flat surface: the
  power an *exceeds* on that interval would have.
* ``prefills``: the boundary-gap null (a phase split of ``--effect``) seed by seed, grouped by how many
  prefills the seed's redrawn test slice holds: its own truth, the bound's upper end and the rate of
  `stop`.
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from headroom.decide import engine, figures, interval
from headroom.decide import power as sim

DECIDED_AND_BOUND = ("gap_to_oracle", "gap_to_oracle_bound", "policy_gain")


def _cell(study: str, mode: str, seeds: int, runs: int | None, invocations: int | None):
    s, R = sim.Design(runs, invocations).apply(sim.load_recorded_mode(study, mode))
    return s, sim.layout(s), sim._noise(s.md, s.model, seeds, R, 3)  # the scenarios' noise seed


def se_ratio(s, L, noise) -> list[str]:
    """The flat surface's estimate spread against its SE and the SE's two parts, per figure."""
    calls = []
    interval = interval.interval

    def recording(*args):  # the run part is not among the engine's outputs: record each call's
        calls.append((args, interval(*args)))
        return calls[-1][1]

    interval.interval = recording
    try:
        mc = sim.run_mc(s, L, sim.flat(s.md), noise, 1.0)
    finally:
        interval.interval = interval
    order = list(engine.specs(L, figures._probe(L)))  # the engine's interval calls, per batch, in order
    per_batch = len(order)
    assert len(calls) == per_batch * -(-len(noise) // 100), "one interval call per figure and batch"
    lines = []
    for name in DECIDED_AND_BOUND:
        j = order.index(name)
        mine = calls[j::per_batch]
        se2 = np.concatenate([c["_se"] for _, c in mine]) ** 2
        var_runs = np.concatenate([c["_var_runs"] for _, c in mine])
        # the unbiased run part (interval.run_variance_unbiased; NaN below 4 runs), unclipped
        unbiased = np.concatenate([interval.run_variance_unbiased(a[1], a[3], a[4], a[5]) for a, _ in mine])
        comps = [interval.run_variance_components(a[1], a[3], a[4], a[5]) for a, _ in mine]
        var_c, df_c = (np.concatenate([c[k] for c in comps]) for k in (0, 1))
        clipped = ~np.isclose(var_c, unbiased, rtol=1e-9, atol=0.0)  # equal wherever not clipped
        err = mc[name] - mc[name + "_true"].mean()
        rms = np.sqrt(se2.mean())
        lines.append(
            f"{name}: sd(estimate - target) {err.std():.4f}; rms SE {rms:.4f} (run part "
            f"{np.sqrt(var_runs.mean()):.4f}, invocation part {np.sqrt((se2 - var_runs).mean()):.4f}); "
            f"ratio {rms / err.std():.2f}; unbiased run part {np.sqrt(np.mean(unbiased)):.4f} "
            f"(negative, so clipped to 0, in {np.mean(unbiased < 0):.1%} of seeds; its sd / mean "
            f"{np.std(unbiased) / np.mean(unbiased):.2f}); components' run part {np.sqrt(np.mean(var_c)):.4f} "
            f"(df median {np.median(df_c):.1f}; the run term clipped, the pair term alone, in "
            f"{np.mean(clipped):.1%} of seeds)"
        )
    return lines


def exceeds(s, L, noise, effect: float) -> list[str]:
    """The gap's CI-alone exceeds rate per candidate interval on a phase split and on a flat surface."""
    lines = []
    for label, truth in (
        (f"phase split {effect:g}", sim.phase_split(s.md, effect)),
        ("flat", sim.flat(s.md)),
    ):
        mc = sim.run_mc(s, L, truth, noise, 1.0)
        rates = ", ".join(f"{iv} {mc[f'gap_exceeds_{iv}'].mean():.1%}" for iv in sim.INTERVALS)
        lines.append(f"{label} (gap truth {mc['gap_to_oracle_bound_true'].mean():+.2f}%): {rates}")
    return lines


def prefills(s, L, noise, effect: float) -> list[str]:
    """The boundary-gap null per number of prefills in the seed's redrawn test slice."""
    mc = sim.run_mc(s, L, sim.phase_split(s.md, effect), noise, 1.0)
    rows = np.random.default_rng(sim.REDRAW_SEED).integers(
        0, L.n - L.n_train, size=(len(noise), L.n - L.n_train)
    )
    mc["prefills"] = L.phase[L.n_train :][rows].sum(axis=1)  # run_mc's own redraws (one batch per 100)
    b = "gap_to_oracle_bound"
    table = mc.groupby("prefills").agg(
        seeds=(b, "size"), own_truth=(b + "_true", "mean"), bound=(b, "mean"), bound_hi=(b + "_hi", "median"),
        stop=("verdict", lambda v: (v == "stop").mean()),
    )  # fmt: skip
    head = (
        f"{len(mc)} seeds, {L.n - L.n_train} test invocations of which {int(L.phase[L.n_train :].sum())} "
        f"prefills in the recorded slice; truth target {mc[b + '_true'].mean():+.3f}%; "
        f"stop {(mc['verdict'] == 'stop').mean():.1%}"
    )
    return [head, pd.DataFrame(table).round(3).to_string()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("se-ratio", "exceeds", "prefills"))
    ap.add_argument("study")
    ap.add_argument("mode", choices=("graph", "eager"))
    ap.add_argument("--seeds", type=int, default=200)
    ap.add_argument("--runs", type=int, help="portfolio runs to simulate (default: the study's)")
    ap.add_argument("--invocations", type=int, help="trace length to simulate (default: the study's)")
    ap.add_argument("--effect", type=float, default=0.15, help="the phase split's size (exceeds, prefills)")
    a = ap.parse_args(argv)
    s, L, noise = _cell(a.study, a.mode, a.seeds, a.runs, a.invocations)
    print(
        f"{a.what} {a.study} {a.mode}: {len(s.md.runs) if a.runs is None else a.runs} runs x {s.md.us.shape[1]} invocations"
    )
    if a.what == "se-ratio":
        lines = se_ratio(s, L, noise)
    else:
        lines = (exceeds if a.what == "exceeds" else prefills)(s, L, noise, a.effect)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
