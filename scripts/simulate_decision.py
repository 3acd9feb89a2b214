"""Full Monte Carlo validation of the decision on a recorded study (issue 18 item 10).

    PYTHONPATH=$PWD python scripts/simulate_decision.py data/reference/h200/default-gen2 --seeds 400 --out data/validation

writes <out>/<study>.csv (one row per mode x scenario x noise scale), <out>/<study>-power.csv (power
curves per mode and noise scale) and <out>/<study>.json (noise models, power statements, the command,
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
        "rule_version": engine.RULE_VERSION,
        "seeds": a.seeds,
        "bootstrap_resamples": a.bootstrap_resamples,
        "noise": {m: vars(sim.load_study(a.study, m).model) for m in ("graph", "eager")},
        "power": {
            f"{m}@{k}x": sim.power_statement(c)["text"]
            for (m, k), c in curves.groupby(["mode", "noise_scale"])
        },
        "seconds": round(time.time() - t0, 1),
    }
    (a.out / f"{name}.json").write_text(json.dumps(meta, indent=2, default=float) + "\n")
    print(json.dumps(meta, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
