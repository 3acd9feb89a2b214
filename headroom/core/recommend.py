"""`headroom recommend`: the recommendation artifact in three lines — verdict, what to ship, how sure.

Read from results/<study>/recommendation.parquet (headroom/analysis/recommendation.py writes it) and
the decision's reason; every number is written by headroom/core/format.py. Scopes shown: the
deployment profile's parts when the study has them, else each mode.
"""

from __future__ import annotations

import pandas as pd

from headroom.core import format as hfmt
from headroom.core.names import CAPTURED, UNCAPTURED


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
    agree = f"{int(r['runs_agree'])}/{int(r['runs'])} runs agree"
    if r["ship"] == "policy":
        return f"the {r['policy']} dispatch policy (dispatch.json; global kernel {r['kernel']}, {agree})"
    if r["ship"] == "phase-pair" and _family(r):  # a kernel family's category-keyed policy
        return (
            f"one candidate per category (phase-keyed; dispatch.json; global kernel {r['kernel']}, {agree})"
        )
    if r["ship"] == "phase-pair":
        return f"one kernel per phase (dispatch.json; global kernel {r['kernel']}, {agree})"
    return f"{r['kernel']} ({agree}, {hfmt.us(r['latency_us'])} per call)"


def _faster_native(rows: pd.DataFrame) -> str:
    """Where a native backend runs faster than every kernel of ours (the rows' ``faster_native``): it
    and our speedup over it with CI; '' otherwise (and for a recommendation recorded before it)."""
    name = rows.iloc[0].get("faster_native")
    if not isinstance(name, str) or not name:
        return ""
    r = rows[rows["alternative"].astype(str) == name].iloc[0]
    figure = hfmt.estimate_ci(r["speedup"], r["speedup_ci_low"], r["speedup_ci_high"], "x")
    return (
        f"; but {name} is the faster choice: ours runs at {figure} its speed "
        "(the global kernel is chosen among our kernels only)"
    )


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
    """The speedups over the best unfused and over the strongest native, and the expected gain."""
    r0 = rows.iloc[0]
    alts = rows[rows["alternative"].astype(str) != ""]
    picks = alts[alts["alternative"] == "best_unfused"]
    natives = alts[alts["alternative"] != "best_unfused"]
    flag = r0.get("host_included", False)
    host = bool(pd.notna(flag) and flag)
    if len(natives) and not host:
        picks = pd.concat([picks, natives.loc[[natives["speedup"].idxmin()]]])
    said = [_speedup(r) for _, r in picks.iterrows()]
    if len(natives) and host:  # a native's host path against ours is no kernel comparison
        said.append("natives not compared: these eager timings include the host's launch path")
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
    ship = "; ".join(f"{_label(s)}: {_ship(by[s].iloc[0])}{_faster_native(by[s])}" for s in scopes)
    sure = "; ".join(f"{_label(s)}: {_sure(by[s])}" for s in scopes)
    said = f"{first}." if first else verdict  # the reason's first sentence names the verdict
    return [f"Verdict: {said}", f"Ship: {ship}", f"How sure: {sure}"]
