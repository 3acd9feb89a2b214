"""Why one coverage cell is low: eager mode, flat surface, noise 0.5x (default: default-gen2-long at
6 x 100; docs/decision-validation.md, "The eager policy-coverage cell").

    PYTHONPATH=$PWD python tools/coverage_cell.py --seeds 400
    PYTHONPATH=$PWD python tools/coverage_cell.py --seeds 400 --study data/reference/h200/default-gen2 --runs 0 --invocations 0

Runs that one cell of the validation (``simulate.run_mc``, the scenarios' noise seed, test invocations
redrawn) twice: with each median's standard error at the noise's scale (the simulator since its fix)
and at its 1x value (before it), and prints, per run, the policy figure's truth target (mean over
seeds), the spread of the seeds' own truths, the estimator's error against its own seed's truth, and
the bootstrap-t CI's coverage of the target and of each seed's own truth, with the missed seeds' truths
and half-widths.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from headroom.decide import power as sim


def cell(s, L, noise, k: float) -> dict:
    """The policy figure's coverage diagnostics of one flat cell at noise ``k``."""
    mc = sim.run_mc(s, L, sim.flat(s.md), noise, k)
    lo, hi = (mc["policy_gain" + e] for e in sim.INTERVALS["boot_t"])
    target, own = mc["policy_gain_true"].mean(), mc["policy_gain_true"]
    miss = ~((lo <= target) & (target <= hi))
    half = (hi - lo) / 2
    return {
        "target_pct": target,
        "own_truth_sd_pp": own.std(),
        "error_vs_own_truth_sd_pp": (mc["policy_gain"] - own).std(),
        "coverage_of_target": 1 - miss.mean(),
        "coverage_of_own_truth": ((lo <= own) & (own <= hi)).mean(),
        "misses_above_target": (lo > target).mean(),
        "missed_truth_range_pct": (own[miss].min(), own[miss].max()),
        "missed_median_halfwidth_pp": half[miss].median(),
        "median_halfwidth_pp": half.median(),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=400)
    ap.add_argument("--scale", type=float, default=0.5)
    ap.add_argument("--study", default="data/reference/h200/default-gen2-long")
    ap.add_argument("--runs", type=int, default=6, help="0: the study's own")
    ap.add_argument("--invocations", type=int, default=100, help="0: the study's own")
    a = ap.parse_args(argv)
    base = sim.load_recorded_mode(a.study, "eager")
    s, runs = sim.Design(a.runs or None, a.invocations or None).apply(base)
    L, noise = sim.layout(s), sim._noise(s.md, s.model, a.seeds, runs, 3)  # the scenarios' seed
    # before the fix: the standard error stayed at 1x (within_sd / k, scaled by k in run_mc)
    before = replace(s, model=replace(s.model, within_sd=s.model.within_sd / a.scale))
    for name, mode in (("SE at the noise's scale (fixed)", s), ("SE at 1x (before the fix)", before)):
        out = cell(mode, L, noise, a.scale)
        print(name, {k: tuple(round(float(x), 3) for x in v) if isinstance(v, tuple) else round(float(v), 3)
                     for k, v in out.items()})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
