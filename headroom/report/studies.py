"""The cross-study page: every study of the catalog side by side.

One table of verdicts (with the reason) and the environment each study was measured in (device,
GPU, driver, CUDA, torch, Triton, environment id), then each study's headline figures as its
decision artifact states them. Everything comes from results/catalog.duckdb, opened the way
`headroom query` opens it (hash checked, no file reachable), so the page shows only verified
bytes. Written as `studies.html` and `studies.md`, each with its BLAKE3 beside it.
"""

from __future__ import annotations

import html
import math
import os
from pathlib import Path

import pandas as pd

from headroom.core import artifacts
from headroom.core import catalog as hcatalog

ENVIRONMENT = ["device", "gpu_name", "driver", "cuda", "torch", "triton", "environment_id"]
# Columns of a decision row that are not figures.
_NOT_FIGURES = {"study", "verdict", "reason"}


def _table(con, name: str) -> pd.DataFrame:
    known = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    return con.execute(f"SELECT * FROM {name}").df() if name in known else pd.DataFrame(columns=["study"])


def _fmt(v) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)


def collect(catalog_path: str | os.PathLike) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """(one row per study: verdict, reason, environment; {study: its headline figures})."""
    con = hcatalog.open_readonly(catalog_path)
    try:
        names = [r[0] for r in con.execute("SELECT DISTINCT study FROM artifacts ORDER BY 1").fetchall()]
        decision, env = _table(con, "decision"), _table(con, "environment")
    finally:
        con.close()
    rows, figures = [], {}
    for study in names:
        d = decision[decision["study"] == study]
        e = env[env["study"] == study]
        row = {"study": study}
        row["verdict"] = str(d["verdict"].iloc[0]) if len(d) and "verdict" in d else "not run"
        row["reason"] = str(d["reason"].iloc[0]) if len(d) and "reason" in d else ""
        for col in ENVIRONMENT:
            row[col] = _fmt(e[col].iloc[0]) if len(e) and col in e else ""
        rows.append(row)
        if {"figure", "estimate"} <= set(d.columns):  # one row per (mode, figure)
            keep = [
                c for c in ("mode", "figure", "estimate", "ci_low", "ci_high", "threshold", "state") if c in d
            ]
            figures[study] = d[keep].reset_index(drop=True)
        elif len(d):  # one row, a column per figure statistic
            first = d.iloc[0]
            figures[study] = pd.DataFrame(
                [{"figure": c, "value": _fmt(first[c])} for c in d.columns if c not in _NOT_FIGURES]
            )
        else:
            figures[study] = pd.DataFrame(columns=["figure", "value"])
    return pd.DataFrame(rows, columns=["study", "verdict", "reason", *ENVIRONMENT]), figures


def _md_table(df: pd.DataFrame) -> str:
    cell = lambda v: _fmt(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(df.columns) + " |", "|" + " --- |" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def _html_table(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in row) + "</tr>"
        for row in df.itertuples(index=False)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def build(
    catalog_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    title: str = "headroom: studies side by side",
) -> dict[str, Path]:
    """Write `studies.html` and `studies.md` under `out_dir` from the catalog; returns their paths."""
    summary, figures = collect(catalog_path)
    md = [f"# {title}", "", "## Verdicts and environments", "", _md_table(summary), ""]
    page = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin:1em 0}"
        "td,th{border:1px solid #ccc;padding:.25em .5em;text-align:left}</style></head><body>",
        f"<h1>{html.escape(title)}</h1><h2>Verdicts and environments</h2>",
        _html_table(summary),
    ]
    for study, fig in figures.items():
        md += [f"## {study}: headline figures", "", _md_table(fig) if len(fig) else "(no decision)", ""]
        page += [
            f"<h2>{html.escape(study)}: headline figures</h2>",
            _html_table(fig) if len(fig) else "<p>(no decision)</p>",
        ]
    page.append("</body></html>\n")
    out = Path(out_dir)
    paths = {"html": out / "studies.html", "md": out / "studies.md"}
    artifacts.write_file(paths["html"], "\n".join(page).encode())
    artifacts.write_file(paths["md"], "\n".join(md).encode())
    return paths
