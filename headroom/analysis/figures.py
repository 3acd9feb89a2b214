"""The decision's figures per mode, cross-run (see ``crossrun``), each an ``Estimate`` with its CI.

Decided (the rule in ``headroom.analysis.decision``):

* ``gap_to_oracle``: the global kernel's gap to the per-invocation oracle, fusion arm ``free`` (%).
* ``policy_gain``: the net gain (after lifecycle costs) of the best deployable policy x arm, selected
  on run a's validation slice, over ``phase-keyed`` in the free arm (%): does shape adaptivity beyond
  the obvious phase split pay?
* ``fusion_speedup`` (graph mode only): trace-weighted test latency of the best unfused global kernel
  over the best fused one, on the study's own trace (x).

Reported beside them (not decided on): ``phase_split_gain`` (phase-keyed over global), the per-phase
fusion speedups (deciding on them would count the phase split twice), ``policy_gain_vs_global``, the
same-run gap (v1) and the decomposition of the gap into what the headroom is made of, each as % of
the oracle's latency so that they add up to the cross-run gap: ``made_of_phase_split``,
``made_of_fusion_within_phase`` (per invocation, fused or not at the phase's tile),
``made_of_tile_within_phase`` (the rest of the oracle), and ``made_of_noise`` (same-run minus cross-run
gap: the winner's curse).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pandas as pd

from headroom.analysis import crossrun
from headroom.analysis.crossrun import Fit, ModeData, Options, RunFits

DECIDED = ("gap_to_oracle", "policy_gain", "fusion_speedup")
UNITS = {"fusion_speedup": "x", "fusion_speedup_prefill": "x", "fusion_speedup_decode": "x"}


def study_figures(trace, timings, lifecycle=None, *, train_fraction=0.5, seed=0, **options) -> pd.DataFrame:
    """One row per (mode, figure): estimate, ci_low, ci_high, se, df, runs, pairs, decided, detail."""
    from headroom.analysis.policies import fitted_modes

    rows = []
    for opts, md, n_train, fits in fitted_modes(trace, timings, lifecycle, train_fraction, seed, options):
        rows += mode_figures(md, fits, n_train, opts, seed)
    return pd.DataFrame(rows)


def _fusion_within_phase(md: ModeData, rf: RunFits, run: int, n_train: int) -> Fit:
    """Per test invocation, fused or unfused (chosen on run ``run``) at the phase-keyed tile."""
    phase = rf.test["free"]["phase-keyed"]
    us = md.us[run][n_train:]
    choice = phase.choice.copy()
    ours = ~md.native
    for i, c in enumerate(phase.choice):
        pair = np.flatnonzero(ours & (md.tile == md.tile[c]))
        choice[i] = pair[np.argmin(us[i, pair])]
    return Fit("fusion-within-phase", "free", choice, 0.0, 0.0, 0.0, [], "", 0.0, 0.0)


def _picks(md: ModeData, fits: list[RunFits], n_train: int) -> dict:
    """name -> function of a RunFits giving (Fit, row mask or None) for ``crossrun.pair_vectors``."""
    phases = md.features["phase"].astype(str).to_numpy()[n_train:]
    fwp = {id(rf): _fusion_within_phase(md, rf, r, n_train) for r, rf in enumerate(fits)}
    picks = {
        "global": lambda rf: (rf.test["free"]["global"], None),
        "oracle": lambda rf: (rf.test["free"]["oracle"], None),
        "phase": lambda rf: (rf.test["free"]["phase-keyed"], None),
        "fwp": lambda rf: (fwp[id(rf)], None),
        "selected": lambda rf: (rf.test[rf.selected[1]][rf.selected[0]], None),
    }
    if {"off", "on"} <= set(md.arms()):
        picks["global_off"] = lambda rf: (rf.test["off"]["global"], None)
        picks["global_on"] = lambda rf: (rf.test["on"]["global"], None)
        for ph in ("prefill", "decode"):
            mask = phases == ph
            if mask.any():
                picks[f"off_{ph}"] = lambda rf, m=mask: (rf.test["off"]["phase-keyed"], m)
                picks[f"on_{ph}"] = lambda rf, m=mask: (rf.test["on"]["phase-keyed"], m)
    return picks


def _share(a: str, b: str):
    return lambda S, C, n: 100.0 * (S[a] - S[b]) / S["oracle"]


def mode_figures(md: ModeData, fits: list[RunFits], n_train: int, opts: Options, seed: int) -> list[dict]:
    picks = _picks(md, fits, n_train)
    n_test = md.us.shape[1] - n_train
    boot = crossrun.boot_indices(n_test, opts.bootstrap_resamples, crossrun.group_seed(seed, md.mode, "fig"))
    pairs = crossrun.pair_vectors(md, fits, picks, n_train)
    specs = {
        "gap_to_oracle": crossrun.gap_pct("global"),
        "policy_gain": crossrun.gain_pct("selected", "phase", net=True),
        "phase_split_gain": crossrun.gain_pct("phase", "global", net=True),
        "policy_gain_vs_global": crossrun.gain_pct("selected", "global", net=True),
        "made_of_phase_split": _share("global", "phase"),
        "made_of_fusion_within_phase": _share("phase", "fwp"),
        "made_of_tile_within_phase": _share("fwp", "oracle"),
    }
    if "global_on" in picks:
        specs["fusion_speedup"] = crossrun.ratio("global_off", "global_on")
        specs.update(
            {
                f"fusion_speedup_{ph}": crossrun.ratio(f"off_{ph}", f"on_{ph}")
                for ph in ("prefill", "decode")
                if f"on_{ph}" in picks
            }
        )
    selected = Counter(f"{p} ({a})" for p, a in (rf.selected for rf in fits))
    rows = []
    for name, fn in specs.items():
        e = crossrun.pooled(pairs, fn, boot, opts.confidence) if pairs else None
        decided = name in DECIDED and (name != "fusion_speedup" or md.mode == "graph")
        detail = (
            ", ".join(f"{k} x{v}" for k, v in sorted(selected.items()))
            if name.startswith("policy_gain")
            else ""
        )
        rows.append(_row(md, name, e, decided, detail))
    same = [_same_run_gap(md, rf, r, n_train) for r, rf in enumerate(fits)]
    rows.append(
        _row(
            md,
            "gap_to_oracle_same_run",
            None,
            False,
            "mean of the runs' same-run gaps (v1)",
            float(np.mean(same)),
        )
    )
    cross = rows[0]["estimate"]
    rows.append(
        _row(md, "made_of_noise", None, False, "same-run minus cross-run gap", float(np.mean(same)) - cross)
    )
    return rows


def _same_run_gap(md: ModeData, rf: RunFits, r: int, n_train: int) -> float:
    us = md.us[r][n_train:]
    g, o = (crossrun.latency(us, rf.test["free"][p]).sum() for p in ("global", "oracle"))
    return float(100.0 * (g - o) / o)


def _row(md, name, e, decided, detail, value=np.nan) -> dict:
    return {
        "mode": md.mode,
        "figure": name,
        "unit": UNITS.get(name, "%"),
        "estimate": e.estimate if e else value,
        "ci_low": e.ci_low if e else np.nan,
        "ci_high": e.ci_high if e else np.nan,
        "se": e.se if e else np.nan,
        "df": e.df if e else np.nan,
        "runs": len(md.runs),
        "pairs": e.pairs if e else 0,
        "decided": decided,
        "detail": detail,
    }
