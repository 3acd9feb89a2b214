"""Provenance: a changed byte is caught by `verify` and by the next stage that reads the artifact."""

from __future__ import annotations

import pytest

from headroom.core import artifacts
from tests.pipeline import headroom, snakemake

pytestmark = pytest.mark.slow


def _flip_byte(path):
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


ARTIFACT_PATHS = [
    "results/default/trace.parquet",
    "results/default/candidates.parquet",
    "results/default/correctness.parquet",
    "results/default/portfolio/run-2.parquet",
    "results/default/policy_eval.parquet",
    "results/default/decision.parquet",
]


@pytest.mark.parametrize("rel", ARTIFACT_PATHS)
def test_flipped_byte_fails_verify_naming_the_file(pipeline_clone, rel):
    path = pipeline_clone / rel
    recorded = artifacts.recorded_hash(path)
    _flip_byte(path)
    proc = headroom(pipeline_clone, "verify")
    assert proc.returncode == 1
    assert rel in proc.stdout and "BLAKE3 mismatch" in proc.stdout
    assert recorded in proc.stdout


def test_every_artifact_kind_fails_verify_when_flipped(pipeline_clone):
    from headroom.core.layout import discover

    for path in discover(pipeline_clone / "results"):
        original = path.read_bytes()
        _flip_byte(path)
        proc = headroom(pipeline_clone, "verify")
        assert proc.returncode == 1 and path.name in proc.stdout, path
        path.write_bytes(original)
    assert headroom(pipeline_clone, "verify").returncode == 0


def test_next_stage_refuses_a_changed_input_naming_both_hashes(pipeline_clone):
    path = pipeline_clone / "results/default/lifecycle.parquet"  # an input of the decision
    recorded = artifacts.recorded_hash(path)
    _flip_byte(path)
    actual = artifacts.hash_file(path)
    proc = snakemake(pipeline_clone, "--forcerun", "decision", "--until", "decision", check=False)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr + (pipeline_clone / "results/default/logs/decision.log").read_text()
    assert recorded in out and actual in out


@pytest.mark.parametrize(
    "side",
    [
        "results/default/report/index.html.blake3",
        "results/default/report/report.md.blake3",
        "results/report/studies.html.blake3",
        "results/report/studies.md.blake3",
        "results/catalog.duckdb.blake3",
    ],
)
def test_a_deleted_report_or_studies_sidecar_is_written_again_by_a_plain_run(pipeline_clone, side):
    (pipeline_clone / side).unlink()
    assert headroom(pipeline_clone, "verify").returncode == 1
    snakemake(pipeline_clone)
    assert (pipeline_clone / side).is_file()
    assert headroom(pipeline_clone, "verify").returncode == 0


def test_a_plain_run_refuses_another_studys_decision(pipeline_clone):
    """Another study's decision (its own provenance) copied into this study's folder: the gate and
    the next stages that read it (report, catalog) refuse it, naming both studies."""
    path = pipeline_clone / "results/default/decision.parquet"
    prov = artifacts.read_provenance(path)
    prov["wildcards"] = {**prov.get("wildcards", {}), "study": "azure-conv"}
    prov["inputs"] = {k.replace("results/default/", "results/azure-conv/"): "0" * 64 for k in prov["inputs"]}
    artifacts.write(artifacts.read(path), path, kind="decision", provenance=prov)
    gate = headroom(pipeline_clone, "gate")
    assert gate.returncode == 1 and "study 'azure-conv' inside study 'default'" in gate.stderr
    proc = snakemake(pipeline_clone, check=False)
    assert proc.returncode != 0
    assert "study 'azure-conv' inside study 'default'" in proc.stdout + proc.stderr
