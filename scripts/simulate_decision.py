"""Full Monte Carlo validation of the decision on a recorded study (issue 10 item 6).

    PYTHONPATH=$PWD python scripts/simulate_decision.py data/reference/h200/default --seeds 400 --out data/validation

writes <out>/<study>.csv (one row per mode x scenario x noise scale x runs x trace length),
<out>/<study>-power.csv (power curves) and <out>/<study>.json (noise models, minimum detectable
effects, the command). See docs/decision-validation.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from headroom.analysis import simulate as sim


def _finite_or_more(mde: float, curve):
    """The MDE, or '> X' (X: the largest true gain tried) when the curve never reaches the power."""
    return round(mde, 3) if mde != float("inf") else f"> {curve['true_policy_gain_pct'].max():.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("study", type=Path)
    ap.add_argument("--seeds", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bootstrap-resamples", type=int, default=200)
    ap.add_argument("--out", type=Path, default=Path("data/validation"))
    a = ap.parse_args(argv)
    t0 = time.time()
    table, curves = sim.validate(
        a.study, seeds=a.seeds, seed=a.seed, bootstrap_resamples=a.bootstrap_resamples
    )
    a.out.mkdir(parents=True, exist_ok=True)
    name = a.study.name
    table.round(6).to_csv(a.out / f"{name}.csv", index=False)
    curves.round(6).to_csv(a.out / f"{name}-power.csv", index=False)
    meta = {
        "command": "python scripts/simulate_decision.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "seeds": a.seeds,
        "bootstrap_resamples": a.bootstrap_resamples,
        "noise": {m: vars(sim.load_study(a.study, m).model) for m in ("graph", "eager")},
        "mde_pct": {
            f"{m}@{r}runs": {
                f"power{int(pw * 100)}": _finite_or_more(sim.mde_from_curve(c, pw), c) for pw in (0.8, 0.9)
            }
            for (m, r), c in curves.groupby(["mode", "runs"])
        },
        "seconds": round(time.time() - t0, 1),
    }
    (a.out / f"{name}.json").write_text(json.dumps(meta, indent=2, default=float) + "\n")
    print(json.dumps(meta, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
