"""Every candidate against the float64 reference; who is excluded."""

from __future__ import annotations

import pandas as pd

from headroom.report.family import FamilyView
from headroom.report.model import Section, table, unusable


def section(c: pd.DataFrame | None, why: str, fam: FamilyView | None = None) -> Section:
    title = "Correctness"
    if (gone := unusable("correctness", title, c, why)) is not None:
        return gone
    counts = {
        "nan_count": ("nan_count", "sum"),
        "unwritten_count": ("unwritten_count", "sum"),
    }
    if fam is not None:  # a family's check counts NaNs in its output; unwritten elements are not counted (-1)
        counts.pop("unwritten_count")
    per = c.groupby("candidate", as_index=False).agg(
        cases=("shape_key", "size"),
        failed=("passed", lambda x: int((~x.astype(bool)).sum())),
        max_rel_err=("rel_err", "max"),
        max_abs_err=("max_abs_err", "max"),
        **counts,
    )
    excluded = per.loc[per["failed"] > 0, "candidate"].tolist()
    s = Section("correctness", title, tables=[table("Every candidate against the float64 reference", per)])
    s.text.append(
        "Excluded candidates (failed at least one case): "
        + (", ".join(map(str, excluded)) if excluded else "none")
        + "."
    )
    if fam is not None:
        s.text.append(
            f"Unwritten elements are not counted for family {fam.name}'s candidates (its inputs say what "
            "its outputs hold before a call: an element left unwritten in a NaN-filled output is a NaN)."
        )
    return s
