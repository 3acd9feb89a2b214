"""The decision in full: its reason as stated, the kernel recommendation rows, the verdict per mode
and every figure it was decided on (the answer section leads with the short form)."""

from __future__ import annotations

import pandas as pd

from headroom.report.model import Section, estimate_ci, fmt, skipped, table

FIGURE_LABELS = {
    "gap_to_oracle": "global kernel's gap to the oracle (fusion arm free)",
    "policy_gain": "best deployable policy's net gain over the better of global and phase-keyed "
    "(both chosen on validation)",
    "policy_gain_runtime_dispatch": "kv-keyed policies' net gain (graph mode: needs runtime dispatch "
    "inside the graph; reported, not decided)",
    "fusion_speedup": "trace-weighted fusion speedup (global unfused / global fused)",
    "kernel_vs_best_unfused": "recommended kernel's speedup over the best unfused kernel",
    "policy_gain_switch_0x": "policy figure with no switch penalty (the detail: the mode's verdict then)",
    "policy_gain_switch_2x": "policy figure at twice the measured switch penalty (the detail: the verdict)",
    "fusion_speedup_sweep": "fusion speedup of the graph sweep (two fixed shapes; diagnostic)",
    "gap_to_oracle_same_run": "same-run gap to the oracle (v1: oracle chosen on the data it is scored on)",
    "policy_gain_mde": "smallest net gain over the baseline the rule detects (80% power, simulated "
    "on this study's trace and noise): what a stop here rules out",
    "policy_gain_no_mde": "no planted net gain up to this reached 80% power on this study's trace "
    "and noise (the detail gives the largest power seen): not a minimum detectable effect",
}


def section(d: pd.DataFrame | None, why: str) -> Section:
    title = "Decision: verdict per mode and the figures it was decided on"
    if d is None:
        return skipped("decision", title, why)
    if "figure" not in d.columns:
        return skipped("decision", title, "decision.parquet predates decision v2 (no per-figure rows)")
    s = Section("decision", title)
    s.text.append(f"The decision's reason, as it states it: {d['reason'].iloc[0]}")
    s.text += _kernel_lines(d)
    fams = d.drop_duplicates("family") if "family" in d.columns else d.drop_duplicates("mode")
    s.text += [f"{m.mode} mode: {m.mode_verdict} ({m.mode_reason})." for m in fams.itertuples()]
    s.text.append(
        "Every figure is cross-run: the global kernel, the policies and the oracle are chosen on one run "
        "and scored on another (all ordered pairs of runs); CIs combine a jackknife over runs with a "
        "bootstrap over test invocations: the decided figures' CIs (and the gap bound's, on which the gap "
        "holds) are bootstrap-t since decision-v3.1 (from four runs on, the gap's and its bound's run part "
        "the pair mean's variance from its run and pair components since decision-v3.3), every other row's and "
        "every p-value the t interval "
        "with Welch-Satterthwaite degrees of freedom; `continue` needs Holm's procedure (within the mode, "
        "or within the deployment profile's parts for the headline) to reject a figure's 'at or below "
        "threshold'. "
        "Arms: off = unfused candidates, on = RoPE in the attention kernel (fused, q_fused), free = both. "
        "Policies: global = one candidate; phase-keyed = one per phase; exact-key, bucketed (power-of-two "
        "shape buckets), clustered (k-means on shape), regret-aware (deviates only when the gain's lower "
        "bound beats its cost), batch-keyed (phase and padded batch size: the only ones a CUDA Graph can "
        "hold) are the deployable adaptive ones; random a floor; oracle the per-invocation best."
    )
    shown = d[(d["decided"] | d["figure"].isin(FIGURE_LABELS)) & ~d["figure"].str.startswith(KERNEL)]
    rows = [
        {
            "mode": r.mode,
            "figure": FIGURE_LABELS.get(r.figure, r.figure),
            "estimate [CI]": estimate_ci(r.estimate, r.ci_low, r.ci_high, r.unit),
            "threshold": f"{fmt(r.threshold)}{'×' if r.unit == 'x' else r.unit}"
            if pd.notna(r.threshold)
            else "",
            "state": r.state,
            "p (one-sided)": fmt(r.p_value) if pd.notna(r.p_value) else "",
            "note": r.detail
            if str(r.figure).startswith(("policy_gain_switch_", "policy_gain_mde", "policy_gain_no"))
            else "",
        }
        for r in shown.itertuples()
    ]
    s.tables.append(table("Decided figures (and, marked reported, beside them)", pd.DataFrame(rows)))
    return s


KERNEL = "kernel_vs_"


def _kernel_lines(d: pd.DataFrame) -> list[str]:
    """The kernel recommendation per mode, first: which one kernel to ship and how it compares."""
    if "kernel" not in d.columns:
        return []
    rows = d[d["figure"].str.startswith(KERNEL) & d["kernel"].notna() & ~d["mode"].str.contains("@")]
    out = []
    for mode, g in rows.groupby("mode", sort=True):
        first = g.iloc[0]
        vs = "; ".join(
            f"over {r.figure[len(KERNEL) :].replace('_', ' ')} "
            f"{estimate_ci(r.estimate, r.ci_low, r.ci_high, r.unit)}"
            for r in g.itertuples()
        )
        out.append(
            f"Kernel recommendation, {mode} mode: ship {first['kernel']} ({int(first['runs_agree'])} of "
            f"{int(first['runs'])} runs agree); trace-weighted speedup {vs}."
        )
    return out
