"""What a report section is made of (text, tables, figures); its numbers are written by
``headroom.core.format`` (``table`` gives each column one format and a header that says its unit).

Figures record what a reader can check about them: ``cells`` (a heatmap's cells; at most
``MAX_HEATMAP_CELLS``) and ``min_text_px`` (the smallest text drawn, in pixels at the PNG's dpi)."""

from __future__ import annotations

import base64
import io
from dataclasses import dataclass, field

import matplotlib

matplotlib.use("Agg")  # no display: figures are files
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from headroom.core import parallel  # noqa: E402
from headroom.core.format import (  # noqa: E402,F401  (the section modules write through model)
    EN_DASH,
    column_format,
    estimate_ci,
    fmt,
    header,
    nbytes,
    number_format,
    pct,
    rate,
    signed_interval,
    signed_range,
    speedup,
    us,
)

DPI = 100  # every figure's PNG
# Plain numbers on a log axis (12, 50, 200), not 2^10 or 2x10^1
PLAIN = FuncFormatter(lambda v, _: f"{v:g}")


def legend_outside(fig, ax) -> None:
    """The legend of ``ax``'s lines beside the axes (right of every panel, laid out by the constrained
    layout), so it never covers a bar, a point or an error bar."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside right upper", fontsize=LABEL_PT)


def log_axis(axis) -> None:
    """A log axis whose labelled ticks sit at 1, 2 and 5 x 10^k, so even a span under one decade
    carries labels, written as plain numbers."""
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(PLAIN)
    axis.set_minor_formatter(NullFormatter())


MAX_HEATMAP_CELLS = 150  # a heatmap a reader can read cell by cell
MIN_LABEL_PX = 11.0  # the smallest text a figure may draw
LABEL_PT = 9  # tick labels and cell labels: 12.5 px at DPI


@dataclass
class Table:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""
    collapsed: bool = False  # shown folded (HTML <details>): long data kept reachable, not in the way


@dataclass
class Figure:
    name: str  # file stem under figures/
    title: str
    png: bytes
    cells: int = 0  # heatmap cells (0: not a heatmap)
    min_text_px: float = 0.0  # the smallest text drawn, in pixels

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png).decode("ascii")


@dataclass
class Section:
    key: str
    title: str
    status: str = "ok"  # 'ok' | 'skipped'
    reason: str = ""
    lead: str = ""  # the sentence a section opens with, set apart in bold (the answer's verdict)
    lead_detail: str = ""  # the sentence after it, in the same paragraph
    text: list[str] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)


def table(title: str, df: pd.DataFrame, note: str = "", collapsed: bool = False) -> Table:
    writers = [column_format(str(c), df[c].tolist()) for c in df.columns]
    rows = [[w(v) for w, v in zip(writers, row, strict=True)] for row in df.itertuples(index=False)]
    return Table(title, [header(str(c)) for c in df.columns], rows, note, collapsed)


def min_text_px(fig) -> float:
    """The smallest non-empty text of a figure, in pixels at ``DPI``."""
    sizes = [t.get_fontsize() for t in fig.findobj(matplotlib.text.Text) if t.get_text().strip()]
    return min(sizes, default=0.0) * DPI / 72.0


def png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})  # layout is constrained: one draw
    plt.close(fig)
    return buf.getvalue()


def figure(name: str, title: str, fig, cells: int = 0) -> Figure:
    """A Figure from a matplotlib figure: its smallest text measured, then drawn to PNG."""
    px = min_text_px(fig)
    return Figure(name, title, png(fig), cells=cells, min_text_px=px)


def heatmaps(name: str, title: str, values: pd.DataFrame, labels: pd.DataFrame, cbar: str) -> list[Figure]:
    """Heatmaps of ``values`` (rows x columns), split by rows so that none holds more than
    ``MAX_HEATMAP_CELLS`` cells; each cell labelled with ``labels``' text at ``LABEL_PT``. The parts
    draw side by side in forked processes (:func:`headroom.core.parallel.forked_map`): the latency
    surface's dozen heatmaps were the longest part of the report."""
    per = max(1, MAX_HEATMAP_CELLS // max(1, values.shape[1]))
    chunks = [values.iloc[i : i + per] for i in range(0, len(values), per)]
    scale = float(np.nanmin(values.to_numpy())), float(np.nanmax(values.to_numpy()))
    draws = []
    for k, part in enumerate(chunks):
        suffix = f" ({k + 1} of {len(chunks)})" if len(chunks) > 1 else ""
        stem = name if len(chunks) == 1 else f"{name}_{k + 1}"
        draws.append((_heatmap, (stem, title + suffix, part, labels, scale, cbar)))
    return parallel.forked_map(draws)


def _heatmap(
    stem: str, title: str, part: pd.DataFrame, labels: pd.DataFrame, scale: tuple[float, float], cbar: str
) -> Figure:
    vmin, vmax = scale
    fig, ax = plt.subplots(
        layout="constrained",
        figsize=(max(6.0, 1.3 * part.shape[1] + 4.0), max(2.5, 0.34 * part.shape[0] + 1.6)),
    )
    im = ax.imshow(part.to_numpy(dtype=float), aspect="auto", cmap="viridis_r", vmin=vmin, vmax=vmax)
    ax.set_xticks(range(part.shape[1]), part.columns, rotation=30, ha="right", fontsize=LABEL_PT)
    ax.set_yticks(range(part.shape[0]), part.index, fontsize=LABEL_PT)
    mid = (vmin + vmax) / 2
    for (i, j), v in np.ndenumerate(part.to_numpy(dtype=float)):
        text = labels.loc[part.index[i], part.columns[j]]
        colour = "white" if np.isfinite(v) and v > mid else "black"
        ax.text(j, i, text, ha="center", va="center", fontsize=LABEL_PT, color=colour)
    ax.set_title(title, fontsize=LABEL_PT + 1)
    fig.colorbar(im, ax=ax).set_label(cbar, fontsize=LABEL_PT)
    return figure(stem, title, fig, cells=int(part.size))


def skipped(key: str, title: str, reason: str) -> Section:
    return Section(key, title, status="skipped", reason=reason)


def unusable(key: str, title: str, df: pd.DataFrame | None, why: str) -> Section | None:
    """The skipped section when ``df`` was not read (``why``) or has no usable rows (``all_skipped``);
    None when there is something to show."""
    if df is None:
        return skipped(key, title, why)
    reason = all_skipped(df)
    return skipped(key, title, reason) if reason else None


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
