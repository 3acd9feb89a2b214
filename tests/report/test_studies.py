"""The cross-study page: verdicts, environments and headline figures of every study side by side."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from headroom.core import artifacts, layout
from headroom.report import model, studies
from headroom.report import ship as hship
from tests.core.test_catalog import _write, build, make_study


@pytest.fixture
def results(tmp_path):
    project = tmp_path / "proj"
    for name, verdict, gpu in [("default", "continue", "NVIDIA H200"), ("l40s", "stop", "NVIDIA L40S")]:
        folder = project / "results" / name
        make_study(project, folder, verdict)
        env = {
            "device": "cuda",
            "gpu_name": gpu,
            "driver": "580.1",
            "cuda": "13.0",
            "torch": "2.13.0",
            "triton": "3.6.0",
            "environment_id": f"id-{name}",
        }
        _write(folder / "environment.parquet", pd.DataFrame([env]), "environment")
    return build(project)


def test_page_sets_studies_side_by_side_with_their_environment(results):
    paths = studies.build(results / layout.CATALOG_NAME, results / "report")
    md = paths["md"].read_text()
    assert (
        "| default | continue | because | cuda | NVIDIA H200 | 580.1 | 13.0 | 2.13.0 | 3.6.0 | id-default |"
        in md
    )
    assert "| l40s | stop | because | cuda | NVIDIA L40S |" in md
    assert "## l40s: headline figures" in md
    page = paths["html"].read_text()
    assert "<td>NVIDIA L40S</td>" in page and "<td>continue</td>" in page
    for p in paths.values():
        assert artifacts.verify(p)  # recorded, so `headroom verify` covers the page


def test_page_escapes_what_it_shows(results, tmp_path):
    project = results.parent
    _write(
        results / "evil" / "decision.parquet",
        pd.DataFrame({"verdict": ["stop"], "reason": ["<script>alert(1)</script>"]}),
        "decision",
    )
    results = build(project)
    page = studies.build(results / layout.CATALOG_NAME, tmp_path / "out")["html"].read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_page_refuses_a_changed_catalog(results, tmp_path):
    cat = results / layout.CATALOG_NAME
    data = bytearray(cat.read_bytes())
    data[-50] ^= 1
    cat.write_bytes(bytes(data))
    with pytest.raises(artifacts.ArtifactHashError, match="catalog.duckdb"):
        studies.build(cat, tmp_path / "out")


# -- what to ship when studies disagree, on two hand-made studies --------------------------------
def _study(project, name: str, kernel: str, latency: dict[str, tuple[float, float]], gap: float):
    """A study whose decision ships `kernel` in graph mode; latency: candidate -> (run 1, run 2) µs."""
    folder = project / "results" / name
    rel = lambda p: p.relative_to(project).as_posix()  # noqa: E731
    trace = folder / "trace.parquet"
    h = _write(trace, pd.DataFrame({"invocation": [0, 1], "phase": ["decode", "decode"]}), "trace")
    runs = {}
    for run in (1, 2):
        rows = [
            {"run": run, "mode": "graph", "invocation": inv, "candidate": c, "median_us": us[run - 1]}
            for c, us in latency.items()
            for inv in (0, 1)
        ]
        path = folder / "portfolio" / f"run-{run}.parquet"
        runs[rel(path)] = _write(path, pd.DataFrame(rows), "portfolio", {rel(trace): h})
    decision = pd.DataFrame(
        {
            "mode": "graph",
            "figure": ["gap_to_oracle", "kernel_vs_best_unfused"],
            "unit": ["%", "x"],
            "estimate": [gap, 1.1],
            "ci_low": [gap - 1.0, 1.05],
            "ci_high": [gap + 1.0, 1.15],
            "kernel": [None, kernel],
            "runs_agree": [None, 2.0],
            "runs": [2.0, 2.0],
            "verdict": "stop",
            "reason": "because",
        }
    )
    _write(folder / "decision.parquet", decision, "decision", runs)


def _page(tmp_path, b_latency):
    project = tmp_path / "proj"
    _study(project, "a-synthetic", "t0-fused", {"t0-fused": (10.0, 10.2), "t1-fused": (11.0, 11.22)}, 0.5)
    _study(project, "b-real", "t1-fused", b_latency, 2.0)
    results = build(project)
    return studies.build(results / layout.CATALOG_NAME, results / "report")


def test_studies_that_disagree_get_one_kernel_when_it_serves_all_within_their_range(tmp_path):
    # on b-real, t0-fused is 0.990-1.020x t1-fused's latency: within the run-to-run range
    md = _page(tmp_path, {"t0-fused": (9.9, 10.2), "t1-fused": (10.0, 10.0)})["md"].read_text()
    assert (
        "graph mode: the studies pick different kernels (a-synthetic → t0-fused; b-real → t1-fused), "
        "but one serves all within their run-to-run range: ship t0-fused (on b-real: 0.990–1.020× of "
        "t1-fused's latency)." in md
    )


def test_studies_that_disagree_beyond_their_range_get_per_trace_recommendations(tmp_path):
    paths = _page(tmp_path, {"t0-fused": (11.0, 11.5), "t1-fused": (10.0, 10.0)})
    md = paths["md"].read_text()
    assert (
        "graph mode: the studies disagree beyond their run-to-run range, so ship per trace: "
        "a-synthetic → t0-fused; b-real → t1-fused (t0-fused on b-real: 1.100–1.150× of t1-fused's "
        "latency; t1-fused on a-synthetic: 1.100× of t0-fused's latency)." in md
    )
    assert "(no decision)" not in md
    # the page links each study's report, plots the deltas with CIs, and shares the report's style
    assert "- [b-real](../b-real/report/index.html)" in md
    assert "| b-real − a-synthetic | graph | gap_to_oracle | +1.50 pp [+0.09, +2.91] |" in md
    page = paths["html"].read_text()
    assert "<a href='../a-synthetic/report/index.html'>a-synthetic</a>" in page
    assert "data:image/png;base64," in page
    assert (Path(studies.__file__).parent / "templates" / "style.css").read_text() in page
    assert md.index("## What to ship across the studies") < md.index("## Verdicts and environments")


def test_studies_that_agree_ship_the_one_kernel_and_the_plot_keeps_readable_labels():
    ships = {s: [hship.Ship("graph", "t0-fused"), hship.Ship("graph@decode-only", "t9")] for s in ("a", "b")}
    assert studies.ship_sentences(ships, pd.DataFrame()) == ["graph mode: every study ships t0-fused (a, b)."]
    figs = {
        s: pd.DataFrame(
            {
                "mode": "graph",
                "figure": ["gap_to_oracle"],
                "unit": "%",
                "estimate": [e],
                "ci_low": [e - 1],
                "ci_high": [e + 1],
            }
        )
        for s, e in (("a", 0.5), ("b", 2.0))
    }
    dl = studies.deltas(figs)
    assert dl[["study", "versus", "delta"]].values.tolist() == [["b", "a", 1.5]]
    fig = studies.delta_figure(dl)
    assert fig.min_text_px >= model.MIN_LABEL_PX
