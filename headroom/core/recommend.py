"""`headroom recommend`: the recommendation artifact in three lines — verdict, what to ship, how sure.

Read from results/<study>/recommendation.parquet (headroom/analysis/recommendation.py writes it) and
the decision's reason; every number is written by headroom/core/format.py. Scopes shown: the
deployment profile's parts when the study has them, else each mode. The kernel shipped is the fastest
candidate, ours or a native; a native is said in words (``names.native_words``) with our best kernel's
speed against it, and every native's speedup is stated where ours is shipped (not on eager timings
that include the host's launch path: there natives are not compared).
"""

from __future__ import annotations

import pandas as pd

from headroom.core import format as hfmt
from headroom.core.names import CAPTURED, UNCAPTURED, native_words


def shown_scopes(table: pd.DataFrame) -> list[str]:
    """The profile's parts in table order, else the modes."""
    order = list(dict.fromkeys(table["scope"].astype(str)))
    parts = [s for s in order if "@" in s]
    return parts or order


def _label(scope: str) -> str:
    mode, _, part = scope.partition("@")
    if part in (CAPTURED, UNCAPTURED):  # a family captured by a feature: calls, not steps
        return f"{part} calls ({mode})"
    return f"{part} steps ({mode})" if part else f"{mode} mode"


def _ship(r) -> str:
    agree = f"{int(r['runs_agree'])}/{int(r['runs'])} runs agree{_routed(r)}"
    if r["ship"] == "policy":
        return f"the {r['policy']} dispatch policy (dispatch.json; global kernel {r['kernel']}, {agree})"
    if r["ship"] == "phase-pair" and _family(r):  # a kernel family's category-keyed policy
        return (
            f"one candidate per category (phase-keyed; dispatch.json; global kernel {r['kernel']}, {agree})"
        )
    if r["ship"] == "phase-pair":
        return f"one kernel per phase (dispatch.json; global kernel {r['kernel']}, {agree})"
    what = f"{r['kernel']}, {native_words(r['backend'], r.get('rope'))}" if native_shipped(r) else r["kernel"]
    return f"{what} ({agree}, {hfmt.us(r['latency_us'])} per call)"


def _routed(r) -> str:
    """'; it routes shapes to native-sdpa-cudnn' where a shipped policy runs natives; '' otherwise."""
    routed = r.get("natives_shipped")
    if r["ship"] == "kernel" or not isinstance(routed, str) or not routed:
        return ""
    return f"; it routes shapes to {routed.replace(',', ', ')}"


def native_shipped(r) -> bool:
    """Whether a row's global kernel is a native: not our best kernel (``our_kernel``; the global one
    among every candidate is ours exactly when it is our best)."""
    ours = r.get("our_kernel")
    return isinstance(ours, str) and bool(ours) and r["kernel"] != ours


def _ours_against(rows: pd.DataFrame) -> str:
    """Where a native is the global kernel: our best kernel's speed against it; where ours is and a
    native runs faster than it (the rows' ``faster_native``): that native and our speed against it;
    '' otherwise."""
    r0 = rows.iloc[0]
    name = r0["kernel"] if native_shipped(r0) else r0.get("faster_native")
    hit = rows[rows["alternative"].astype(str) == name] if isinstance(name, str) and name else rows.iloc[0:0]
    if hit.empty:
        return ""
    r = hit.iloc[0]
    figure = hfmt.estimate_ci(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"], "x")
    if native_shipped(r0):
        return f"; our best kernel, {r0['our_kernel']}, runs at {figure} its speed"
    return f"; but {name} runs faster than our best kernel: ours runs at {figure} its speed"


def _family(r) -> bool:
    """A kernel family's row (its ``kernel_family`` set): attention's decoder-layer model does not apply."""
    name = r.get("kernel_family")
    return isinstance(name, str) and bool(name)


def _layer(r, column: str) -> str:
    """' (x% of a layer)', or '' for a kernel family's row (no decoder-layer model)."""
    return "" if _family(r) else f" ({hfmt.pct(r[column])} of a layer)"


def _speedup(r) -> str:
    ci = f"[{hfmt.speedup(r['speedup_ci_low'])}, {hfmt.speedup(r['speedup_ci_high'])}]"
    alt = "the best unfused" if r["alternative"] == "best_unfused" else r["alternative"]
    return f"{hfmt.speedup(r['speedup'])} {ci} over {alt}{_layer(r, 'speedup_layer_pct')}"


def _sure(rows: pd.DataFrame) -> str:
    """Our best kernel's speedups over the best unfused and over each native, and the expected gain."""
    r0 = rows.iloc[0]
    alts = rows[rows["alternative"].astype(str) != ""]
    natives = alts["alternative"] != "best_unfused"
    flag = r0.get("host_included", False)
    host = bool(pd.notna(flag) and flag)
    said = [_speedup(r) for _, r in (alts[~natives] if host else alts).iterrows()]
    if natives.any() and host:  # a native's host path against ours is no kernel comparison
        said.append("natives not compared: these eager timings include the host's launch path")
    if said and native_shipped(r0):  # the speedups are our best kernel's, not the shipped one's
        said[0] = f"our best kernel {r0['our_kernel']}: {said[0]}"
    if r0["ship"] != "kernel":
        gain = f"{hfmt.pct(r0['expected_gain_pct'])} {hfmt.pct_ci(r0['expected_gain_ci_low'], r0['expected_gain_ci_high'])}"
        said.append(f"expected gain {gain}{_layer(r0, 'expected_gain_layer_pct')}")
    return "; ".join(said) or "no alternative timed"


def lines(table: pd.DataFrame, reason: str) -> list[str]:
    """The three lines."""
    verdict = str(table["headline_verdict"].iloc[0])
    first = reason.split(". ")[0].rstrip(".") if isinstance(reason, str) and reason else ""
    scopes = shown_scopes(table)
    by = {s: table[table["scope"].astype(str) == s] for s in scopes}
    ship = "; ".join(f"{_label(s)}: {_ship(by[s].iloc[0])}{_ours_against(by[s])}" for s in scopes)
    sure = "; ".join(f"{_label(s)}: {_sure(by[s])}" for s in scopes)
    said = f"{first}." if first else verdict  # the reason's first sentence names the verdict
    return [f"Verdict: {said}", f"Ship: {ship}", f"How sure: {sure}"]
