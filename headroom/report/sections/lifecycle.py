"""The lifecycle ledger (compile, cache, dispatch, switching) and the break-even horizon."""

from __future__ import annotations

import math

import pandas as pd

from headroom.analysis.policies import DEPLOYABLE
from headroom.report.model import Section, all_skipped, skipped, table


def section(lc: pd.DataFrame | None, pe: pd.DataFrame | None, why: str) -> Section:
    title = "Lifecycle ledger"
    if lc is None:
        return skipped("lifecycle", title, why)
    if reason := all_skipped(lc):
        return skipped("lifecycle", title, reason)
    s = Section("lifecycle", title)
    lc_ok = lc[lc["status"].astype(str) == "ok"] if "status" in lc.columns else lc
    if "kind" in lc_ok.columns:
        for kind, label in (
            ("compile", "cold compile per candidate"),
            ("cache", "cache per candidate"),
            ("dispatch", "dispatch lookup per policy"),
            ("switch", "switching penalty"),
        ):
            rows = lc_ok[lc_ok["kind"] == kind]
            if rows.empty:
                s.text.append(f"{label}: skipped: no ok rows")
                continue
            cols = [
                c
                for c in ("candidate", "candidate_b", "policy", "mode", "invocation", "value", "unit")
                if c in rows.columns
            ]
            cols = [
                c
                for c in cols
                if rows[c].astype(str).str.len().gt(0).any() and not (rows[c].astype(str) == "-1").all()
            ]
            s.tables.append(table(label, rows[cols]))
    else:
        s.tables.append(table("lifecycle rows", lc_ok))
    if pe is not None and "running_cost_us" in pe.columns:
        rows = []
        free = pe[(pe["fusion"] == "free") & pe["policy"].isin(DEPLOYABLE)]
        glob = pe[(pe["fusion"] == "free") & (pe["policy"] == "global")].set_index(["run", "mode"])
        for r in free.itertuples(index=False):
            g = glob.loc[(r.run, r.mode)]
            gain_us = (g["test_us"] - r.test_us) / r.test_invocations
            margin_us = gain_us - (r.running_cost_us - g["running_cost_us"])
            once_us = (r.compile_s - g["compile_s"]) * 1e6
            if margin_us <= 0:
                horizon = math.inf
            else:
                horizon = max(once_us, 0.0) / margin_us
            rows.append(
                {
                    "run": r.run,
                    "mode": r.mode,
                    "policy": r.policy,
                    "gain_us_per_invocation": gain_us,
                    "extra_running_us_per_invocation": r.running_cost_us - g["running_cost_us"],
                    "extra_compile_s": r.compile_s - g["compile_s"],
                    "break_even_invocations": horizon,
                }
            )
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
