"""Every candidate against the float64 reference; who is excluded."""

from __future__ import annotations

import pandas as pd

from headroom.report.model import Section, table, unusable


def section(c: pd.DataFrame | None, why: str) -> Section:
    title = "Correctness"
    if (gone := unusable("correctness", title, c, why)) is not None:
        return gone
    per = c.groupby("candidate", as_index=False).agg(
        cases=("shape_key", "size"),
        failed=("passed", lambda x: int((~x.astype(bool)).sum())),
        max_rel_err=("rel_err", "max"),
        max_abs_err=("max_abs_err", "max"),
        nan_count=("nan_count", "sum"),
        unwritten_count=("unwritten_count", "sum"),
    )
    excluded = per.loc[per["failed"] > 0, "candidate"].tolist()
    s = Section("correctness", title, tables=[table("Every candidate against the float64 reference", per)])
    s.text.append(
        "Excluded candidates (failed at least one case): "
        + (", ".join(map(str, excluded)) if excluded else "none")
        + "."
    )
    return s
