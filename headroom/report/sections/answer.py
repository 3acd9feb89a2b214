"""The answer, first: the verdict in two sentences, what to ship, and what the study could have detected."""

from __future__ import annotations

import pandas as pd

from headroom.decide.words import label
from headroom.report.family import FamilyView
from headroom.report.model import Section, estimate_ci, fmt, pct
from headroom.report.ship import SOURCES, Ship

TITLE = "The answer: verdict, what to ship, what this study could detect"


def section(d: pd.DataFrame | None, ships: list[Ship], why: str, fam: FamilyView | None = None) -> Section:
    s = Section("answer", TITLE)
    s.lead, s.lead_detail = verdict_sentences(d, why, fam)
    if fam is not None:
        s.text.append(fam.headline())
    s.text += [ship_line(x, fam) for x in ships] or [
        "What to ship: not stated: no recommendation artifact, no kernel rows in the decision and no "
        "policy_eval global candidate were read."
    ]
    if ships:
        s.text.append(f"What to ship is read from {SOURCES[ships[0].source]}.")
    if fam is not None:
        s.text.append(
            fam.not_applicable(
                "the decoder-layer model (attention plus its GEMMs) is attention's",
                "What a saving is worth per decoder layer",
            )
        )
    s.text.append(power_statement(d))
    return s


def verdict_sentences(d: pd.DataFrame | None, why: str, fam: FamilyView | None = None) -> tuple[str, str]:
    """('Verdict: stop.', the decision's first sentence, and for a headroom no deployable policy
    captures: where it lives and what richer policy would capture it, with what deploying that needs)."""
    if d is None or d.empty:
        return "Verdict: no-decision.", f"No decision was read ({why})."
    verdict = str(d["verdict"].iloc[0])
    first = str(d["reason"].iloc[0]).split(". Per part:")[0].rstrip(".") + "."
    if "reason_code" not in d.columns or d["reason_code"].iloc[0] != "uncapturable":
        return f"Verdict: {verdict}.", first
    return f"Verdict: {verdict}.", first + " " + " ".join(uncapturable(d, fam))


def uncapturable(d: pd.DataFrame, fam: FamilyView | None = None) -> list[str]:
    """Per decided unit whose gap exceeds and no deployable policy captures it: the headroom per
    invocation, the shapes that carry it, and the richer policies' cross-run gains with what
    deploying each needs."""
    out = []
    units = d[(d["mode_reason_code"] == "uncapturable") & (d["family"] == d["family"].iloc[0])]
    if "profile" in set(d["family"]):
        units = d[(d["mode_reason_code"] == "uncapturable") & (d["family"] == "profile")]
    for unit, rows in units.groupby("mode", sort=False):
        gap = rows[rows["figure"] == "gap_to_oracle"].iloc[0]
        where = rows[rows["figure"] == "gap_carried_by"]
        richer = rows[rows["figure"].astype(str).str.startswith("richer_gain_")]
        said = f"In {unit}: the per-invocation best kernel is {estimate_ci(gap.estimate, gap.ci_low, gap.ci_high, '%')} ahead of the global one"
        if len(where):
            said += f"; {where.iloc[0].detail}"
        for r in richer.itertuples():
            words = label(r.figure) if fam is None else fam.label(r.figure)
            said += (
                f"; {words} {estimate_ci(r.estimate, r.ci_low, r.ci_high, '%')} ({r.detail.split('; ')[-1]})"
            )
        out.append(said + ".")
    return out


def ship_line(x: Ship, fam: FamilyView | None = None) -> str:
    agree = f" ({x.runs_agree} of {x.runs} runs agree)" if x.runs_agree is not None and x.runs else ""
    vs = "; ".join(
        f"{estimate_ci(v.speedup, v.ci_low, v.ci_high, 'x')} over {v.alternative}"
        + (f" ({pct(v.layer_pct, signed=False)} of a decoder layer's time)" if pd.notna(v.layer_pct) else "")
        for v in x.versus
    )
    if x.ship == "policy":
        gain = f", expected gain {estimate_ci(*x.expected_gain, '%')}" if x.expected_gain else ""
        keyed = f" ({fam.policy(x.policy)})" if fam is not None and x.policy else ""
        head = f"Ship the {x.policy or 'dispatch'} policy{keyed} in {x.scope} (dispatch.json; fallback {x.kernel}){gain}"
    elif x.ship == "phase-pair" and fam is not None:
        head = f"Ship {fam.policy('phase-keyed')} (the phase-keyed policy; dispatch.json) in {x.scope}{agree}"
    elif x.ship == "phase-pair":
        head = f"Ship the phase pair {x.kernel} in {x.scope}{agree}"
    elif x.native_shipped:
        head = f"Ship {x.kernel}{f' ({x.native})' if x.native else ''} in {x.scope}{agree}"
    else:
        head = f"Ship {x.kernel} in {x.scope}{agree}"
    if x.ship != "kernel" and x.natives_shipped:
        head += f"; it routes shapes to {x.natives_shipped.replace(',', ', ')}"
    latency = f", {fmt(x.latency_us)} µs per invocation (trace-weighted)" if pd.notna(x.latency_us) else ""
    if x.native_shipped:  # the speedups are our best kernel's
        said = [
            estimate_ci(v.speedup, v.ci_low, v.ci_high, "x") for v in x.versus if v.alternative == x.kernel
        ]
        speed = f" runs at {said[0]} its speed" if said else ""
        return f"{head}{latency}. Our best kernel, {x.our_kernel},{speed}" + (
            f"; its trace-weighted speedup {vs}." if vs else "."
        )
    line = f"{head}{latency}" + (f": trace-weighted speedup {vs}." if vs else ".")
    if x.faster_native is not None:
        v = x.faster_native
        line += (
            f" But {v.alternative} runs faster than our best kernel in {x.scope}: {x.kernel} runs at "
            f"{estimate_ci(v.speedup, v.ci_low, v.ci_high, 'x')} its speed."
        )
    return line


def power_statement(d: pd.DataFrame | None) -> str:
    """The MDE per mode (decision's policy_gain_mde / policy_gain_no_mde rows), or, for a decision
    recorded before the power simulation, the decided figures' CI half-widths (computed here)."""
    if d is None or "figure" not in d.columns:
        return "What this study could detect: not stated: the decision has no per-figure rows."
    mde = d[d["figure"].isin(("policy_gain_mde", "policy_gain_no_mde"))]
    if len(mde):
        parts = [
            f"{r.mode}: {pct(r.estimate, signed=False)} or more (80% power, simulated on this study's trace "
            "and noise)"
            if r.figure == "policy_gain_mde"
            else f"{r.mode}: no gain up to {pct(r.estimate, signed=False)} reached 80% power"
            for r in mde.itertuples()
        ]
        return (
            "What this study could detect, as a net policy gain: "
            + "; ".join(parts)
            + ". A smaller gain could be there unseen."
        )
    decided = d[d["decided"].astype(bool)] if "decided" in d.columns else d.iloc[0:0]
    half = ((decided["ci_high"] - decided["ci_low"]) / 2).groupby(decided["mode"]).max()
    widths = "; ".join(f"{m} ±{fmt(v)} pp" for m, v in half.items()) or "none"
    return (
        "What this study could detect: no power simulation in this decision (recorded before it: no "
        "policy_gain_mde rows); the widest CI half-width of a decided figure, computed here from "
        f"ci_low and ci_high, is {widths}: effects smaller than that were not resolvable."
    )
