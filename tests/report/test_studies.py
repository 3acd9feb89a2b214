"""The cross-study page: verdicts, environments and headline figures of every study side by side."""

from __future__ import annotations

import pandas as pd
import pytest

from headroom.core import artifacts
from headroom.core import catalog as hcatalog
from headroom.report import studies
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
    paths = studies.build(results / hcatalog.CATALOG_NAME, results / "report")
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
    page = studies.build(results / hcatalog.CATALOG_NAME, tmp_path / "out")["html"].read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_page_refuses_a_changed_catalog(results, tmp_path):
    cat = results / hcatalog.CATALOG_NAME
    data = bytearray(cat.read_bytes())
    data[-50] ^= 1
    cat.write_bytes(bytes(data))
    with pytest.raises(artifacts.ArtifactHashError, match="catalog.duckdb"):
        studies.build(cat, tmp_path / "out")
