"""The one way headroom writes numbers for people: the study report, the cross-study page,
REPRODUCTION.md and the CLI's summaries all write through these functions.

One number format per column: ``number_format`` looks at a column's numbers once and writes every cell
of it the same way (thousands separated, the same decimals on every row, never scientific notation),
so ``37,390`` never sits beside ``3.739e+04``. Ranges and intervals of signed figures read as
``-7.525 to -0.080%`` and ``[-0.459, +10.679]%``; a signed zero never prints as ``-0.000``. Units are
written as units: ``µs``, ``MiB``, ``×``. Imports nothing heavier than numpy and pandas (the CLI's
base install reads results without matplotlib).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

SIGNIFICANT = 4  # digits of a column's largest value; its other rows get the same decimals
EN_DASH = "\u2013"
MICRO = "\u00b5s"
TIMES = "\u00d7"


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
        text = f"{v:,.{decimals}f}"
        return text[1:] if text.startswith("-") and float(text[1:].replace(",", "")) == 0 else text

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
    if _signed(lo, digits).startswith("-"):
        a, b = _signed(lo, digits), _signed(hi, digits)
        return f"{a}{unit}" if a == b else f"{a} to {b}{unit}"
    a, b = _plain(lo, digits), _plain(hi, digits)
    return f"{a}{unit}" if a == b else f"{a}{EN_DASH}{b}{unit}"


def signed_interval(lo: float, hi: float, unit: str = "%", digits: int = 3) -> str:
    """'[-0.459, +10.679]%'; 'n/a' when either end is missing."""
    if _missing(lo) or _missing(hi):
        return "n/a"
    return f"[{_signed(float(lo), digits)}, {_signed(float(hi), digits)}]{unit}"


def _signed(value: float, digits: int) -> str:
    """``+1.234`` / ``-1.234``; a value that rounds to zero is ``0.000`` (never ``-0.000``)."""
    text = f"{value:+.{digits}f}"
    return f"{0.0:.{digits}f}" if float(text) == 0 else text


def _plain(value: float, digits: int) -> str:
    """``1.234``; a value that rounds to zero is ``0.000`` (never ``-0.000``)."""
    text = f"{value:.{digits}f}"
    return f"{0.0:.{digits}f}" if float(text) == 0 else text


def pct(value, digits: int = 2, signed: bool = True) -> str:
    """A percentage: ``+1.12%`` (signed) or ``1.12%``; ``n/a`` when missing."""
    if _missing(value):
        return "n/a"
    v = float(value)
    return f"{_signed(v, digits) if signed else _plain(v, digits)}%"


def pct_ci(lo, hi, digits: int = 2) -> str:
    """A confidence interval of a percentage: ``[+0.56, +1.69]%``; ``n/a`` when either end is missing."""
    if _missing(lo) or _missing(hi):
        return "n/a"
    return f"[{_signed(float(lo), digits)}, {_signed(float(hi), digits)}]%"


def us(value, digits: int | None = None) -> str:
    """A latency in microseconds: ``646.2 µs`` (4 significant digits unless ``digits`` is given)."""
    if _missing(value):
        return "n/a"
    v = float(value)
    d = digits if digits is not None else _decimals([v])
    return f"{v:,.{d}f} {MICRO}"


def speedup(value, digits: int = 3) -> str:
    """A ratio of latencies: ``1.083×``."""
    if _missing(value):
        return "n/a"
    return f"{float(value):.{digits}f}{TIMES}"


def nbytes(value) -> str:
    """A size in binary units: ``512 B``, ``1.50 KiB``, ``60.00 MiB``, ``1.25 GiB``."""
    if _missing(value):
        return "n/a"
    v = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{int(v)} B" if unit == "B" else f"{v:,.2f} {unit}"
        v /= 1024
    raise AssertionError("unreachable")


def estimate_ci(estimate, lo, hi, unit: str = "%") -> str:
    """An estimate with its CI, the way a figure is read: ``+7.33% [+2.99, +11.67]`` for a
    percentage, ``1.083× [0.763, 1.002]`` for a speedup (``unit`` 'x' or '×'), ``646.2 µs [640.1,
    650.3]`` for a latency ('us' or 'µs'); ``(no CI)`` when an end is missing, ``n/a`` without an
    estimate. Never ``-0.00``."""
    if _missing(estimate) or not math.isfinite(float(estimate)):
        return "n/a"
    has_ci = not (_missing(lo) or _missing(hi)) and math.isfinite(float(lo)) and math.isfinite(float(hi))
    if unit == "%":
        interval = f" [{_signed(float(lo), 2)}, {_signed(float(hi), 2)}]" if has_ci else " (no CI)"
        return f"{_signed(float(estimate), 2)}%{interval}"
    if unit in ("x", TIMES):
        interval = f" [{_plain(float(lo), 3)}, {_plain(float(hi), 3)}]" if has_ci else " (no CI)"
        return f"{_plain(float(estimate), 3)}{TIMES}{interval}"
    if unit in ("us", MICRO):
        write = number_format([float(estimate)] + ([float(lo), float(hi)] if has_ci else []))
        interval = f" [{write(float(lo))}, {write(float(hi))}]" if has_ci else " (no CI)"
        return f"{write(float(estimate))} {MICRO}{interval}"
    raise ValueError(f"estimate_ci: unknown unit {unit!r} (expected '%', 'x' or 'us')")


def rate(value, unit: str) -> str:
    """A throughput in decimal units: ``rate(3.2e12, 'B/s')`` is ``3.20 TB/s``,
    ``rate(5.1e14, 'FLOP/s')`` is ``510.0 TFLOP/s`` (3 significant digits, k/M/G/T/P prefixes)."""
    if _missing(value):
        return "n/a"
    v = float(value)
    for prefix in ("", "k", "M", "G", "T", "P"):
        if abs(v) < 1000 or prefix == "P":
            return f"{v:.{_decimals3(v)}f} {prefix}{unit}"
        v /= 1000
    raise AssertionError("unreachable")


def _decimals3(v: float) -> int:
    return 0 if v == 0 else max(0, 2 - math.floor(math.log10(abs(v))))


def seconds(value) -> str:
    """A duration: ``12.3 s``, ``1.05 ms`` below a second, ``42.0 µs`` below a millisecond."""
    if _missing(value):
        return "n/a"
    v = float(value)
    if abs(v) >= 1 or v == 0:
        return f"{v:,.{_decimals3(v) if abs(v) < 100 else 0}f} s"
    if abs(v) >= 1e-3:
        return f"{v * 1e3:.{_decimals3(v * 1e3)}f} ms"
    return f"{v * 1e6:.{_decimals3(v * 1e6)}f} {MICRO}"


# Column-name suffixes that say a column's unit: the header says it in words, and a size column's
# cells are written in binary units (``60.00 MiB``), never as raw bytes.
_SUFFIX_UNITS = (("_us", MICRO), ("_pct", "%"), ("_s", "s"), ("_mb", "MB"), ("_ns", "ns"))


def header(name: str) -> str:
    """A column's header for people: ``median_us`` -> ``median (µs)``, ``working_set_bytes`` ->
    ``working set``, ``gain_vs_global_pct`` -> ``gain vs global (%)``, ``shape_key`` -> ``shape key``."""
    for suffix, unit in _SUFFIX_UNITS:
        if name.endswith(suffix) and len(name) > len(suffix):
            return f"{name[: -len(suffix)].replace('_', ' ')} ({unit})"
    if name.endswith("_bytes") and len(name) > len("_bytes"):
        return name[: -len("_bytes")].replace("_", " ")
    return name.replace("_", " ")


def column_format(name: str, values) -> Callable[[object], str]:
    """The writer of a named column: sizes (``*_bytes``) in binary units, every other column by
    ``number_format``."""
    if name.endswith("_bytes"):
        return lambda v: nbytes(v) if _is_number(v) or _missing(v) else str(v)
    return number_format(values)


def _delta_style(unit: str, digits: int | None) -> tuple[int, str]:
    """(digits, suffix) of a difference: percentage points, a speedup's ×, else µs."""
    d, shown = (2, " pp") if unit == "%" else (3, TIMES) if unit in ("x", TIMES) else (1, f" {MICRO}")
    return (d if digits is None else digits), shown


def delta_ci(delta, lo, hi, unit: str = "%", digits: int | None = None) -> str:
    """A difference of two figures with its CI, always signed: ``+1.23 pp [+0.10, +2.36]`` for
    percentages (percentage points), ``-0.050× [-0.081, -0.019]`` for speedups, ``+3.0 µs [+0.1,
    +15.3]`` for latencies; ``n/a`` when missing."""
    if _missing(delta) or _missing(lo) or _missing(hi):
        return "n/a"
    digits, shown = _delta_style(unit, digits)
    a, b, c = (_signed(float(v), digits) for v in (delta, lo, hi))
    return f"{a}{shown} [{b}, {c}]"


def delta(value, unit: str = "%", digits: int | None = None) -> str:
    """A difference alone, always signed: ``+0.12 pp`` (of percentages), ``-0.050×`` (of speedups),
    ``+3.0 µs`` (of latencies)."""
    if _missing(value):
        return "n/a"
    digits, shown = _delta_style(unit, digits)
    return f"{_signed(float(value), digits)}{shown}"
