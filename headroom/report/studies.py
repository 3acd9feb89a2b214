"""The cross-study page: every study of the catalog side by side.

In reading order: what to ship across the studies (per mode: the kernel every study ships, or, when
they disagree, one kernel that serves all within their run-to-run range, or per-trace
recommendations); a link to each study's report; one plot of every figure's delta between each
study and the first, with its CI; the verdicts with the reason and the environment each study was
measured in; each study's headline figures as its decision states them.

Everything comes from results/catalog.duckdb, opened the way `headroom query` opens it (hash
checked, no file reachable), so the page shows only verified bytes. It is written with the study
report's style sheet and number formats (headroom/report/templates/style.css, headroom.core.format)
as `studies.html` (the plot embedded) and `studies.md`, each with its BLAKE3 beside it.

Computed here, from catalog columns only: the delta of a figure between two studies (estimate
minus estimate; its CI half-width the root sum of squares of the two half-widths, as for
independent estimates) and a kernel's trace-weighted latency in another study (the mean over that
study's invocations of the portfolio's median_us, per run).

Studies of different kernel families (a study's trace names its family: docs/families.md; attention
without one) time different kernels on different shapes: what to ship is said per family, a delta is
taken against the first study of the same family only, and the verdicts table says each study's
family (where a catalog holds another family than attention).
"""

from __future__ import annotations

import html
import os
from pathlib import Path

import pandas as pd

from headroom.core import artifacts
from headroom.core import catalog as hcatalog
from headroom.core.contracts import ATTENTION
from headroom.core.format import delta_ci, estimate_ci, fmt, signed_range
from headroom.report import ship as hship

ENVIRONMENT = ["device", "gpu_name", "driver", "cuda", "torch", "triton", "environment_id"]
STYLE = Path(__file__).parent / "templates" / "style.css"
# Columns of a decision row that are not figures.
_NOT_FIGURES = {"study", "verdict", "reason"}
FIGURE_COLUMNS = ("mode", "figure", "unit", "estimate", "ci_low", "ci_high", "threshold", "state")
# the figures whose deltas between studies the page plots: the decided ones and the kernel's
DELTA_FIGURES = (
    "gap_to_oracle",
    "policy_gain",
    "phase_split_gain",
    "fusion_speedup",
    "kernel_vs_best_unfused",
)


def _table(con, name: str) -> pd.DataFrame:
    known = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    return con.execute(f"SELECT * FROM {name}").df() if name in known else pd.DataFrame(columns=["study"])


def _weighted(con) -> pd.DataFrame:
    """(study, mode, run, candidate) -> trace-weighted latency (mean of median_us over invocations)."""
    known = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "portfolio" not in known:
        return pd.DataFrame(columns=["study", "mode", "run", "candidate", "us"])
    cols = {r[0] for r in con.execute("DESCRIBE portfolio").fetchall()}
    mode = "mode" if "mode" in cols else "'eager'"
    return con.execute(
        f"SELECT study, {mode} AS mode, run, candidate, avg(median_us) AS us FROM portfolio GROUP BY ALL"
    ).df()


def _families(con) -> dict[str, str]:
    """{study: the kernel family its trace names} (attention where the trace has no family)."""
    known = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
    if "trace" not in known or "family" not in {r[0] for r in con.execute("DESCRIBE trace").fetchall()}:
        return {}
    rows = con.execute("SELECT study, any_value(family) FROM trace GROUP BY study").fetchall()
    return {str(s): str(f) for s, f in rows if f is not None}


def collect(catalog_path: str | os.PathLike) -> dict:
    """summary (one row per study: verdict, reason, environment; its kernel family where the catalog
    holds another than attention), figures ({study: its headline figures}), ships ({study: [Ship]}),
    weighted (trace-weighted latency per study, mode, run, candidate), families ({study: its kernel
    family})."""
    con = hcatalog.open_readonly(catalog_path)
    try:
        names = [r[0] for r in con.execute("SELECT DISTINCT study FROM artifacts ORDER BY 1").fetchall()]
        decision, env = _table(con, "decision"), _table(con, "environment")
        rec, pe = _table(con, "recommendation"), _table(con, "policy_eval")
        weighted = _weighted(con)
        recorded = _families(con)
    finally:
        con.close()
    families = {study: recorded.get(study, ATTENTION) for study in names}
    rows, figures, ships = [], {}, {}
    for study in names:
        d = decision[decision["study"] == study]
        e = env[env["study"] == study]
        row = {"study": study}
        row["verdict"] = str(d["verdict"].iloc[0]) if len(d) and "verdict" in d else "not run"
        row["reason"] = str(d["reason"].iloc[0]) if len(d) and "reason" in d else ""
        for col in ENVIRONMENT:
            row[col] = fmt(e[col].iloc[0]) if len(e) and col in e else ""
        rows.append(row)
        figures[study] = _figures(d)
        ships[study] = hship.what_to_ship(_of(rec, study), _of(decision, study), _of(pe, study))
    summary = pd.DataFrame(rows, columns=["study", "verdict", "reason", *ENVIRONMENT])
    if set(families.values()) != {ATTENTION}:  # another family's study: say whose each one is
        summary.insert(1, "kernel family", [families[s] for s in summary["study"]])
    return {
        "summary": summary,
        "figures": figures,
        "ships": ships,
        "weighted": weighted,
        "families": families,
    }


def by_family(studies: list[str], families: dict[str, str] | None) -> dict[str, list[str]]:
    """{kernel family: its studies, in order}: attention's first, then the others by name."""
    families = families or {}
    groups: dict[str, list[str]] = {}
    for s in studies:
        groups.setdefault(families.get(s, ATTENTION), []).append(s)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0] != ATTENTION, kv[0])))


def _of(table: pd.DataFrame, study: str) -> pd.DataFrame | None:
    rows = table[table["study"] == study] if "study" in table.columns else table.iloc[0:0]
    return rows if len(rows) else None


def _figures(d: pd.DataFrame) -> pd.DataFrame:
    if {"figure", "estimate"} <= set(d.columns):  # one row per (mode, figure)
        return d[[c for c in FIGURE_COLUMNS if c in d]].reset_index(drop=True)
    if len(d):  # one row, a column per figure statistic (a decision of before v2)
        first = d.iloc[0]
        return pd.DataFrame(
            [{"figure": c, "value": fmt(first[c])} for c in d.columns if c not in _NOT_FIGURES]
        )
    return pd.DataFrame(columns=["figure", "value"])


# -- what to ship across studies ---------------------------------------------------------------
def ratios(weighted: pd.DataFrame, study: str, mode: str, kernel: str, own: str) -> pd.Series:
    """Per run of `study`: the trace-weighted latency of `kernel` over that of `own` (its own pick)."""
    w = weighted[(weighted["study"] == study) & (weighted["mode"] == mode)]
    piv = w.pivot_table(index="run", columns="candidate", values="us")
    if kernel not in piv.columns or own not in piv.columns:
        return pd.Series(dtype=float)
    return (piv[kernel] / piv[own]).dropna()


def ship_sentences(
    ships: dict[str, list], weighted: pd.DataFrame, families: dict[str, str] | None = None
) -> list[str]:
    """Per mode: what to ship when every study is served by one kernel, and when none is; per kernel
    family where the studies are of several (each sentence then names its family)."""
    groups = by_family(list(ships), families)
    if len(groups) > 1:
        return [
            f"Kernel family {family}, {line}"
            for family, names in groups.items()
            for line in ship_sentences({s: ships[s] for s in names}, weighted)
        ]
    picks: dict[str, dict[str, str]] = {}
    for study, xs in ships.items():
        for x in xs:
            if "@" not in x.scope and x.ship == "kernel":
                picks.setdefault(x.scope, {})[study] = x.kernel
    if not picks:
        return ["What to ship: no study states a kernel (no recommendation, kernel rows or policy_eval)."]
    return [_mode_sentence(mode, by_study, weighted) for mode, by_study in sorted(picks.items())]


def _mode_sentence(mode: str, by_study: dict[str, str], weighted: pd.DataFrame) -> str:
    kernels = sorted(set(by_study.values()))
    listed = "; ".join(f"{s} → {k}" for s, k in by_study.items())
    if len(kernels) == 1:
        return f"{mode} mode: every study ships {kernels[0]} ({', '.join(by_study)})."
    costs = {k: {s: ratios(weighted, s, mode, k, own) for s, own in by_study.items()} for k in kernels}
    serves = [k for k in kernels if all(len(r) and r.min() <= 1.0 for r in costs[k].values())]
    if serves:  # the one whose worst median cost over the studies is least
        k = min(serves, key=lambda c: max(float(r.median()) for r in costs[c].values()))
        where = "; ".join(
            f"on {s}: {signed_range(r, '×', 3)} of {by_study[s]}'s latency"
            for s, r in costs[k].items()
            if by_study[s] != k
        )
        return (
            f"{mode} mode: the studies pick different kernels ({listed}), but one serves all within "
            f"their run-to-run range: ship {k} ({where})."
        )
    return (
        f"{mode} mode: the studies disagree beyond their run-to-run range, so ship per trace: {listed} "
        f"({'; '.join(_worst(k, costs[k], by_study) for k in kernels)})."
    )


def _worst(kernel: str, costs: dict[str, pd.Series], by_study: dict[str, str]) -> str:
    """Where a kernel costs most against another study's own pick (or where it was never timed)."""
    others = {s: r for s, r in costs.items() if by_study[s] != kernel}
    untimed = sorted(s for s, r in others.items() if not len(r))
    if untimed:
        return f"{kernel} was not timed on {', '.join(untimed)}"
    s, r = max(others.items(), key=lambda kv: float(kv[1].median()))
    return f"{kernel} on {s}: {signed_range(r, '×', 3)} of {by_study[s]}'s latency"


# -- per-figure deltas -------------------------------------------------------------------------
DELTA_COLUMNS = ["study", "versus", "mode", "figure", "unit", "delta", "ci_low", "ci_high"]


def deltas(figures: dict[str, pd.DataFrame], families: dict[str, str] | None = None) -> pd.DataFrame:
    """Each study's figure minus the first study's (same mode and figure), with the CI of the delta;
    where the studies are of several kernel families, minus the first study of its own family."""
    groups = by_family(list(figures), families)
    if len(groups) > 1:
        parts = [deltas({s: figures[s] for s in names}) for names in groups.values()]
        parts = [p for p in parts if len(p)]
        return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=DELTA_COLUMNS)
    shaped = {
        s: f for s, f in figures.items() if {"figure", "estimate", "ci_low", "ci_high"} <= set(f.columns)
    }
    if len(shaped) < 2:
        return pd.DataFrame(columns=DELTA_COLUMNS)
    base_name, *others = list(shaped)
    base = shaped[base_name].set_index(["mode", "figure"])
    rows = []
    for study in others:
        for r in shaped[study].itertuples():
            if r.figure not in DELTA_FIGURES or (r.mode, r.figure) not in base.index or pd.isna(r.ci_low):
                continue
            b = base.loc[(r.mode, r.figure)]
            if pd.isna(b["ci_low"]):
                continue
            half = (((r.ci_high - r.ci_low) / 2) ** 2 + ((b["ci_high"] - b["ci_low"]) / 2) ** 2) ** 0.5
            delta = float(r.estimate - b["estimate"])
            unit = str(getattr(r, "unit", "%"))
            rows.append((study, base_name, r.mode, r.figure, unit, delta, delta - half, delta + half))
    return pd.DataFrame(rows, columns=DELTA_COLUMNS)


def delta_figure(dl: pd.DataFrame):
    """One plot: every percentage figure's delta with its CI, a row per (mode, figure), a colour per study."""
    from headroom.report.model import LABEL_PT, figure, plt

    pct = dl[dl["unit"] == "%"]
    if pct.empty:
        return None
    keys = list(dict.fromkeys(zip(pct["mode"], pct["figure"], strict=True)))
    studies = list(dict.fromkeys(pct["study"]))
    fig, ax = plt.subplots(layout="constrained", figsize=(8, 1.5 + 0.32 * len(keys)))
    for k, study in enumerate(studies):
        g = pct[pct["study"] == study].set_index(["mode", "figure"])
        ys = [
            i + (k - (len(studies) - 1) / 2) * 0.8 / len(studies)
            for i, key in enumerate(keys)
            if key in g.index
        ]
        rows = [g.loc[key] for key in keys if key in g.index]
        x = [float(r["delta"]) for r in rows]
        err = [[x_ - float(r["ci_low"]) for x_, r in zip(x, rows, strict=True)],
               [float(r["ci_high"]) - x_ for x_, r in zip(x, rows, strict=True)]]  # fmt: skip
        versus = g["versus"].iloc[0]  # the first study (of the study's kernel family)
        ax.errorbar(x, ys, xerr=err, fmt="o", ms=4, capsize=2, label=f"{study} − {versus}")
    ax.axvline(0, color="black", lw=0.8)
    ax.set_yticks(range(len(keys)), [f"{m}: {f}" for m, f in keys], fontsize=LABEL_PT)
    ax.invert_yaxis()
    ax.set_xlabel("delta (percentage points), 95% CI", fontsize=LABEL_PT)
    ax.tick_params(labelsize=LABEL_PT)
    ax.legend(fontsize=LABEL_PT, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2)
    return figure("studies_deltas", "Per-figure deltas between studies, with CIs", fig)


# -- the page ----------------------------------------------------------------------------------
def _cell(v) -> str:
    return fmt(v) if not isinstance(v, str) else v


def _written(df: pd.DataFrame) -> pd.DataFrame:
    """A figures frame with estimate [CI] written by the one formatter."""
    if "estimate" not in df.columns:
        return df
    unit = df["unit"] if "unit" in df.columns else pd.Series(["%"] * len(df), index=df.index)
    out = df.drop(columns=[c for c in ("estimate", "ci_low", "ci_high", "unit") if c in df.columns])
    out.insert(
        2 if "mode" in df.columns else 1,
        "estimate [CI]",
        [estimate_ci(e, lo, hi, u if u in ("%", "x", "us") else "%") for e, lo, hi, u in
         zip(df["estimate"], df["ci_low"], df["ci_high"], unit, strict=True)],
    )  # fmt: skip
    return out


def _md_table(df: pd.DataFrame) -> str:
    cell = lambda v: _cell(v).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(map(str, df.columns)) + " |", "|" + " --- |" * len(df.columns)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in df.itertuples(index=False)]
    return "\n".join(lines)


def _html_table(df: pd.DataFrame) -> str:
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in df.columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(v))}</td>" for v in row) + "</tr>"
        for row in df.itertuples(index=False)
    )
    return f"<div class='scroll'><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>"


def build(
    catalog_path: str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    title: str = "headroom: studies side by side",
) -> dict[str, Path]:
    """Write `studies.html` and `studies.md` under `out_dir` from the catalog; returns their paths."""
    c = collect(catalog_path)
    md, page = _head(title)
    _add(
        md,
        page,
        "What to ship across the studies",
        text=ship_sentences(c["ships"], c["weighted"], c["families"]),
    )
    links = [(s, f"../{s}/report/index.html") for s in c["summary"]["study"]]
    md += ["## Each study's report", "", *[f"- [{s}]({u})" for s, u in links], ""]
    page += ["<h2>Each study's report</h2><ul>"]
    page += [f"<li><a href='{html.escape(u)}'>{html.escape(s)}</a></li>" for s, u in links] + ["</ul>"]
    dl = deltas(c["figures"], c["families"])
    several = len(set(c["families"].values())) > 1
    _add(md, page, "Per-figure deltas between studies", text=_delta_text(dl, several), df=_written_deltas(dl))
    if (fig := delta_figure(dl)) is not None:
        page.append(f"<figure><img src='{fig.data_uri}' alt='{html.escape(fig.title)}'></figure>")
        md += ["(The plot of these deltas is embedded in studies.html.)", ""]
    _add(md, page, "Verdicts and environments", df=c["summary"])
    for study, f in c["figures"].items():
        _add(
            md, page, f"{study}: headline figures", df=_written(f) if len(f) else None, empty="(no decision)"
        )
    page.append("</body></html>\n")
    out = Path(out_dir)
    paths = {"html": out / "studies.html", "md": out / "studies.md"}
    artifacts.write_file(paths["html"], "\n".join(page).encode())
    artifacts.write_file(paths["md"], "\n".join(md).encode())
    return paths


def _head(title: str) -> tuple[list[str], list[str]]:
    page = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>{html.escape(title)}</title>",
        f"<style>\n{STYLE.read_text(encoding='utf-8')}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    return [f"# {title}", ""], page


def _add(
    md: list, page: list, heading: str, text=(), df: pd.DataFrame | None = None, empty: str = ""
) -> None:
    md += [f"## {heading}", ""]
    page.append(f"<h2>{html.escape(heading)}</h2>")
    for line in text:
        md += [line, ""]
        page.append(f"<p>{html.escape(line)}</p>")
    if df is None and empty:
        md += [empty, ""]
        page.append(f"<p>{html.escape(empty)}</p>")
    elif df is not None and len(df.columns):
        md += [_md_table(df), ""]
        page.append(_html_table(df))


def _delta_text(dl: pd.DataFrame, several_families: bool = False) -> list[str]:
    if dl.empty and several_families:
        return ["No two studies of the same kernel family have per-figure decisions with CIs: no deltas."]
    if dl.empty:
        return ["No two studies have per-figure decisions with CIs: no deltas."]
    bases = list(dict.fromkeys(dl["versus"]))
    versus = (
        f"{bases[0]}'s" if len(bases) == 1 else f"the first study's of its kernel family ({', '.join(bases)})"
    )
    return [
        f"Each study's figure minus {versus}, same mode and figure (the decided figures, the "
        "phase split, the fusion speedup and the shipped kernel's speedup); the CI of a delta is "
        "computed here as the root sum of squares of the two CI half-widths (independent studies)."
    ]


def _written_deltas(dl: pd.DataFrame) -> pd.DataFrame:
    if dl.empty:
        return pd.DataFrame()
    return pd.DataFrame(
        {
            "study": dl["study"] + " − " + dl["versus"],
            "mode": dl["mode"],
            "figure": dl["figure"],
            "delta [CI]": [
                delta_ci(d, lo, hi, u)
                for d, lo, hi, u in zip(dl["delta"], dl["ci_low"], dl["ci_high"], dl["unit"], strict=True)
            ],
        }
    )
