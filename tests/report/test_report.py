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

from headroom.analysis import roofline
from headroom.core import parallel
from headroom.decide import decision, figures, policy_eval
from headroom.report import build as report
from headroom.report import model, ship
from headroom.report.sections import answer, correctness, lifecycle, surface
from tests import analysis_sets as S

SEQ = "ABCA" * 4


def _inputs(device: str) -> dict:
    tr = S.trace(SEQ)

    def lat(key, tile, fused, run, mode, inv):
        return S.BASE_US[key] * (0.8 if fused else 1.0) * (1.0 + 0.05 * tile) * (1.0 + 0.01 * run)

    modes = ("eager", "graph") if device == "cuda" else ("eager",)
    tm = S.timings(tr, lat, modes=modes, std_us=1.0)
    pe = policy_eval.evaluate(tr, tm, S.lifecycle(), bootstrap_resamples=100, random_draws=10)
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
    # a native backend beside the Triton candidates (10% slower than t0-unfused): ours vs natives
    native = tm[tm["candidate"] == "t0-unfused"].assign(
        candidate="native-sdpa-cudnn", backend="sdpa-cudnn", median_us=lambda d: d["median_us"] * 1.1
    )
    life = S.lifecycle()
    life.loc[life["kind"] == "cache", "value"] = 60.0 * 2**20  # 60 MiB a candidate
    return {
        "decision": decision.decide(
            figures.study_figures(tr, tm, S.lifecycle(), bootstrap_resamples=100, random_draws=10),
            gs,
            env,
            min_test_invocations=5,
        ),
        "environment": env,
        "trace": tr,
        "candidates": cands,
        "correctness": corr,
        "portfolio": pd.concat([tm.assign(backend="triton"), native], ignore_index=True),
        "lifecycle": life,
        "graph_sweep": gs,
        "calibration": cal,
        "policy_eval": pe,
        "factorial": policy_eval.factorial(pe),
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
    decision = inputs["decision"]
    verdict = decision.iloc[0]
    # fused is 20% faster on every shape of the trace: one fused kernel to ship (the kernel
    # recommendation), no headroom for a portfolio (the decision never turns fusion into continue):
    # both modes stop, and so does the profile's headline
    per_mode = decision.groupby("mode")["mode_verdict"].first()
    assert verdict.verdict == "stop" and list(per_mode[["eager", "graph"]]) == ["stop", "stop"]
    assert md.splitlines()[0] == "# test study"
    assert md.splitlines()[2] == f"## {answer.TITLE}"
    banner = "**Verdict: stop.** Stop for the deployment profile"
    assert md.splitlines()[4].startswith(banner)
    assert verdict.reason in md  # the decision's own reason stays, in the decision section
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
        "natives_vs_ours",
        "latency_graph",
    } <= names
    assert md.index("What the headroom is made of") < md.index("Our kernels against each native")
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
        assert model.estimate_ci(r.estimate, r.ci_low, r.ci_high, r.unit) in md
    fac = inputs["factorial"]
    assert model.number_format(fac.fusion_gain_pct.tolist())(fac.fusion_gain_pct.iloc[0]) in md
    assert "e+0" not in md and "e-0" not in md  # no scientific notation in any table
    assert "Excluded candidates (failed at least one case): t2-fused." in md
    assert "| policies | 1.25 | 88 |" in md  # stage wall time from the benchmark file
    assert "| wall (s) | max rss (MB) |" in md  # units in the header, said as units
    for path, digest in READ:
        assert f"| {path} | `{digest}` |" in md
    assert "break even invocations" in md and "never" in md  # flat surface: adaptive never pays back


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


def test_the_answer_is_the_first_section_and_says_verdict_ship_and_power(gpu_report):
    inputs, out, _ = gpu_report
    html = (out / "index.html").read_text()
    body = html[html.index("<body>") :]
    ids = re.findall(r'<section id="([^"]+)"', body)
    assert ids[0] == "answer" and len(ids) > 10  # the answer before every other section
    first = body[body.index('<section id="answer"') : body.index("</section>")]
    assert first.count('id="verdict"') == 1  # the verdict sits inside the first section
    lead = re.search(r'<p class="verdict[^"]*" id="verdict"><strong>([^<]+)</strong>([^<]+)</p>', first)
    sentences = [t for t in re.split(r"\.\s+", (lead.group(1) + lead.group(2)).strip().rstrip(".")) if t]
    assert len(sentences) == 2 and sentences[0].startswith("Verdict: stop")  # (the test above)
    ship = (
        inputs["decision"].query("figure == 'kernel_vs_best_unfused' and mode == 'graph'")["kernel"].iloc[0]
    )
    assert f"Ship {ship} in graph" in first
    assert "What this study could detect" in first
    assert "decision&#39;s kernel-recommendation rows" in first  # the source is named


def test_ours_against_the_native_backend_per_phase_and_mode(gpu_report):
    _, out, _ = gpu_report
    md = (out / "report.md").read_text()
    table = md[md.index("**Ours against each native backend**") :].split("\n\n")[1]
    natives = [line for line in table.splitlines() if "| native-sdpa-cudnn |" in line]
    assert len(natives) == 4  # {eager, graph} x {prefill, decode}
    # the native is t0-unfused x 1.1; ours is the shipped kernel, never slower than t0-unfused here
    assert all(float(line.split("|")[7]) >= 1.1 - 1e-9 for line in natives)


def test_every_figure_keeps_labels_of_at_least_11_px(gpu_report):
    inputs, _, _ = gpu_report
    sections = report._sections(inputs, None, lambda name: name)
    figs = [f for s in sections for f in s.figures]
    assert len(figs) >= 8
    small = {f.name: round(f.min_text_px, 1) for f in figs if f.min_text_px < model.MIN_LABEL_PX}
    assert not small


def _wide_portfolio(shapes: int, families: int) -> pd.DataFrame:
    rows = []
    for k in range(shapes):
        for j in range(families):
            for run in (1, 2):
                rows.append(
                    {
                        "run": run,
                        "mode": "graph",
                        "invocation": k,
                        "shape_key": f"decode|b{k + 1}|q1|kv{64 * (k + 1)}|h4/2|d32|float16",
                        "phase": "decode",
                        "candidate": f"native-b{j}",
                        "backend": f"b{j}",
                        "median_us": 10.5 + k + j,
                        "std_us": 0.1,
                        "rel_std_pct": 1.0,
                        "reps": 40,
                    }
                )
    return pd.DataFrame(rows)


def test_heatmaps_hold_at_most_150_cells_and_keep_every_cell():
    s = surface.section(_wide_portfolio(shapes=40, families=6), "")
    maps = [f for f in s.figures if f.cells]
    assert len(maps) >= 2  # 240 cells: split, not squeezed
    assert all(f.cells <= model.MAX_HEATMAP_CELLS for f in maps)
    assert sum(f.cells for f in maps) == 240
    assert all(f.min_text_px >= model.MIN_LABEL_PX for f in maps)
    # noise and sample count beside each median; the 40-row table is folded, not dropped
    t = s.tables[0]
    assert t.collapsed and len(t.rows) == 40
    first = next(r for r in t.rows if r[0].startswith("decode|b1|"))
    assert first[1] == "10.5 ±1.0% n=40"


def test_heatmap_parts_drawn_side_by_side_are_the_ones_one_process_draws(monkeypatch):
    # issue 36: a heatmap's parts draw in forked processes; the figures are the same, in order
    wide = _wide_portfolio(shapes=40, families=6)
    forked = [f for f in surface.section(wide, "").figures if f.cells]
    monkeypatch.setattr(parallel, "workers_here", lambda: 1)
    alone = [f for f in surface.section(wide, "").figures if f.cells]
    assert len(forked) >= 2 and [f.name for f in forked] == [f.name for f in alone]
    assert [f.png for f in forked] == [f.png for f in alone]


def test_no_negative_zero_and_units_as_units(gpu_report):
    _, out, _ = gpu_report
    md = (out / "report.md").read_text()
    assert not re.search(r"-0\.0+(?![0-9]*[1-9])", md)
    assert "60.00 MiB" in md and str(60 * 2**20) not in md  # the cache ledger in binary units
    tables = "\n".join(line for line in md.splitlines() if line.startswith("|"))
    assert "(µs)" in tables and not re.search(r"\(us\)|\bus\b|_us\b|_pct\b|_bytes\b", tables)


def test_a_long_lifecycle_is_summarised_and_folded(tmp_path):
    plan = pd.DataFrame(
        {
            "kind": "plan",
            "candidate": [f"t{i % 5}" for i in range(301)],
            "shape_key": [f"s{i}" for i in range(301)],
            "value": [100.0 + i for i in range(301)],
            "unit": "us",
            "status": "ok",
        }
    )
    s = lifecycle.section(plan, None, "")
    summary = s.tables[0]
    assert summary.title.startswith("Lifecycle ledger, summarised")
    assert summary.rows == [
        ["plan build per candidate and shape (generation 2)", "301", "250 µs", "100 µs", "400 µs", "t0"]
    ]
    assert s.tables[1].collapsed and len(s.tables[1].rows) == 301
    report.build({"lifecycle": plan}, [], tmp_path)
    html = (tmp_path / "index.html").read_text()
    assert (
        "<details><summary>plan build per candidate and shape (generation 2): every row (301) (301 rows)"
        in html
    )


def test_what_to_ship_prefers_the_recommendation_and_falls_back_for_older_studies(gpu_report):
    inputs, _, _ = gpu_report
    rec = pd.DataFrame(
        {
            "scope": ["graph", "graph"],
            "family": "graph",
            "ship": "kernel",
            "kernel": "t9-fused",
            "runs_agree": 2,
            "runs": 3,
            "latency_us": 646.25,
            "alternative": ["best_unfused", "native-sdpa-cudnn"],
            "speedup": [1.1, 1.153],
            "speedup_ci_low": [1.05, 1.1],
            "speedup_ci_high": [1.15, 1.2],
            "speedup_layer_pct": [0.5, 1.25],
        }
    )
    [x] = ship.what_to_ship(rec, inputs["decision"], inputs["policy_eval"])
    assert x.source == "recommendation" and x.kernel == "t9-fused"
    line = answer.ship_line(x)
    assert line.startswith("Ship t9-fused in graph (2 of 3 runs agree), 646.2 µs per invocation")
    assert "1.153× [1.100, 1.200] over native-sdpa-cudnn (1.25% of a decoder layer's time)" in line
    assert "over best unfused (0.50% of a decoder layer's time)" in line
    old = inputs["decision"].drop(columns=["kernel"])
    ships = ship.what_to_ship(None, old, inputs["policy_eval"])
    assert {x.source for x in ships} == {"policy_eval"} and {x.scope for x in ships} == {"eager", "graph"}
    assert all((x.kernel, x.runs_agree, x.runs) == ("t0-fused", 3, 3) for x in ships)


def test_power_statement_of_a_decision_without_power_rows_says_why(gpu_report):
    inputs, _, _ = gpu_report
    d = inputs["decision"]
    text = answer.power_statement(d[~d["figure"].str.startswith("policy_gain_")])
    assert "no power simulation in this decision" in text and "pp" in text


def test_an_older_study_degrades_with_its_reason_and_never_crashes(tmp_path):
    """A decision of before v2 (one row: verdict and reason), a portfolio without backend or noise
    columns, no calibration: every section renders or says why not."""
    inputs = _inputs("cuda")
    inputs["decision"] = pd.DataFrame({"verdict": ["stop"], "reason": ["Flat. Nothing to gain."]})
    inputs["portfolio"] = inputs["portfolio"].drop(columns=["backend", "rel_std_pct"], errors="ignore")
    inputs["calibration"] = None
    report.build(inputs, [], tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "**Verdict: stop.** Flat." in md
    assert "skipped: decision.parquet predates decision v2 (no per-figure rows)" in md
    assert "What to ship is read from policy_eval.global_candidate" in md
    assert "What this study could detect: not stated: the decision has no per-figure rows." in md
    assert "no calibrated peak in this study" in md
