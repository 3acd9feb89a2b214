"""What a report section is made of (text, tables, figures) and how its numbers are written.

One number format per column: ``table`` looks at a column's numbers once and writes every cell of it
the same way (thousands separated, the same decimals on every row, never scientific notation), so
``37,390`` never sits beside ``3.739e+04``. Ranges and intervals of signed figures read as
``-7.525 to -0.080%`` and ``[-0.459, +10.679]%``.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")  # no display: figures are files
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

SIGNIFICANT = 4  # digits of a column's largest value; its other rows get the same decimals
EN_DASH = "\u2013"


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


def _missing(value) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float | np.floating) and math.isnan(value))


def _is_number(value) -> bool:
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def _decimals(values: list[float]) -> int:
    """Decimals that show the largest value to ``SIGNIFICANT`` digits, trimmed to what any row needs."""
    finite = [abs(v) for v in values if math.isfinite(v)]
    top = max(finite, default=0.0)
    most = 0 if top == 0 else min(6, max(0, SIGNIFICANT - 1 - math.floor(math.log10(top))))
    need = 0
    for v in finite:
        while need < most and round(v, need) != round(v, most):
            need += 1
    return need


def number_format(values) -> Callable[[object], str]:
    """The one formatter of a column: integers with separators, floats with the column's decimals."""
    nums = [v for v in values if _is_number(v) and not _missing(v)]
    if nums and all(isinstance(v, int | np.integer) for v in nums):
        decimals = 0
    else:
        decimals = _decimals([float(v) for v in nums])

    def write(value) -> str:
        if _missing(value):
            return "n/a"
        if isinstance(value, bool | np.bool_):
            return "yes" if value else "no"
        if not _is_number(value):
            return str(value)
        v = float(value)
        if math.isinf(v):
            return "never" if v > 0 else "-inf"
        return f"{v:,.{decimals}f}"

    return write


def fmt(value) -> str:
    """One value alone, as its column would write it if it were the only row."""
    return number_format([value])(value)


def signed_range(values, unit: str = "%", digits: int = 3) -> str:
    """min–max; signed ('-7.525 to -0.080%') when the range holds a negative; 'n/a' when empty."""
    v = [float(x) for x in values if not _missing(x) and math.isfinite(float(x))]
    if not v:
        return "n/a"
    lo, hi = min(v), max(v)
    if lo < 0:
        a, b = f"{lo:+.{digits}f}", f"{hi:+.{digits}f}"
        return f"{a}{unit}" if a == b else f"{a} to {b}{unit}"
    a, b = f"{lo:.{digits}f}", f"{hi:.{digits}f}"
    return f"{a}{unit}" if a == b else f"{a}{EN_DASH}{b}{unit}"


def signed_interval(lo: float, hi: float, unit: str = "%", digits: int = 3) -> str:
    """'[-0.459, +10.679]%'; 'n/a' when either end is missing."""
    if _missing(lo) or _missing(hi):
        return "n/a"
    return f"[{float(lo):+.{digits}f}, {float(hi):+.{digits}f}]{unit}"


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
