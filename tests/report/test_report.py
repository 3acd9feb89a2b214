"""The report from hand-built artifacts: verdict first, figures embedded, skipped inputs explicit,
and the HTML opens in headless Chromium with its figures drawn."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest

from headroom.analysis import decision, figures, policies, roofline
from headroom.report import build as report
from headroom.report import model
from headroom.report.sections import correctness
from tests import analysis_sets as S

SEQ = "ABCA" * 4


def _inputs(device: str) -> dict:
    tr = S.trace(SEQ)

    def lat(key, tile, fused, run, mode, inv):
        return S.BASE_US[key] * (0.8 if fused else 1.0) * (1.0 + 0.05 * tile) * (1.0 + 0.01 * run)

    modes = ("eager", "graph") if device == "cuda" else ("eager",)
    tm = S.timings(tr, lat, modes=modes, std_us=1.0)
    pe = policies.evaluate(tr, tm, S.lifecycle(), bootstrap_resamples=100, random_draws=10)
    cands = S.candidates()
    corr = pd.DataFrame(
        [
            {
                "candidate": c,
                "shape_key": k,
                "rel_err": 1e-3,
                "max_abs_err": 1e-2,
                "tolerance": 5e-3,
                "nan_count": 0,
                "unwritten_count": 0,
                "passed": not (c == "t2-fused" and k == "B"),
            }
            for c in cands["candidate"]
            for k in "ABC"
        ]
    )
    if device == "cuda":
        gs, cal = S.graph_sweep(), S.calibration()
    else:
        gs = S.graph_sweep(status="skipped")
        cal = S.calibration().assign(
            value=np.nan, status="skipped", reason="calibration needs a GPU (device: interpret)"
        )
    env = S.environment(device)
    return {
        "decision": decision.decide(
            figures.study_figures(tr, tm, S.lifecycle(), bootstrap_resamples=100, random_draws=10), gs, env
        ),
        "environment": env,
        "trace": tr,
        "candidates": cands,
        "correctness": corr,
        "portfolio": tm,
        "lifecycle": S.lifecycle(),
        "graph_sweep": gs,
        "calibration": cal,
        "policy_eval": pe,
        "factorial": policies.factorial(pe),
        "roofline": roofline.predict(tr, cands, cal, l2_bytes=50 * 2**20, timings=tm),
    }


READ = [("results/trace.parquet", "ab" * 32), ("results/policy_eval.parquet", "cd" * 32)]


@pytest.fixture(scope="module")
def gpu_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu")
    inputs = _inputs("cuda")
    bench = {"policies": pd.DataFrame({"s": [1.25], "max_rss": [88.0]})}
    paths = report.build(inputs, READ, out, title="test study", benchmarks=bench)
    return inputs, out, paths


def test_gpu_report_leads_with_the_verdict_and_embeds_every_figure(gpu_report):
    inputs, out, paths = gpu_report
    md = (out / "report.md").read_text()
    html = (out / "index.html").read_text()
    verdict = inputs["decision"].iloc[0]
    # fused is 20% faster on every shape of the trace: one fused kernel to ship (the kernel
    # recommendation), no headroom for a portfolio (decision v3 never turns fusion into continue)
    assert verdict.verdict == "stop"
    assert md.splitlines()[0] == "# test study"
    assert md.splitlines()[2].startswith("**Verdict: stop.** " + verdict.reason[:40])
    assert "Kernel recommendation, graph mode: ship t" in md and "fused" in md
    assert md.count("**Verdict:") == 1 and html.count('id="verdict"') == 1  # the banner, said once
    assert "not GPU measurements" not in md
    figures = sorted((out / "figures").glob("*.png"))
    names = {f.stem for f in figures}
    assert {
        "latency_surface_eager",
        "latency_surface_graph",
        "policy_gains",
        "fusion_speedup_regimes",
        "roofline_predicted_vs_measured",
        "made_of",
    } <= names
    # the corrected answer leads: the decision section (and its picture) before every other section
    assert html.index('id="decision"') < html.index('id="surface"') if 'id="surface"' in html else True
    assert md.index("What the headroom is made of") < md.index("Latency surface")
    # self-contained: each figure's bytes are in the HTML, none is linked
    embedded = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert len(embedded) == len(figures)
    assert {base64.b64decode(e) for e in embedded} == {f.read_bytes() for f in figures}
    assert "figures/" not in html
    for f in figures:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"](figures/{f.name})" in md


def test_gpu_report_numbers_come_from_the_artifacts(gpu_report):
    inputs, out, _ = gpu_report
    md = (out / "report.md").read_text()
    d = inputs["decision"]
    for r in d[d["decided"]].itertuples():  # every decided figure, as the decision stage wrote it
        assert decision.format_ci(r.estimate, r.ci_low, r.ci_high, r.unit) in md
    fac = inputs["factorial"]
    assert model.number_format(fac.fusion_gain_pct.tolist())(fac.fusion_gain_pct.iloc[0]) in md
    assert "e+0" not in md and "e-0" not in md  # no scientific notation in any table
    assert "Excluded candidates (failed at least one case): t2-fused." in md
    assert "| policies | 1.25 | 88 |" in md  # stage wall time from the benchmark file
    for path, digest in READ:
        assert f"| {path} | `{digest}` |" in md
    assert "break_even_invocations" in md and "never" in md  # flat surface: adaptive never pays back


def test_cpu_report_says_so_first_and_renders_skipped_inputs(tmp_path):
    inputs = _inputs("interpret")
    assert inputs["decision"].iloc[0].verdict == "no-decision"
    report.build(inputs, READ, tmp_path, title="cpu study")
    md = (tmp_path / "report.md").read_text()
    first = md.splitlines()[0]
    assert "not GPU measurements" in first and "no-decision" in first
    html = (tmp_path / "index.html").read_text()
    body = html[html.index("<body>") :]
    assert body.index("not GPU measurements") < body.index("<h1>")
    assert "skipped: CUDA Graphs need a GPU (device: interpret)" in md
    assert "not calibrated: calibration needs a GPU (device: interpret)" in md  # roofline, no constants
    assert "skipped: no Snakemake benchmark files" in md


def test_missing_inputs_render_as_skipped_not_a_crash(tmp_path):
    inputs = {"environment": S.environment("interpret"), "decision": None}
    report.build(inputs, [], tmp_path, missing={"graph_sweep": "not run in this replay"})
    md = (tmp_path / "report.md").read_text()
    assert md.splitlines()[0].startswith("**These timings are not GPU measurements (device: interpret)")
    assert "skipped: not run in this replay" in md
    assert "skipped: policy_eval artifact not provided" in md
    assert "skipped: no artifact list was given" in md
    with pytest.raises(ValueError, match="unknown artifact name"):
        report.build({"polices": None}, [], tmp_path)


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if path := shutil.which(name):
            return path
    return None


def _screenshot(browser: str, html_path, png_path) -> np.ndarray:
    cmd = [
        browser,
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--allow-file-access-from-files",
        "--window-size=1200,3200",
        f"--screenshot={png_path}",
        html_path.as_uri(),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    return mpimg.imread(png_path)[..., :3]


def _colourful_pixels(img: np.ndarray) -> int:
    """Pixels of saturated colour: text and table borders are grey, plotted data is not."""
    return int(((img.max(axis=2) - img.min(axis=2)) > 0.25).sum())


@pytest.mark.skipif(
    _chromium() is None, reason="headless Chromium not installed (apt-get install -y chromium)"
)
def test_html_opens_in_headless_chromium_and_its_figures_render(gpu_report, tmp_path):
    _, out, _ = gpu_report
    browser = _chromium()
    shot = _screenshot(browser, out / "index.html", tmp_path / "report.png")
    assert shot.shape[0] >= 2000 and shot.std() > 0.05  # not a blank page
    # the same page with the figures' bytes removed: whatever colour remains is text and borders
    html = (out / "index.html").read_text()
    bare = tmp_path / "bare.html"
    bare.write_text(re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "", html))
    without = _screenshot(browser, bare, tmp_path / "bare.png")
    assert _colourful_pixels(shot) > _colourful_pixels(without) + 20_000


def test_correctness_section_reads_passed_failed_and_error_statuses():
    c = pd.DataFrame(
        {
            "candidate": ["a", "a", "b"],
            "shape_key": ["s1", "s2", "s1"],
            "rel_err": [1e-3, 2e-3, float("nan")],
            "max_abs_err": [1e-2, 1e-2, float("nan")],
            "nan_count": [0, 0, -1],
            "unwritten_count": [0, 0, -1],
            "passed": [True, True, False],
            "status": ["passed", "passed", "error"],
            "reason": ["", "", "no kernel"],
        }
    )
    section = correctness.section(c, "")
    text = " ".join(section.text)
    assert "skipped" not in text and "Excluded candidates (failed at least one case): b." in text


def test_one_number_format_per_column_and_readable_signed_ranges():
    df = pd.DataFrame({"us": [37390.4, 199430.0, 12.5], "pct": [0.5, 12.25, -3.0], "n": [1, 20000, 3]})
    t = model.table("t", df)
    assert [r[0] for r in t.rows] == ["37,390", "199,430", "12"]  # the column's format, not 3.739e+04
    assert [r[1] for r in t.rows] == ["0.50", "12.25", "-3.00"]  # same decimals on every row
    assert [r[2] for r in t.rows] == ["1", "20,000", "3"]
    assert model.table("t", pd.DataFrame({"x": [float("nan"), float("inf")]})).rows == [["n/a"], ["never"]]
    assert model.signed_range([-7.525, -0.08]) == "-7.525 to -0.080%"
    assert model.signed_range([0.149, 0.67]) == "0.149\u20130.670%"
    assert model.signed_interval(-0.459, 10.679) == "[-0.459, +10.679]%"
