"""The decision in full: its reason as stated, the kernel recommendation rows, the verdict per mode
and every figure it was decided on (the answer section leads with the short form)."""

from __future__ import annotations

import pandas as pd

from headroom.decide.words import label
from headroom.report.family import FamilyView
from headroom.report.model import Section, estimate_ci, fmt, skipped, table

# reported rows shown beside the decided figures
SHOWN = (
    "gap_to_oracle_bound",
    "policy_gain_runtime_dispatch",
    "richer_gain_exact-key",
    "richer_gain_bucketed",
    "gap_carried_by",
    "fusion_speedup",
    "policy_gain_switch_0x",
    "policy_gain_switch_2x",
    "fusion_speedup_sweep",
    "gap_to_oracle_same_run",
    "policy_gain_mde",
    "policy_gain_no_mde",
)


#: How every figure is made and read (every study's)
METHOD = (
    "Every figure is cross-run: the global kernel, the policies and the oracle are chosen on one run "
    "and scored on another (all ordered pairs of runs). Its interval is the two-way bootstrap's: runs "
    "and test invocations resampled independently, the figure recomputed on each resample, the 2.5% "
    "and 97.5% quantiles. A figure exceeds its threshold when the interval's lower end lies above it, "
    "holds when its upper end lies below it (the gap on its bound, whose best kernel is chosen on the "
    "mean of all runs). `continue` needs the deployable policy's net gain to exceed; `stop` needs it "
    "and the gap to hold, or the gap to exceed with no deployable policy capturing it (`uncapturable`). "
)
#: The arms and policies in attention's features
ATTENTION_TERMS = (
    "Arms: off = our unfused kernels, on = ours with RoPE in the attention kernel (fused, q_fused), "
    "free = every candidate that passed correctness, the native backends included (but on eager timings "
    "that include the host's launch path, where a native's host path is no kernel comparison). "
    "Policies: global = one candidate; phase-keyed = one per phase; exact-key, bucketed (power-of-two "
    "shape buckets), clustered (k-means on shape), regret-aware (deviates only when the gain's lower "
    "bound beats its cost), batch-keyed (phase and padded batch size: the only ones a CUDA Graph can "
    "hold) are the deployable adaptive ones; random a floor; oracle the per-invocation best."
)


def family_terms(fam: FamilyView) -> str:
    """The arms and policies in a family's features."""
    return (
        fam.not_applicable("they are attention's (RoPE in the kernel)", "Fusion arms")
        + f" Policies, in family {fam.name}'s declared features: global = one candidate; phase-keyed = "
        f"{fam.policy('phase-keyed')}; exact-key ({fam.policy('exact-key')}), bucketed ({fam.policy('bucketed')}), "
        f"clustered ({fam.policy('clustered')}), regret-aware (deviates only when the gain's lower bound "
        f"beats its cost), batch-keyed ({fam.policy('batch-keyed')}: the only one a CUDA Graph can hold) "
        "are the deployable adaptive ones; random a floor; oracle the per-invocation best."
    )


def section(d: pd.DataFrame | None, why: str, fam: FamilyView | None = None) -> Section:
    title = "Decision: verdict per mode and the figures it was decided on"
    if d is None:
        return skipped("decision", title, why)
    if "figure" not in d.columns:
        return skipped("decision", title, "decision.parquet predates decision v2 (no per-figure rows)")
    s = Section("decision", title)
    s.text.append(f"The decision's reason, as it states it: {d['reason'].iloc[0]}")
    s.text += _kernel_lines(d)
    units = d.drop_duplicates("mode")
    units = units[units["mode_verdict"] != "reported"]
    s.text += [f"{m.mode}: {m.mode_verdict} ({m.mode_reason})." for m in units.itertuples()]
    s.text.append(METHOD + (ATTENTION_TERMS if fam is None else family_terms(fam)))
    shown = d[(d["decided"] | d["figure"].isin(SHOWN)) & ~d["figure"].str.startswith(KERNEL)]
    said = label if fam is None else fam.label
    rows = [
        {
            "mode": r.mode,
            "figure": said(r.figure),
            "estimate [CI]": estimate_ci(r.estimate, r.ci_low, r.ci_high, r.unit),
            "threshold": f"{fmt(r.threshold)}{'×' if r.unit == 'x' else r.unit}"
            if pd.notna(r.threshold)
            else "",
            "state": r.state,
            "p (one-sided)": fmt(r.p_value) if pd.notna(r.p_value) else "",
            "note": r.detail
            if str(r.figure).startswith(
                ("policy_gain_switch_", "policy_gain_mde", "policy_gain_no", "richer_", "gap_carried")
            )
            else "",
        }
        for r in shown.itertuples()
    ]
    s.tables.append(table("Decided figures (and, marked reported, beside them)", pd.DataFrame(rows)))
    return s


KERNEL = "kernel_vs_"


def _kernel_lines(d: pd.DataFrame) -> list[str]:
    """The kernel recommendation per mode, first: which one kernel to ship (the global one its gap row
    names, ours or a native) and how our best kernel compares (its kernel rows)."""
    if "kernel" not in d.columns:
        return []
    rows = d[d["figure"].str.startswith(KERNEL) & d["kernel"].notna() & ~d["mode"].str.contains("@")]
    out = []
    for mode, g in rows.groupby("mode", sort=True):
        first = g.iloc[0]
        gap = d[(d["mode"] == mode) & (d["figure"] == "gap_to_oracle") & d["kernel"].notna()]
        shipped = gap.iloc[0] if len(gap) else first  # a decision recorded before: its kernel rows'
        vs = "; ".join(
            f"over {r.figure[len(KERNEL) :].replace('_', ' ')} "
            f"{estimate_ci(r.estimate, r.ci_low, r.ci_high, r.unit)}"
            for r in g.itertuples()
        )
        ours = "" if shipped["kernel"] == first["kernel"] else f"our best kernel {first['kernel']}'s "
        out.append(
            f"Kernel recommendation, {mode} mode: ship {shipped['kernel']} ({int(shipped['runs_agree'])} of "
            f"{int(first['runs'])} runs agree); {ours}trace-weighted speedup {vs}."
        )
    return out
