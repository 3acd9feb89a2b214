"""The decision's figures per mode and per deployment-profile part, as rows (the engine computes them:
``headroom.decide.engine``; cross-run: chosen on one run, scored on another), each with its CI
(bootstrap-t for the decided figures and the gap's bound, ``engine.CANDIDATES_FOR``: the rule's
interval since decision-v3.1; the Welch t interval for every other row).

Decided (the rule in ``headroom.decide.decision``):

* ``gap_to_oracle``: the global kernel's gap to the per-invocation oracle, fusion arm ``free`` (%);
  it holds only when ``gap_to_oracle_bound`` (run b's own oracle: biased up) has its CI below the
  threshold (``engine.HOLD_BY``; the row's ``hold_high``).
* ``policy_gain``: the net gain (after lifecycle costs) of the best deployable policy x arm over the
  better of ``global`` and ``phase-keyed`` (both chosen on run a's validation slice) (%): does shape
  adaptivity pay against a baseline that is not a strawman? In graph mode the deployable policies key
  on what is fixed at capture (``registry.GRAPH_DEPLOYABLE``).

Reported beside them (not decided on): ``phase_split_gain`` (phase-keyed over global),
``policy_gain_vs_global``, ``policy_gain_vs_phase``, in graph mode ``policy_gain_runtime_dispatch``
(the kv-keyed policies, which would need a runtime dispatch inside the graph), the fusion speedups, the
same-run gap (v1), the decomposition of the gap into what the headroom is made of (each as % of the
oracle's latency, so that they add up to the cross-run gap: ``made_of_phase_split``,
``made_of_fusion_within_phase``, ``made_of_tile_within_phase``, ``made_of_noise``: same-run minus
cross-run gap, the winner's curse) and the **kernel recommendation** rows (``KERNEL_ROWS``).

Kernel recommendation (per mode; never decided on): ``kernel`` is the one global kernel to ship,
refit on every run's whole trace (least summed latency plus plan charges); ``runs_agree`` how many of
the runs pick it on their own. ``kernel_vs_best_unfused`` and ``kernel_vs_<native candidate>`` are
trace-weighted speedups (alternative's summed latency over the global kernel's, cross-run: both chosen
on run a, scored on run b) with CIs.

Deployment profile (config ``decision.deployment``: step type -> mode): each step type is a part,
``<mode>@<step type>``, decided on its own invocations (fitted and scored on that subset, with its own
chronological split). A trace without a ``step`` column (the continuous-batching engine): a decode
invocation stands for a decode-only step and a prefill invocation for a step with a prefill (a mixed
step); a serving trace's ``step`` column (``STEP_TYPE``: decodes of a mixed step are mixed),
when present, is used instead.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pandas as pd

from headroom.core import defaults
from headroom.decide import engine, measured
from headroom.decide.measured import ModeData, Options

DECIDED = engine.DECIDED
UNITS = {"fusion_speedup": "x", "fusion_speedup_prefill": "x", "fusion_speedup_decode": "x"}
KERNEL_ROWS = "kernel_vs_"
PROFILE = "profile"  # the family of the deployment profile's parts
# A trace without step types: a decode invocation stands for a decode-only step, a prefill for a mixed one.
STEP_OF_PHASE = {"decode": "decode-only", "prefill": "mixed"}
# A serving trace's `step` column (headroom.trace.requests.STEPS) -> the profile's step type: only a
# step of decodes alone is decode-only; a step with a prefill (chunk) is mixed, its decodes included.
STEP_TYPE = {"decode": "decode-only", "prefill": "mixed", "mixed-prefill": "mixed", "mixed-decode": "mixed"}


def deployment_profile(deployment=None) -> dict:
    """The deployment profile (step type -> mode): ``deployment``, else config ``decision.deployment``."""
    return dict(defaults.value("decision", "deployment") if deployment is None else deployment)


def unit_of(figure: str) -> str:
    return "x" if figure in UNITS or figure.startswith(KERNEL_ROWS) else "%"


def step_of(features: pd.DataFrame) -> np.ndarray:
    """Each invocation's step type (decode-only or mixed): from the trace's ``step`` column where a
    serving trace records it (``STEP_TYPE``), else from its phase (``STEP_OF_PHASE``)."""
    phase = features["phase"].astype(str).map(STEP_OF_PHASE)
    if "step" not in features.columns:
        return phase.to_numpy().astype(str)
    recorded = features["step"]
    unknown = sorted(set(recorded.dropna().astype(str)) - set(STEP_TYPE))
    if unknown:
        raise ValueError(f"trace column step holds {unknown}: known step values are {sorted(STEP_TYPE)}")
    return recorded.map(STEP_TYPE, na_action="ignore").fillna(phase).to_numpy().astype(str)


def part(md: ModeData, step: str) -> ModeData | None:
    """The mode's invocations of one step type, in trace order (None when it has none)."""
    mask = step_of(md.features) == step
    if not mask.any():
        return None
    feats = md.features[mask].reset_index(drop=True)
    return replace(md, mode=md.mode, features=feats, us=md.us[:, mask], sem2=md.sem2[:, mask])


def study_figures(
    trace, timings, lifecycle=None, *, train_fraction=None, seed=None, deployment=None, **options
) -> pd.DataFrame:
    """One row per (mode, figure): estimate, ci_low, ci_high, se, df, runs, pairs, decided, detail,
    family (the mode's own, or ``profile`` for the deployment profile's parts ``<mode>@<step>``).
    train_fraction and seed left out are the default study's (config ``policies:``)."""
    from headroom.decide.policy_eval import checked_modes

    if train_fraction is None:
        train_fraction = defaults.value("policies", "train_fraction")
    seed = defaults.value("policies", "seed") if seed is None else seed

    deployment = deployment_profile(deployment)
    opts, costs, modes = checked_modes(trace, timings, lifecycle, train_fraction, options)
    rows = []
    for md in modes:
        rows += mode_figures(md, costs, opts, train_fraction, seed)
        rows += switch_sensitivity(md, costs, opts, train_fraction, seed)
    timed = {m.mode: m for m in modes}
    if not set(deployment.values()) <= set(timed):
        return pd.DataFrame(rows)  # the profile needs every mode it names; decide says which is missing
    for step, mode in deployment.items():
        sub = part(timed[mode], step)
        if sub is None:
            continue
        for r in mode_figures(sub, costs, opts, train_fraction, seed):
            rows.append({**r, "mode": f"{mode}@{step}", "family": PROFILE})
    return pd.DataFrame(rows)


def kernel(md: ModeData, L: engine.Layout) -> tuple[str, int]:
    """(the global kernel refit on every run's whole trace, how many runs pick it on their own)."""
    free = L.cols["free"]
    cost = md.us[..., free] + L.plan[None][..., free]
    pooled = free[int(np.argmin(cost.sum(axis=(0, 1))))]
    per_run = free[np.argmin(cost.sum(axis=1), axis=-1)]
    return md.names[pooled], int((per_run == pooled).sum())


def mode_figures(md: ModeData, costs, opts: Options, train_fraction: float, seed: int) -> list[dict]:
    """The rows of one mode (or profile part): the engine's one-seed figures."""
    n = md.us.shape[1]
    n_train, _ = measured.split(n, train_fraction, opts.validation_fraction)
    if n_train < 1 or n - n_train < 1:
        raise ValueError(
            f"timings (mode {md.mode}): {n} invocation(s) cannot be split with train_fraction={train_fraction}"
        )
    L = engine.layout(md, opts, costs, train_fraction, seed)
    f = engine.figures(L, engine.Batch(md.us[None], md.sem2[None]))
    order = f["order"]
    selected = Counter(f"{order[i][0]} ({order[i][1]})" for i in f["selected"][0]) if order else Counter()
    baseline = Counter(engine.BASELINES[i] for i in f["baseline"][0])
    name, agree = kernel(md, L)
    rows = []
    for fig in engine.specs(L, _probe(L)):
        decided = fig in DECIDED
        rows.append(_row(md, fig, f, decided, _detail(fig, selected, baseline, name, agree, len(md.runs))))
        rows[-1]["hold_high"] = float(f[engine.HOLD_BY.get(fig, fig) + "_hi"][0]) if decided else np.nan
        if fig.startswith(KERNEL_ROWS):
            rows[-1].update(kernel=name, runs_agree=agree)
        if fig == "policy_gain" and order:  # what the runs selected most (ties: the first in order)
            top = max(range(len(order)), key=lambda i: ((f["selected"][0] == i).sum(), -i))
            rows[-1].update(selected_policy=order[top][0], selected_fusion=order[top][1])
    same = float(f["gap_to_oracle_same_run"][0])
    rows.append(_row(md, "gap_to_oracle_same_run", None, False, "mean of the runs' same-run gaps (v1)", same))
    cross = float(f["gap_to_oracle"][0])
    rows.append(_row(md, "made_of_noise", None, False, "same-run minus cross-run gap", same - cross))
    return rows


SWITCH_SCALES = (0.0, 2.0)  # the switch penalty's sensitivity: 0 and twice the measured one


def switch_sensitivity(md: ModeData, costs, opts: Options, train_fraction: float, seed: int) -> list[dict]:
    """Reported rows ``policy_gain_switch_<k>x``: the policy figure with the switch penalty scaled by
    k (0 and 2x the measured); ``decision`` adds the mode's verdict at that penalty (the gap does not
    depend on it): how much the verdict leans on the switch measurement."""
    rows = []
    for k in SWITCH_SCALES:
        by_mode = {m: v * k for m, v in costs.switch_us_by_mode.items()}
        scaled = replace(costs, switch_us=costs.switch_us * k, switch_us_by_mode=by_mode)
        f = engine.figures(
            engine.layout(md, opts, scaled, train_fraction, seed), engine.Batch(md.us[None], md.sem2[None])
        )
        name = f"policy_gain_switch_{k:g}x"
        scaled_f = {name + x: f["policy_gain" + x] for x in ("", "_lo", "_hi", "_se", "_df")}
        rows.append(_row(md, name, scaled_f, False, f"switch penalty x{k:g} of the measured"))
    return rows


def _probe(L: engine.Layout) -> dict:
    """The pick names ``engine.specs`` reads to know which figures a layout has."""
    names = {"runtime": None} if L.runtime else {}
    names.update({f"native:{L.names[c]}": None for c in np.flatnonzero(L.native)})
    return names


def _detail(fig, selected, baseline, name, agree, runs) -> str:
    if fig.startswith("policy_gain"):
        chosen = ", ".join(f"{k} x{v}" for k, v in sorted(selected.items()))
        base = ", ".join(f"{k} x{v}" for k, v in sorted(baseline.items()))
        extra = f"; {engine.RUNTIME_DISPATCH}" if fig == "policy_gain_runtime_dispatch" else ""
        return f"selected: {chosen}; baseline: {base}{extra}"
    if fig.startswith(KERNEL_ROWS):
        return f"kernel {name} (refit on all runs; {agree} of {runs} runs agree)"
    return ""


def _row(md, name, f, decided, detail, value=np.nan) -> dict:
    get = (lambda k: float(f[name + k][0])) if f is not None else (lambda k: np.nan)
    return {
        "mode": md.mode,
        "figure": name,
        "unit": unit_of(name),
        "estimate": get("") if f is not None else value,
        "ci_low": get("_lo"),
        "ci_high": get("_hi"),
        "se": get("_se"),
        "df": get("_df"),
        "runs": len(md.runs),
        "invocations": int(md.us.shape[1]),
        "pairs": len(md.runs) * (len(md.runs) - 1) if f is not None else 0,
        "decided": decided,
        "detail": detail,
        "family": md.mode,
    }
