"""The words of the decision: one label per figure, one sentence per reason code, and how a figure is
written with its interval (``headroom.core.format.estimate_ci``, the one number formatter). The
decision, the recommendation and the report all read them from here."""

from __future__ import annotations

import math

from headroom.core.format import estimate_ci

# What each figure is, in a sentence's words (the report's tables and the reasons use these).
LABELS = {
    "gap_to_oracle": "the global kernel's gap to the per-invocation best kernel",
    "gap_to_oracle_bound": "the gap's upper bound (best kernel chosen on the mean of all runs)",
    "policy_gain": "the best deployable policy's net gain over the better of one kernel and one kernel "
    "per phase",
    "phase_split_gain": "one kernel per phase: its net gain over one global kernel",
    "policy_gain_vs_global": "the selected policy's net gain over one global kernel",
    "policy_gain_vs_phase": "the selected policy's net gain over one kernel per phase",
    "policy_gain_runtime_dispatch": "policies keyed on kv_len (under CUDA Graphs they need a runtime "
    "dispatch inside the graph): their net gain",
    "richer_gain_exact-key": "a table per exact shape (batch, q_len, kv_len): its net gain",
    "richer_gain_bucketed": "a table per power-of-two shape bucket: its net gain",
    "gap_carried_by": "the share of the gap its largest shape carries",
    "fusion_speedup": "the trace-weighted fusion speedup (global unfused / global fused)",
    "kernel_vs_best_unfused": "the kernel to ship against the best unfused kernel",
    "policy_gain_switch_0x": "the policy figure with no switch penalty",
    "policy_gain_switch_2x": "the policy figure at twice the measured switch penalty",
    "fusion_speedup_sweep": "the fusion speedup of the graph sweep (two fixed shapes)",
    "gap_to_oracle_same_run": "the same-run gap (best kernel chosen on the data it is scored on)",
    "made_of_noise": "same-run minus cross-run gap (the winner's curse)",
    "policy_gain_mde": "the smallest net gain this design detects (80% power, simulated on its own "
    "trace, noise and costs)",
    "policy_gain_no_mde": "no planted net gain up to this reached 80% power on this design",
}

# Why a family (a mode or a profile part) got its verdict: one sentence per reason code.
REASONS = {
    "exceeds": "a deployable policy's net gain is above its threshold: build it",
    "holds": "no deployable policy gains more than its threshold, and neither does the per-invocation "
    "best kernel over the global one",
    "uncapturable": "there is headroom over the global kernel, but no deployable policy captures it: "
    "ship the global kernel",
    "phase-split": "the headroom over one global kernel is a phase split: one kernel per phase captures it "
    "(ship the pair), and no policy beyond it gains more than its threshold",
    "straddles": "the interval of {figure} contains its threshold: more runs or invocations would decide",
    "noise-floor": "the interval of {figure} is wider than its threshold: this design cannot reach `stop` "
    "(more runs or invocations, or less noise)",
    "no-interval": "{figure} has no interval",
    "not-gpu": "the timings are not GPU measurements",
    "few-runs": "fewer than 3 runs: nothing scores the choices independently with a run-to-run spread",
    "too-few-invocations": "fewer test invocations than the decision needs ({n} < {min}): reported, not "
    "decided",
    "host-included": "its eager timings include the host's launch path (recorded before eager calls "
    "were timed on a busy GPU): reported, not decided",
}
VERDICT_WORD = {"stop": "Stop", "continue": "Continue", "no-decision": "No decision"}


def label(figure: str) -> str:
    if figure.startswith("kernel_vs_"):
        return f"the kernel to ship against {figure[len('kernel_vs_') :]}"
    return LABELS.get(figure, figure)


def describe(r, where: bool = False) -> str:
    """'<label> (<mode>) +1.23% [+0.40, +2.10], threshold 1%' of a decision row (a mapping)."""
    mode = f" ({r['mode']})" if where else ""
    thr = r.get("threshold", math.nan)
    said = f", threshold {thr:g}{r['unit']}" if thr is not None and math.isfinite(thr) else ""
    return (
        f"{label(r['figure'])}{mode} {estimate_ci(r['estimate'], r['ci_low'], r['ci_high'], r['unit'])}{said}"
    )


def reason(code: str, figure: str = "", n: int = 0, minimum: int = 0) -> str:
    return REASONS[code].format(figure=label(figure), n=n, min=minimum)
