"""Decision v3.1 (tag `decision-v3.1`) against v3.1.1 on every H200 reference, cell by cell.

    python3 tools/rule_patch_check.py > data/validation/decision-v3.1-vs-v3.1.1.txt

v3.1.1 changed one thing in the bootstrap-t's pivots (``intervals.pivots`` since the sixth session): a
resample whose figure equals the sample's gets pivot 0 where v3.1 (commit 19e329e) gave it NaN when its
linearized SE was a tie's zero. This runs the
decision stage's own calls (``figures.study_figures`` and ``decision.decide``, config/config.yaml's
settings, without the detectable-effect simulation) on each reference's recorded artifacts twice, with
v3.1's body and with today's, and says whether the two decision tables are exactly equal.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from headroom.analysis import decision, figures, intervals  # noqa: E402
from headroom.core import artifacts, defaults, settings  # noqa: E402

TODAY = intervals.pivots


def v31(iv, per_boot, u0, ub, counts):
    """``intervals.pivots`` as the bootstrap-t of commit 19e329e (tag decision-v3.1) computed them."""
    est = iv[""]
    se_inv = np.sqrt(intervals.linear_var(u0))
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        theta = np.nanmean(per_boot, axis=1)
        se_b = np.sqrt(intervals.linear_var(ub, counts))
        step = np.sign(theta - est[:, None]) * np.inf  # NaN where theta == est
        pivot = np.where(se_b > intervals.TIED * se_inv[:, None], (theta - est[:, None]) / se_b, step)
        pivot = np.where(np.isnan(theta), np.nan, pivot)
    return pivot, se_inv


def decide(folder: Path, cfg: dict) -> pd.DataFrame:
    """The decision stage's table of one recorded study (scripts/decision.py, less the power rows)."""

    def read(name):
        return artifacts.read(folder / f"{name}.parquet")

    runs = sorted((folder / "portfolio").glob("run-*[0-9].parquet"))
    portfolio = pd.concat([artifacts.read(p) for p in runs], ignore_index=True)
    options = settings.merge("policies", defaults.section("policies"), cfg["policies"])
    figs = figures.study_figures(
        read("trace"),
        portfolio,
        read("lifecycle"),
        train_fraction=options.pop("train_fraction"),
        seed=options.pop("seed"),
        deployment=cfg["decision"].get("deployment"),
        **options,
    )
    confidence = float(options["confidence"])
    return decision.decide(
        figs, read("graph_sweep"), read("environment"), confidence=confidence, **cfg["decision"]
    )


def main() -> int:
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    differ = 0
    for folder in sorted((REPO / "data/reference/h200").iterdir()):
        if not (folder / "trace.parquet").exists():
            continue
        intervals.pivots = TODAY
        new = decide(folder, cfg)
        intervals.pivots = v31
        old = decide(folder, cfg)
        intervals.pivots = TODAY
        try:
            pd.testing.assert_frame_equal(old, new, check_exact=True)
            same = "exactly equal"
        except AssertionError as e:
            same, differ = "DIFFERENT: " + str(e).splitlines()[0], differ + 1
        print(
            f"{folder.name}: {len(new)} rows, verdict {new['verdict'].iloc[0]}; v3.1 and v3.1.1 {same}",
            flush=True,
        )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
