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
    from headroom.core.catalog import discover

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
