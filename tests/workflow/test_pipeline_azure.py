"""The shipped Azure trace drives the pipeline (scaled to the interpreter's smoke shapes)."""

from __future__ import annotations

import pytest

from headroom.core import artifacts
from tests.pipeline import copy_project, headroom, snakemake

pytestmark = pytest.mark.slow


def test_azure_trace_smoke_run_verifies(tmp_path):
    # Up to the correctness gate: it runs every candidate on every distinct shape of the Azure trace
    # against float64, which is what this trace adds; timing shapes (portfolio) is the default
    # study's test (tests/workflow/test_pipeline.py), within the same smoke bounds.
    project = copy_project(tmp_path / "headroom")
    snakemake(
        project,
        "results/azure-conv/trace.parquet",
        "results/azure-conv/correctness.parquet",
        "--config",
        "studies=[azure-conv]",
    )
    trace = artifacts.read(project / "results/azure-conv/trace.parquet")
    prov = artifacts.read_provenance(project / "results/azure-conv/trace.parquet")
    log = "data/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv.gz"
    assert prov["inputs"][log] == artifacts.hash_file(project / log)  # the log's BLAKE3 is in the lineage
    assert set(trace.phase) == {"prefill", "decode"} and trace.kv_len.max() <= 64
    checked = artifacts.read(project / "results/azure-conv/correctness.parquet")
    candidates = artifacts.read(project / "results/azure-conv/candidates.parquet")
    assert len(checked) == trace.shape_key.nunique() * len(candidates)  # every candidate x every shape
    assert set(checked.shape_key) == set(trace.shape_key) and checked.passed.all(), checked
    proc = headroom(project, "verify")
    assert proc.returncode == 0, proc.stdout
    described = headroom(project, "trace", "describe", "results/azure-conv/trace.parquet")
    assert described.returncode == 0 and f"invocations: {len(trace)}" in described.stdout, described.stdout
