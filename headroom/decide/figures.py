"""The decision's figures per mode and per deployment-profile part, as rows: the engine's one-seed
figures (``headroom.decide.engine``; cross-run: chosen on one run, scored on another), each with the
two-way bootstrap's percentile interval (``headroom.decide.interval``).

Decided (``headroom.decide.rule``): ``gap_to_oracle`` (it holds on ``gap_to_oracle_bound``: the row's
``hold_high``) and ``policy_gain``. Reported beside them, never decided: the category split, the policy
figure against each baseline, the richer policy families (``richer_gain_<policy>``, each with what
deploying it needs), which shapes carry the gap (``gap_carried_by``), the fusion speedups, the same-run
gap, the decomposition of the gap (``made_of_*``, % of the oracle's latency, adding up to the cross-run
gap), the switch-penalty sensitivity and the **kernel recommendation** rows (``kernel_vs_*``: our
best kernel, the global one among our candidates alone, against the best unfused kernel of ours and
each native: the alternative's summed latency over its own, cross-run).

The global kernel, the oracle and every policy choose among the `free` arm's candidates: every one
that passed correctness, natives included where they compete (``ModeData.natives_compete``). The
``gap_to_oracle`` row names that global kernel (``kernel``: the kernel to ship, refit on every run's
whole trace; ``runs_agree`` how many runs pick it alone); a ``kernel_vs_*`` row names our best kernel.

Deployment profile (config ``decision.deployment``: step kind -> mode): each step kind is a part,
``<mode>@<step kind>``, fitted and scored on its own invocations with its own chronological split
(``measured.part``; step kinds: ``measured.step_of``). A family captured by a feature F (its keying's
``captured_by``) has a fixed profile instead (``measured.CAPTURE_PROFILE``): ``graph@captured`` (its
calls with F up to the capture limit) and ``eager@uncaptured`` (the larger ones).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pandas as pd

from headroom.core import defaults
from headroom.decide import engine, interval, measured, registry, rule, words
from headroom.decide.measured import ModeData, Options
from headroom.policies.shapes import Keying

UNITS = {"fusion_speedup": "x", "fusion_speedup_prefill": "x", "fusion_speedup_decode": "x"}
KERNEL_ROWS = "kernel_vs_"
PROFILE = "profile"  # the family of the deployment profile's parts
SWITCH_SCALES = (0.0, 2.0)  # the switch penalty's sensitivity: 0 and twice the measured one
TOP_SHAPES = 5  # shapes named as carrying the gap


def deployment_profile(deployment=None, keying: Keying | None = None) -> dict:
    """The deployment profile (part -> mode): ``deployment``, else config ``decision.deployment``
    (step kind -> mode); for a family captured by a feature (``keying.captured_by``) the capture
    profile (``measured.CAPTURE_PROFILE``), which no config changes: a ``deployment`` other than the
    default study's is refused with one line naming the key."""
    default = defaults.value("decision", "deployment")
    if keying is None or keying.captured_by is None:
        return dict(default if deployment is None else deployment)
    if deployment is not None and dict(deployment) != dict(default):
        raise ValueError(
            f"decision.deployment {dict(deployment)}: this family is captured by {keying.captured_by}, so "
            f"its profile is fixed ({profile_words(keying)}); remove decision.deployment from the study"
        )
    return dict(measured.CAPTURE_PROFILE)


def profile_words(keying: Keying | None, deployment=None) -> str:
    """The deployment profile in words: 'decode-only steps in graph mode, mixed steps in eager mode',
    or for a family captured by a feature 'calls with tokens <= 512 in graph mode, larger ones in eager
    mode'."""
    if keying is not None and keying.captured_by is not None:
        return f"calls with {keying.captured_by} <= {keying.capture_limit} in graph mode, larger ones in eager mode"
    profile = deployment_profile(deployment)
    return ", ".join(f"{step} steps in {mode} mode" for step, mode in profile.items())


def unit_of(figure: str) -> str:
    return "x" if figure in UNITS or figure.startswith(KERNEL_ROWS) else "%"


def study_figures(
    trace,
    timings,
    lifecycle=None,
    *,
    train_fraction=None,
    seed=None,
    deployment=None,
    thresholds=None,
    switch_sensitivity=True,
    calibration=None,
    intermediate_ratio=None,
    keying: Keying | None = None,
    **options,
) -> pd.DataFrame:
    """One row per (mode, figure): estimate, ci_low, ci_high, se, p_value (the bootstrap's one-sided
    p-value of "at or below its threshold", for figures with one), runs, invocations, test_invocations,
    pairs, decided, detail, family (the mode's own, or ``profile`` for the deployment profile's parts
    ``<mode>@<part>``: a step kind, or ``captured``/``uncaptured`` for a family captured by a feature,
    ``deployment_profile``). train_fraction, seed and thresholds (config ``decision:``) left out are the
    default study's; with the calibration and ``intermediate_ratio``, eager timings carry the host
    time the GPU does not hide (``measured.checked_modes``); keying: the family's keys (None: the
    built-in family's)."""
    if train_fraction is None:
        train_fraction = defaults.value("policies", "train_fraction")
    seed = defaults.value("policies", "seed") if seed is None else seed
    thresholds = {**defaults.section("decision"), **(thresholds or {})}
    deployment = deployment_profile(deployment, keying)
    opts, costs, modes = measured.checked_modes(
        trace, timings, lifecycle, train_fraction, options, calibration, intermediate_ratio, keying
    )
    rows = []
    for md in modes:
        rows += mode_figures(md, costs, opts, train_fraction, seed, thresholds)
        if switch_sensitivity:
            rows += switch_rows(md, costs, opts, train_fraction, seed)
    timed = {m.mode: m for m in modes}
    if set(deployment.values()) <= set(timed):  # else decide says which mode the profile misses
        for name, mode in deployment.items():
            sub = measured.part(timed[mode], name)
            if sub is None:
                continue
            for r in mode_figures(sub, costs, opts, train_fraction, seed, thresholds):
                rows.append({**r, "mode": f"{mode}@{name}", "family": PROFILE})
    return pd.DataFrame(rows)


def kernel(md: ModeData, L: engine.Layout, among: str = "free") -> tuple[str, int]:
    """(the global kernel refit on every run's whole trace, how many runs pick it on their own),
    among the candidates of ``among``: the `free` arm (every competing candidate, natives included:
    the kernel to ship) or ``engine.OURS`` (our best kernel)."""
    cols = L.arm_cols[among]
    cost = (md.us[..., cols] + L.plan[None][..., cols]) * L.weight[None, :, None]
    pooled = cols[int(np.argmin(cost.sum(axis=(0, 1))))]
    per_run = cols[np.argmin(cost.sum(axis=1), axis=-1)]
    return md.names[pooled], int((per_run == pooled).sum())


def mode_figures(
    md: ModeData, costs, opts: Options, train_fraction: float, seed: int, thresholds: dict
) -> list[dict]:
    """The rows of one mode (or profile part): the engine's one-seed figures; their details in the
    words of its family (``headroom.decide.words.of``)."""
    said = words.of(md.keying)
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
    ours = kernel(md, L, engine.OURS) if engine.OURS in L.arm_cols else (None, 0)
    rows = []
    for fig in engine.specs(L, _probe(L)):
        decided = fig in rule.DECIDED
        detail = _detail(fig, md.mode, selected, baseline, ours, len(md.runs), said)
        rows.append(_row(md, n - n_train, fig, f, decided, detail))
        threshold = thresholds.get(rule.THRESHOLD_OF.get(fig, ""), np.nan)
        rows[-1]["p_value"] = float(interval.p_above(f[fig + "_boot"], threshold)[0]) if decided else np.nan
        rows[-1]["hold_high"] = float(f[rule.HOLD_BY.get(fig, fig) + "_hi"][0]) if decided else np.nan
        if fig == "gap_to_oracle":  # the global kernel the gap is measured from: the kernel to ship
            rows[-1].update(kernel=name, runs_agree=agree)
        if fig.startswith(KERNEL_ROWS):  # our best kernel, against each alternative
            rows[-1].update(kernel=ours[0], runs_agree=ours[1])
        if fig == "policy_gain" and order:  # what the runs selected most (ties: the first in order)
            top = max(range(len(order)), key=lambda i: ((f["selected"][0] == i).sum(), -i))
            rows[-1].update(selected_policy=order[top][0], selected_fusion=order[top][1])
    same = float(f["gap_to_oracle_same_run"][0])
    rows.append(_row(md, n - n_train, "gap_to_oracle_same_run", None, False, "each run's own oracle", same))
    cross = float(f["gap_to_oracle"][0])
    rows.append(
        _row(md, n - n_train, "made_of_noise", None, False, "same-run minus cross-run gap", same - cross)
    )
    share, said = carried_by(md, L)
    rows.append(_row(md, n - n_train, "gap_carried_by", None, False, said, share))
    return rows


def carried_by(md: ModeData, L: engine.Layout) -> tuple[float, str]:
    """(the share of the gap its largest shape carries (%), the shapes carrying the most of it with
    their shares): the per-invocation headroom of the global kernel over the oracle on the mean of
    every run's test invocations, weighted, summed per shape. Descriptive: it names where the
    headroom lives, it decides nothing."""
    free, nt = L.cols["free"], L.n_train
    mean = md.us[:, nt:].mean(axis=0)
    name, _ = kernel(md, L)
    g = md.names.index(name)
    per = (mean[:, g] - mean[:, free].min(axis=1)) * L.weight[nt:]
    shapes = md.features["shape_key"].astype(str).to_numpy()[nt:]
    by = pd.Series(per).groupby(shapes).sum().sort_values(ascending=False)
    total = by.sum()
    if not total > 0:
        return np.nan, "no shape carries a gap on the mean of the runs"
    top = by.iloc[:TOP_SHAPES]
    said = ", ".join(f"{k} {100.0 * v / total:.0f}%" for k, v in top.items())
    return float(100.0 * top.iloc[0] / total), f"{len(by)} shapes; the most: {said}"


def switch_rows(md: ModeData, costs, opts: Options, train_fraction: float, seed: int) -> list[dict]:
    """Reported rows ``policy_gain_switch_<k>x``: the policy figure with the switch penalty scaled by
    k (0 and 2x the measured); ``decision`` adds the mode's verdict at that penalty (the gap does not
    depend on it): how much the verdict leans on the switch measurement."""
    rows = []
    n = md.us.shape[1]
    n_test = n - measured.split(n, train_fraction, opts.validation_fraction)[0]
    for k in SWITCH_SCALES:
        by_mode = {m: v * k for m, v in costs.switch_us_by_mode.items()}
        scaled = replace(costs, switch_us=costs.switch_us * k, switch_us_by_mode=by_mode)
        f = engine.figures(
            engine.layout(md, opts, scaled, train_fraction, seed), engine.Batch(md.us[None], md.sem2[None])
        )
        name = f"policy_gain_switch_{k:g}x"
        scaled_f = {name + x: f["policy_gain" + x] for x in ("", "_lo", "_hi", "_se")}
        rows.append(_row(md, n_test, name, scaled_f, False, f"switch penalty x{k:g} of the measured"))
    return rows


def _probe(L: engine.Layout) -> dict:
    """The pick names ``engine.specs`` reads to know which figures a layout has."""
    names = {"runtime": None} if L.runtime else {}
    names.update({f"{p}@free": None for p in registry.RICHER})
    names.update({f"native:{L.names[c]}": None for c in np.flatnonzero(L.native)})
    return names


def _detail(fig, mode, selected, baseline, ours, runs, said: words.Words) -> str:
    if fig.startswith("richer_gain_"):
        policy = fig[len("richer_gain_") :]
        return f"{policy} over the baseline; deploying it needs {registry.needs(policy, mode, said)}"
    if fig.startswith("policy_gain"):
        chosen = ", ".join(f"{k} x{v}" for k, v in sorted(selected.items()))
        base = ", ".join(f"{k} x{v}" for k, v in sorted(baseline.items()))
        extra = f"; {engine.RUNTIME_DISPATCH}" if fig == "policy_gain_runtime_dispatch" else ""
        return f"selected: {chosen}; baseline: {base}{extra}"
    if fig.startswith(KERNEL_ROWS):
        return f"our best kernel {ours[0]} (refit on all runs; {ours[1]} of {runs} runs agree)"
    return ""


def _row(md, n_test, name, f, decided, detail, value=np.nan) -> dict:
    get = (lambda k: float(f[name + k][0])) if f is not None else (lambda k: np.nan)
    return {
        "mode": md.mode,
        "figure": name,
        "unit": unit_of(name),
        "estimate": get("") if f is not None else value,
        "ci_low": get("_lo"),
        "ci_high": get("_hi"),
        "se": get("_se"),
        "df": np.nan,
        "runs": len(md.runs),
        "invocations": int(md.us.shape[1]),
        "test_invocations": int(n_test),
        "pairs": len(md.runs) * (len(md.runs) - 1) if f is not None else 0,
        "decided": decided,
        "host_included": md.host_included,
        "detail": detail,
        "family": md.mode,
    }
