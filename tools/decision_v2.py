"""A previous rule's verdicts and figures on the recorded H200 references: REPRODUCTION.md's v2 and
v3 columns.

Decision v2 is the rule of commit 40da505 (before decision v3). Run it from a checkout of that commit,
on this repository's recorded inputs, and write the table here:

    git worktree add /tmp/v2 40da505
    (cd /tmp/v2 && PYTHONPATH=/tmp/v2 python $OLDPWD/tools/decision_v2.py $OLDPWD/data/validation/decision-v2.csv)

Decision v3 (the Welch t interval) is the rule of commit 62ad2c1, the last before decision-v3.1; its
table names every H200 reference:

    mkdir /tmp/v3 && git archive 62ad2c1 headroom kernels config pyproject.toml | tar -x -C /tmp/v3
    (cd /tmp/v3 && PYTHONPATH=/tmp/v3 python $OLDPWD/tools/decision_v2.py $OLDPWD/data/validation/decision-v3.csv \
        default azure-conv default-gen2 azure-conv-gen2 default-gen2-long default-gen2-6x100 power-pilot)

Reads the references from the directory this script lives in (data/reference/h200/<study>); the studies
left out are v2's four.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import yaml

REFERENCE = Path(__file__).resolve().parent.parent / "data" / "reference" / "h200"
STUDIES = ("default", "azure-conv", "default-gen2", "azure-conv-gen2")
COLUMNS = ["mode", "figure", "estimate", "ci_low", "ci_high", "state", "mode_verdict", "verdict"]
OPTIONAL = ["hold_high", "rule_version"]  # where the rule has them (v2 has neither)


def one(name: str, cfg: dict) -> pd.DataFrame:
    from headroom.analysis import decision, figures  # the checkout's (v2) modules

    d = REFERENCE / name
    runs = pd.concat([pd.read_parquet(p) for p in sorted((d / "portfolio").glob("run-?.parquet"))])
    pol = dict(cfg["policies"])
    figs = figures.study_figures(
        pd.read_parquet(d / "trace.parquet"),
        runs,
        pd.read_parquet(d / "lifecycle.parquet"),
        train_fraction=pol.pop("train_fraction"),
        seed=pol.pop("seed"),
        **pol,
    )
    t = decision.decide(
        figs,
        pd.read_parquet(d / "graph_sweep.parquet"),
        pd.read_parquet(d / "environment.parquet"),
        confidence=pol["confidence"],
        **cfg["decision"],
    )
    return t[COLUMNS + [c for c in OPTIONAL if c in t.columns]].assign(study=name)


def main(argv: list[str]) -> int:
    cfg = yaml.safe_load(Path("config/config.yaml").read_text())  # the checkout's config
    pd.concat([one(n, cfg) for n in argv[1:] or STUDIES]).round(6).to_csv(argv[0], index=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
