"""`headroom verify --recompute`: a derived artifact forged with fresh provenance and sidecar is
caught by re-running the derived stages (issue 23, item 10)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from headroom.core import artifacts, catalog, layout, recompute
from tests.pipeline import headroom


def test_first_difference_names_the_first_differing_cell():
    a = pd.DataFrame({"x": [1.0, 2.0, float("nan")], "verdict": ["stop", "stop", "continue"]})
    assert recompute.first_difference(a, a.copy()) is None
    b = a.copy()
    b.loc[1, "verdict"] = "continue"
    b.loc[2, "x"] = 3.0
    assert (
        recompute.first_difference(a, b)
        == "row 1, column 'verdict': the study's 'stop', recomputed 'continue'"
    )
    assert "rows" in recompute.first_difference(a, a.head(2))
    assert "columns differ" in recompute.first_difference(a, a[["verdict", "x"]])
    c = a.copy()
    c.loc[0, "x"] = 1.0 + 1e-12  # within the float tolerance
    assert recompute.first_difference(a, c) is None


@pytest.mark.slow
def test_verify_recompute_names_a_forged_derived_artifact(pipeline_clone):
    results = pipeline_clone / "results"
    proc = headroom(pipeline_clone, "verify", "--recompute")
    assert proc.returncode == 0 and "recompute to the same tables" in proc.stdout, proc.stdout + proc.stderr
    path = results / "default" / "policy_eval.parquet"
    table = artifacts.read(path)
    column = next(c for c in table.columns if c.endswith("_us") and table[c].dtype.kind == "f")
    table.loc[0, column] = table.loc[0, column] * 0.5  # a forged number, provenance and hash kept fresh
    artifacts.write(table, path, kind="policy_eval", provenance=artifacts.read_provenance(path))
    scope, (study, real) = _forge_dispatch_table(results / "default")  # issue 31, case 1: BLAKE3 recorded too
    catalog.build(layout.discover(results), results / layout.CATALOG_NAME, project_root=pipeline_clone)
    assert headroom(pipeline_clone, "verify").returncode == 0  # every byte verifies
    proc = headroom(pipeline_clone, "verify", "--recompute")
    assert proc.returncode == 1
    assert f"policy_eval.parquet: differs from its recomputation: row 0, column {column!r}" in proc.stdout
    assert (
        f"dispatch.json: differs from its recomputation at scopes.{scope}.expected_gain_pct[0]: "
        f"the study's {study!r}, recomputed {real!r}" in proc.stdout
    ), proc.stdout


def _forge_dispatch_table(folder):
    """dispatch.json with a forged expected gain, its sidecar and the BLAKE3 recommendation.parquet
    records (column and provenance) rewritten to match: what only a recomputation can catch. Returns
    the scope and its first gain as forged and as recorded (the interpreter study's gains are
    host-clock timings: they differ from machine to machine, so the forgery is relative to them)."""
    import pyarrow as pa

    path, rec = folder / "dispatch.json", folder / "recommendation.parquet"
    forged = json.loads(path.read_text())
    scope = next(iter(forged["scopes"]))
    real = forged["scopes"][scope]["expected_gain_pct"]
    forged["scopes"][scope]["expected_gain_pct"] = fake = [(g or 0.0) + 5.0 for g in real]  # null: no gain
    digest = artifacts.write_file(path, json.dumps(forged).encode())
    table = artifacts.read_table(rec)
    column = table.column_names.index("dispatch_blake3")
    table = table.set_column(column, "dispatch_blake3", pa.array([digest] * table.num_rows))
    prov = artifacts.read_provenance(rec)
    prov["extra"]["dispatch"]["blake3"] = digest
    artifacts.write(table, rec, kind="recommendation", provenance=prov)
    return scope, (fake[0], real[0])


def test_json_difference_names_the_first_differing_key():
    a = {"study": "s", "provenance": {"x": 1}, "decision_blake3": "a", "scopes": {"g": {"gain": [0.0, None]}}}
    b = {**a, "provenance": {"x": 2}, "decision_blake3": "b"}  # not derived: left out
    assert recompute.json_difference(a, b) is None
    c = {**a, "scopes": {"g": {"gain": [2.0, None]}}}
    assert recompute.json_difference(c, {**c, "scopes": {"g": {"gain": [2.0 + 1e-12, None]}}}) is None
    b = {**a, "scopes": {"g": {"gain": [5.0, None]}}}
    assert recompute.json_difference(b, a) == "scopes.g.gain[0]: the study's 5.0, recomputed 0.0"
    assert "1 items in the study's, 2 recomputed" in recompute.json_difference({"k": [1]}, {"k": [1, 2]})
    assert "keys" in recompute.json_difference({"k": 1}, {"j": 1})
    assert recompute.json_difference({"k": 1}, {"k": True}) == "k: the study's 1, recomputed True"


@pytest.mark.slow
def test_verify_recompute_names_a_forged_report_section(pipeline_clone):
    page = pipeline_clone / "results" / "default" / "report" / "report.md"
    text = page.read_text()
    verdict = next(line for line in text.splitlines() if line.startswith("**Verdict:"))
    page.write_text(text.replace(verdict, "**Verdict: stop.** Forged."))
    artifacts.record_hash(page)
    assert headroom(pipeline_clone, "verify").returncode == 0
    proc = headroom(pipeline_clone, "verify", "--recompute")
    # the verdict leads the report's first section (headroom/report/sections/answer.py)
    assert proc.returncode == 1 and "report.md: section '## The answer: verdict, what to ship" in proc.stdout
    assert "Forged" in proc.stdout


def test_a_stages_inputs_are_named_by_kind_one_per_run_as_lists(tmp_path):
    """The report's inputs without the report's list of them (no arrow from core up to the report):
    every artifact by the kind it holds, `samples` for portfolio_samples, per-run kinds as lists."""
    folder = tmp_path / "results" / "s"
    paths = [
        folder / "trace.parquet",
        folder / "portfolio" / "run-2.parquet",
        folder / "portfolio" / "run-1.parquet",
        folder / "portfolio" / "run-1-samples.parquet",
    ]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    assert recompute.by_input_name(paths, folder) == {
        "trace": "results/s/trace.parquet",
        "portfolio": ["results/s/portfolio/run-1.parquet", "results/s/portfolio/run-2.parquet"],
        "samples": ["results/s/portfolio/run-1-samples.parquet"],
    }
