"""The lifecycle ledger (compile, cache, dispatch, switching) and the break-even horizon."""

from __future__ import annotations

import math

import pandas as pd

from headroom.core.format import seconds
from headroom.decide.policy_eval import DEPLOYABLE
from headroom.report.family import FamilyView
from headroom.report.model import Section, fmt, nbytes, number_format, table, unusable

LEDGER_KINDS = (
    ("compile", "cold compile per candidate"),
    ("cache", "cache per candidate"),
    ("dispatch", "dispatch lookup per policy"),
    ("switch", "switching penalty"),
    ("plan", "plan build per candidate and shape (generation 2)"),
)


def section(
    lc: pd.DataFrame | None, pe: pd.DataFrame | None, why: str, fam: FamilyView | None = None
) -> Section:
    title = "Lifecycle ledger"
    if (gone := unusable("lifecycle", title, lc, why)) is not None:
        return gone
    s = Section("lifecycle", title)
    lc_ok = lc[lc["status"].astype(str) == "ok"] if "status" in lc.columns else lc
    if "kind" in lc_ok.columns:
        _ledger_tables(s, lc_ok, fam)
    else:
        s.tables.append(table("lifecycle rows", lc_ok))
    if pe is not None and "running_cost_us" in pe.columns:
        rows = _break_even_rows(pe)
        if rows:
            s.tables.append(
                table(
                    "Break-even horizon (fusion arm free)",
                    pd.DataFrame(rows),
                    "invocations after which the one-time extra compile is paid back by the per-invocation "
                    "margin (gain minus extra lookup and switching); 'never' when the margin is not positive",
                )
            )
    return s


def _ledger_tables(s: Section, lc_ok: pd.DataFrame, fam: FamilyView | None = None) -> None:
    """One summary row per kind of lifecycle row (rows, median, min, max, unit, the largest), then
    each kind's full rows in a folded table (the data stays in the page, out of the way). A family's
    candidates have no plans (``prepare`` is their compile): the plan kind does not apply."""
    summary, full = [], []
    for kind, label in LEDGER_KINDS:
        rows = lc_ok[lc_ok["kind"] == kind]
        if kind == "plan" and fam is not None and rows.empty:
            s.text.append(fam.not_applicable("plans are made by attention's generation-2 kernels", label))
            continue
        if rows.empty:
            s.text.append(f"{label}: skipped: no ok rows")
            continue
        summary.append(_summary_row(label, rows))
        shape = ("shape_key",) if kind == "plan" else ()  # compile rows list every shape compiled
        named = ("candidate", "candidate_b", "policy", "mode", "invocation", *shape, "value", "unit")
        cols = [c for c in named if c in rows.columns]
        cols = [
            c
            for c in cols
            if rows[c].astype(str).str.len().gt(0).any() and not (rows[c].astype(str) == "-1").all()
        ]
        shown = rows[cols].copy()
        if {"value", "unit"} <= set(cols):  # one unit-aware cell: '60.00 MiB', not raw bytes
            write = _writer(str(rows["unit"].iloc[0]), rows["value"].tolist())
            shown["value"] = [write(v) for v in rows["value"]]
            shown = shown.drop(columns=["unit"])
        full.append(table(f"{label}: every row ({len(rows)})", shown, collapsed=len(rows) > 20))
    if summary:
        s.tables.append(
            table(
                "Lifecycle ledger, summarised per kind",
                pd.DataFrame(summary),
                "every row of each kind follows (long ones folded) and in lifecycle.parquet",
            )
        )
    s.tables += full


def _summary_row(label: str, rows: pd.DataFrame) -> dict:
    v = rows["value"].astype(float)
    unit = str(rows["unit"].iloc[0]) if "unit" in rows.columns else ""
    top = rows.loc[v.idxmax()]
    who = next((str(top[c]) for c in ("candidate", "policy") if c in rows and str(top[c])), "")
    write = _writer(unit, v.tolist())
    return {
        "kind": label,
        "rows": len(rows),
        "median": write(v.median()),
        "min": write(v.min()),
        "max": write(v.max()),
        "largest": who,
    }


def _writer(unit: str, values=()):
    """A unit-aware writer for the ledger's value column (bytes in binary units, seconds scaled,
    µs and other units with one number format over ``values``)."""
    if unit == "bytes":
        return nbytes
    if unit == "s":
        return seconds
    write = number_format(list(values)) if len(values) else fmt
    shown = "µs" if unit == "us" else unit
    return lambda x: f"{write(x)} {shown}".strip()


def _break_even_rows(pe: pd.DataFrame) -> list[dict]:
    """Per run, mode and deployable policy (arm free): its gain over global, extra running and compile
    costs, and the invocations after which the extra compile is paid back."""
    rows = []
    free = pe[(pe["fusion"] == "free") & pe["policy"].isin(DEPLOYABLE)]
    glob = pe[(pe["fusion"] == "free") & (pe["policy"] == "global")].set_index(["run", "mode"])
    for r in free.itertuples(index=False):
        g = glob.loc[(r.run, r.mode)]
        gain_us = (g["test_us"] - r.test_us) / r.test_invocations
        margin_us = gain_us - (r.running_cost_us - g["running_cost_us"])
        once_us = (r.compile_s - g["compile_s"]) * 1e6
        rows.append(
            {
                "run": r.run,
                "mode": r.mode,
                "policy": r.policy,
                "gain_per_invocation_us": gain_us,
                "extra_running_per_invocation_us": r.running_cost_us - g["running_cost_us"],
                "extra_compile_s": r.compile_s - g["compile_s"],
                "break_even_invocations": math.inf if margin_us <= 0 else max(once_us, 0.0) / margin_us,
            }
        )
    return rows
