"""What a report section is made of (text, tables, figures); its numbers are written by
``headroom.report.format`` (``table`` gives each column one format)."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")  # no display: figures are files
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from headroom.core.format import (  # noqa: E402,F401  (the section modules write through model)
    EN_DASH,
    fmt,
    number_format,
    signed_interval,
    signed_range,
)


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


@dataclass
class Figure:
    name: str  # file stem under figures/
    title: str
    png: bytes

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


@dataclass
class Section:
    key: str
    title: str
    status: str = "ok"  # 'ok' | 'skipped'
    reason: str = ""
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


def table(title: str, df: pd.DataFrame, note: str = "") -> Table:
    writers = [number_format(df[c].tolist()) for c in df.columns]
    rows = [[w(v) for w, v in zip(writers, row, strict=True)] for row in df.itertuples(index=False)]
    return Table(title, [str(c) for c in df.columns], rows, note)


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})  # layout is constrained: one draw
    plt.close(fig)
    return buf.getvalue()


def skipped(key: str, title: str, reason: str) -> Section:
    return Section(key, title, status="skipped", reason=reason)


def all_skipped(df: pd.DataFrame | None) -> str | None:
    """The reason when a table has no usable rows (missing, empty, or every row skipped)."""
    if df is None:
        return None
    if df.empty:
        return "the artifact has no rows"
    if "status" in df.columns and (df["status"].astype(str) == "skipped").all():
        reasons = sorted({str(r) for r in df.get("reason", pd.Series(dtype=str)).dropna() if str(r)})
        return "; ".join(reasons) if reasons else "every row is skipped"
    return None
