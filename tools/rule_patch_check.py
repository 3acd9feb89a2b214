"""A rule change after a tag, checked cell by cell on every H200 reference.

    python3 tools/rule_patch_check.py v3.1.1 > data/validation/decision-v3.1-vs-v3.1.1.txt
    python3 tools/rule_patch_check.py v3.2 > data/validation/decision-v3.1.1-vs-v3.2.txt
    python3 tools/rule_patch_check.py v3.3 > data/validation/decision-v3.2-vs-v3.3.txt

This runs the decision stage's own calls (``figures.study_figures`` and ``decision.decide``,
config/config.yaml's settings, without the detectable-effect simulation) on each reference's recorded
artifacts twice, with the earlier rule's body patched in and with today's, and says whether the two
decision tables are exactly equal (their ``rule_version`` column aside); where they are not, it lists
the rows that moved.

* ``v3.1.1`` changed one thing in the bootstrap-t's pivots (``intervals.pivots`` since the sixth
  session): a resample whose figure equals the sample's gets pivot 0 where v3.1 (commit 19e329e) gave
  it NaN when its linearized SE was a tie's zero.
* ``v3.2`` gives the gap and its bound the unbiased run part from four runs on (``engine.RULE_INTERVAL``
  maps them to '_u'); v3.1.1 is that mapping empty.
* ``v3.3`` gives them the run part from its two variance components instead ('_c').
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

from headroom.analysis import decision, engine, figures, intervals  # noqa: E402
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


TODAY_INTERVAL = engine.RULE_INTERVAL
GAP_AND_BOUND = ("gap_to_oracle", *engine.HOLD_BY.values())
BODIES = {  # each rule's body, as what it sets in the engine's modules
    "v3.1": {"pivots": v31, "interval": {}},
    "v3.1.1": {"pivots": TODAY, "interval": {}},
    "v3.2": {"pivots": TODAY, "interval": dict.fromkeys(GAP_AND_BOUND, "_u")},
    "v3.3": {"pivots": TODAY, "interval": dict.fromkeys(GAP_AND_BOUND, "_c")},
}
assert BODIES["v3.3"]["interval"] == TODAY_INTERVAL, "today's rule is the newest body"
CHANGES = {"v3.1.1": "v3.1", "v3.2": "v3.1.1", "v3.3": "v3.2"}  # a change -> the rule it changed


def _decide_under(rule: str, folder: Path, cfg: dict) -> pd.DataFrame:
    body = BODIES[rule]
    intervals.pivots, engine.RULE_INTERVAL = body["pivots"], body["interval"]
    try:
        return decide(folder, cfg).drop(columns="rule_version")
    finally:
        intervals.pivots, engine.RULE_INTERVAL = TODAY, TODAY_INTERVAL


SHOWN = ["mode", "figure", "estimate", "ci_low", "ci_high", "state", "hold_high", "mode_verdict"]


def _moved(old: pd.DataFrame, new: pd.DataFrame) -> list[str]:
    """The rows whose shown cells differ, as 'mode figure: old -> new' lines, then the names of the
    other columns that differ anywhere (the reasons quote the CIs)."""
    lines = []
    for (_, o), (_, n) in zip(old.iterrows(), new.iterrows(), strict=True):
        cells = [c for c in SHOWN[2:] if not (o[c] == n[c] or (pd.isna(o[c]) and pd.isna(n[c])))]
        if cells:
            lines.append(
                f"  {n['mode']} {n['figure']}: "
                + "; ".join(
                    f"{c} {o[c]:.4g} -> {n[c]:.4g}" if isinstance(n[c], float) else f"{c} {o[c]} -> {n[c]}"
                    for c in cells
                )
            )
    other = [c for c in new.columns if c not in SHOWN and not old[c].equals(new[c])]
    return lines + ([f"  other columns that differ: {', '.join(other)}"] if other else [])


def main(change: str) -> int:
    earlier = CHANGES[change]
    cfg = yaml.safe_load((REPO / "config/config.yaml").read_text())
    differ = 0
    for folder in sorted((REPO / "data/reference/h200").iterdir()):
        if not (folder / "trace.parquet").exists():
            continue
        new, old = _decide_under(change, folder, cfg), _decide_under(earlier, folder, cfg)
        try:
            pd.testing.assert_frame_equal(old, new, check_exact=True)
            same, moved = "exactly equal", []
        except AssertionError:
            same, moved, differ = "DIFFERENT", _moved(old, new), differ + 1
        print(
            f"{folder.name} ({int(new['runs'].max())} runs): {len(new)} rows, verdict {old['verdict'].iloc[0]} -> "
            f"{new['verdict'].iloc[0]}; {earlier} and {change} {same}",
            flush=True,
        )
        if moved:
            print("\n".join(moved), flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in CHANGES:
        sys.exit(f"usage: rule_patch_check.py {{{','.join(CHANGES)}}}")
    sys.exit(main(sys.argv[1]))
