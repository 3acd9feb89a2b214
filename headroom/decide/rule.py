"""The decision rule (``RULE_VERSION``): each decided figure's state, and a family's verdict with its
reason code. One function assigns states (``family``), for the pipeline's decision.parquet and for
the validation simulator alike; the words a user reads are ``headroom.decide.words``'s.

Two figures are decided per family (a mode, or a part of the deployment profile):

* ``policy_gain``, the net gain of the deployable policy chosen on the validation slice over the
  better of global and category-keyed (costs charged where a server pays them): what a user would
  build and ship;
* ``gap_to_oracle``, the global kernel's gap to the per-invocation oracle: all the headroom there is.

A figure *exceeds* when its interval's lower end lies above its threshold and *holds* when the upper
end lies below it (``interval``: the two-way bootstrap's percentile interval, the one interval of every
figure). The gap exceeds on its cross-run figure, whose oracle is chosen on another run (biased
down), and holds on its bound, whose oracle is chosen on the mean of all runs, the scored run among
them (biased up, shrinking with runs: the one place a choice is scored on data it saw, on purpose):
conservative both ways, so the winner's curse alone never makes a flat surface look uncapturable.

Verdict (``VERDICT``): ``continue`` when the policy figure exceeds; ``stop`` when it holds and the gap
holds (reason ``holds``) or exceeds: ``CATEGORY_SPLIT`` when one candidate per category captures that
headroom (the policy figure's baseline: ship one per category), else ``uncapturable`` (headroom exists but no
deployable policy captures it; the report says which shapes carry it and what richer policies would
gain);
``no-decision`` otherwise, with the open figure's cause as the reason: ``straddles`` (its interval
contains the threshold), ``noise-floor`` (its interval is wider than the threshold's distance from no
effect, so `stop` is out of reach at this design), ``no-interval``. Before any figure:
``not-gpu`` (not GPU measurements), ``few-runs`` (fewer than 3 runs), ``too-few-invocations``
(fewer test invocations than ``decision.min_test_invocations``), ``host-included`` (eager timings that
include the host's launch path, recorded before the GPU-only eager method: reported, not decided).
"""

from __future__ import annotations

import numpy as np

from headroom.core.names import CATEGORY_SPLIT

RULE_VERSION = "decision-v4"
DECIDED = ("gap_to_oracle", "policy_gain")
# The figure whose interval's upper end a decided figure needs below its threshold to hold.
HOLD_BY = {"gap_to_oracle": "gap_to_oracle_bound"}
THRESHOLD_OF = {
    "gap_to_oracle": "max_gap_to_oracle_pct",
    "gap_to_oracle_same_run": "max_gap_to_oracle_pct",
    "policy_gain": "max_policy_gain_pct",
    "kernel_vs_best_unfused": "max_graph_fusion_speedup",
    "fusion_speedup": "max_graph_fusion_speedup",
    "fusion_speedup_sweep": "max_graph_fusion_speedup",
}
NULL_OF = {"fusion_speedup": 1.0}  # the figure's value with no effect (0 for the % figures)
VERDICTS = ("stop", "continue", "no-decision")
STATES = ("exceeds", "holds", "straddles", "noise-floor", "no-interval")
# Reason codes of a family's verdict, before any figure is looked at (``precondition``).
PRECONDITIONS = ("not-gpu", "few-runs", "too-few-invocations", "host-included")
MIN_RUNS = 3


def states(lo, hi, hold_hi, threshold: float, null: float = 0.0) -> np.ndarray:
    """Each seed's state of one decided figure from its interval (lo, hi) and the upper end its hold
    is judged on (``hold_hi``: the bound's for the gap, its own otherwise); arrays (S,)."""
    lo, hi, hold_hi = (np.asarray(x, float) for x in (lo, hi, hold_hi))
    wide = (hi - lo) / 2.0 > abs(threshold - null)
    out = np.where(wide, "noise-floor", "straddles").astype(object)
    out[~(np.isfinite(lo) & np.isfinite(hi) & np.isfinite(hold_hi))] = "no-interval"
    out[hold_hi < threshold] = "holds"
    out[lo > threshold] = "exceeds"
    return out.astype(str)


def verdict(gap: np.ndarray, policy: np.ndarray, category_split=False) -> tuple[np.ndarray, np.ndarray]:
    """(verdict, reason code) per seed from the two decided figures' states; ``category_split`` (per
    seed, or one bool): one candidate per category captures the gap."""
    gap, policy = np.asarray(gap, str), np.asarray(policy, str)
    v = np.full(gap.shape, "no-decision", dtype=object)
    why = np.where(policy == "holds", gap, policy).astype(object)
    v[policy == "exceeds"] = "continue"
    stop = (policy == "holds") & np.isin(gap, ("holds", "exceeds"))
    v[stop] = "stop"
    why[stop & (gap == "exceeds")] = "uncapturable"
    why[stop & (gap == "exceeds") & np.asarray(category_split, bool)] = CATEGORY_SPLIT
    return v.astype(str), why.astype(str)


def family(figs: dict, thresholds: dict, category_split=False) -> dict[str, np.ndarray]:
    """The rule on one family for S seeds: figs holds '<figure>_lo', '_hi' for the decided figures
    and their HOLD_BY figures; thresholds {figure: threshold}. Returns '<figure>_state' per decided
    figure, 'verdict' and 'reason_code' (S,)."""
    out = {}
    for f in DECIDED:
        hold = HOLD_BY.get(f, f)
        out[f"{f}_state"] = states(figs[f + "_lo"], figs[f + "_hi"], figs[hold + "_hi"], thresholds[f])
    out["verdict"], out["reason_code"] = verdict(
        out["gap_to_oracle_state"], out["policy_gain_state"], category_split
    )
    return out


def precondition(device: str, runs: int, test_invocations: int, min_test: int, host_included: bool) -> str:
    """The reason code that leaves a family undecided before any figure ('' when none does)."""
    if device != "cuda":
        return "not-gpu"
    if runs < MIN_RUNS:
        return "few-runs"
    if host_included:
        return "host-included"
    if test_invocations < min_test:
        return "too-few-invocations"
    return ""


def headline(parts: dict[str, tuple[str, str]]) -> tuple[str, str, list[str]]:
    """(verdict, reason code, the parts left out) of the deployment profile (or of the modes) from
    each part's (verdict, reason code). Parts left out by a precondition are named, not decided; with
    none decided, the headline is no-decision with the first left-out part's code. ``continue`` when a
    decided part continues; ``stop`` when every decided part stops (``uncapturable``, else
    ``CATEGORY_SPLIT``, if one is);
    otherwise no-decision with the first open part's code."""
    left_out = [p for p, (_, why) in parts.items() if why in PRECONDITIONS]
    decided = {p: vw for p, vw in parts.items() if p not in left_out}
    if not decided:
        return "no-decision", parts[left_out[0]][1] if left_out else "no-interval", left_out
    verdicts = [v for v, _ in decided.values()]
    if "continue" in verdicts:
        return "continue", "exceeds", left_out
    if all(v == "stop" for v in verdicts):
        codes = [w for _, w in decided.values()]
        code = next((c for c in ("uncapturable", CATEGORY_SPLIT) if c in codes), "holds")
        return "stop", code, left_out
    first = next(w for v, w in decided.values() if v == "no-decision")
    return "no-decision", first, left_out
