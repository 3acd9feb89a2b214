"""The words of the decision: one label per figure, one sentence per reason code, and how a figure is
written with its interval (``headroom.core.format.estimate_ci``, the one number formatter). The
decision, the recommendation and the report all read them from here.

What depends on the study's family is a ``Words``: the labels of the figures that name its category
or its features, the sentence of the category split, and what a policy needs under CUDA Graphs.
``of(keying)`` gives a study's: the built-in family's own words (headroom.families.attention.words)
for its keys, else the family's category and features named from its keying (``of_family``). The
module's ``label``, ``describe`` and ``reason`` are the built-in family's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from headroom.core.format import estimate_ci
from headroom.core.names import CATEGORY_SPLIT, CATEGORY_SPLIT_GAIN, GAIN_VS_CATEGORY
from headroom.policies.shapes import Keying, builtin

# What each figure is, in a sentence's words (the report's tables and the reasons use these); the
# figures that name a family's category or features are labelled by its ``Words``.
LABELS = {
    "gap_to_oracle": "the global kernel's gap to the per-invocation best kernel",
    "gap_to_oracle_bound": "the gap's upper bound (best kernel chosen on the mean of all runs)",
    "policy_gain_vs_global": "the selected policy's net gain over one global kernel",
    "richer_gain_bucketed": "a table per power-of-two shape bucket: its net gain",
    "gap_carried_by": "the share of the gap its largest shape carries",
    "fusion_speedup": "the trace-weighted fusion speedup (global unfused / global fused)",
    "kernel_vs_best_unfused": "our best kernel against our best unfused kernel",
    "policy_gain_switch_0x": "the policy figure with no switch penalty",
    "policy_gain_switch_2x": "the policy figure at twice the measured switch penalty",
    "fusion_speedup_sweep": "the fusion speedup of the graph sweep (two fixed shapes)",
    "gap_to_oracle_same_run": "the same-run gap (best kernel chosen on the data it is scored on)",
    "made_of_noise": "same-run minus cross-run gap (the winner's curse)",
    "policy_gain_mde": "the smallest net gain this design detects (80% power, simulated on its own "
    "trace, noise and costs)",
    "policy_gain_no_mde": "no planted net gain up to this reached 80% power on this design",
}

# Why a family (a mode or a profile part) got its verdict: one sentence per reason code (the category
# split's is the study's family's: ``Words.split``).
REASONS = {
    "exceeds": "a deployable policy's net gain is above its threshold: build it",
    "holds": "no deployable policy gains more than its threshold, and neither does the per-invocation "
    "best kernel over the global one",
    "uncapturable": "there is headroom over the global kernel, but no deployable policy captures it: "
    "ship the global kernel",
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
#: A headline none of whose parts could be decided (each part says why, with its own counts)
NO_PART_DECIDED = "no part of it could be decided"


@dataclass(frozen=True)
class Words:
    """What a study's figures and reasons say where they depend on its family."""

    #: figure -> label, for the figures that name the family's category or features (over LABELS)
    labels: Mapping[str, str]
    #: the sentence of reason CATEGORY_SPLIT: one candidate per category captures the headroom
    split: str
    #: what a policy keyed beyond the capture-fixed features needs under CUDA Graphs
    runtime_dispatch: str
    #: what the policy keyed on the capture-fixed features needs under CUDA Graphs
    captured: str

    def label(self, figure: str) -> str:
        if figure.startswith("kernel_vs_"):
            return f"our best kernel against {figure[len('kernel_vs_') :]}"
        return self.labels.get(figure, LABELS.get(figure, figure))

    def describe(self, r, where: bool = False) -> str:
        """'<label> (<mode>) +1.23% [+0.40, +2.10], threshold 1%' of a decision row (a mapping)."""
        mode = f" ({r['mode']})" if where else ""
        thr = r.get("threshold", math.nan)
        said = f", threshold {thr:g}{r['unit']}" if thr is not None and math.isfinite(thr) else ""
        figure = estimate_ci(r["estimate"], r["ci_low"], r["ci_high"], r["unit"])
        return f"{self.label(r['figure'])}{mode} {figure}{said}"

    def reason(self, code: str, figure: str = "", n: int = 0, minimum: int = 0) -> str:
        if code == CATEGORY_SPLIT:
            return self.split
        return REASONS[code].format(figure=self.label(figure), n=n, min=minimum)


def _names(names: Iterable[str]) -> str:
    names = list(names)
    return ", ".join(names) if names else "none"


def category_phrase(keying: Keying) -> str | None:
    """A family's category in words: 'dtype value' (one category feature), 'combination of a, b',
    or None (it declares none)."""
    cats = keying.categories
    if not cats:
        return None
    return f"{cats[0]} value" if len(cats) == 1 else f"combination of {', '.join(cats)}"


def of_family(keying: Keying, order: Sequence[str] | None = None) -> Words:
    """A family's words, its category and features named from its keys (``keying``); ``order``: its
    declared features in order (the exact shape's; default its category, then numeric features)."""
    cats = category_phrase(keying)
    per = f"one candidate per {cats}" if cats else "one candidate per category (none declared)"
    numeric = [f for f, _ in keying.numeric]
    exact = _names(order if order is not None else (*keying.categories, *numeric))
    fixed = {f for f, _, _ in keying.capture}
    runtime = [f for f in numeric if f not in fixed]  # what the capture-keyed policy does not key on
    bucket = f"bucket of {_names(numeric)}" if numeric else "bucket (no numeric feature declared)"
    not_fixed = f" ({', '.join(runtime)} {'is' if len(runtime) == 1 else 'are'} not fixed at capture)"
    return Words(
        labels={
            "policy_gain": f"the best deployable policy's net gain over the better of one global candidate "
            f"and {per}",
            CATEGORY_SPLIT_GAIN: f"{per}: its net gain over one global candidate",
            GAIN_VS_CATEGORY: f"the selected policy's net gain over {per}",
            "policy_gain_runtime_dispatch": f"policies keyed on features a CUDA graph does not fix at "
            f"capture ({_names(runtime)}; they need a runtime dispatch inside the graph): their net gain",
            "richer_gain_exact-key": f"a table per exact shape ({exact}): its net gain",
            "richer_gain_bucketed": f"a table per power-of-two {bucket}: its net gain",
        },
        split=f"the headroom over one global candidate is a category split: {per} captures it (ship "
        "them), and no policy beyond it gains more than its threshold",
        runtime_dispatch="a runtime dispatch inside the captured graph" + (not_fixed if runtime else ""),
        captured="one graph per key of its capture-fixed features, captured with its candidate",
    )


def of(keying: Keying | None = None) -> Words:
    """The words of a study keyed by ``keying``: the built-in family's own for its keys (and for
    None), else the family's (``of_family``)."""
    if keying is None or keying == builtin():
        from headroom.families.attention.words import WORDS

        return WORDS
    return of_family(keying)


def label(figure: str) -> str:
    return of().label(figure)


def describe(r, where: bool = False) -> str:
    return of().describe(r, where)


def reason(code: str, figure: str = "", n: int = 0, minimum: int = 0) -> str:
    return of().reason(code, figure, n, minimum)
