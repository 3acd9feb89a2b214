"""Rerun behaviour, read from Snakemake's own dry-run plan (docs/architecture.md, "Reruns")."""

from __future__ import annotations

import os
import time

import pytest
import yaml

from tests.pipeline import planned_rules, snakemake

pytestmark = pytest.mark.slow

MEASUREMENT = {"correctness", "portfolio", "lifecycle", "graph_sweep"}


def _edit_config(project, fn):
    path = project / "config/config.yaml"
    cfg = yaml.safe_load(path.read_text())
    fn(cfg)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))


def test_decision_threshold_reruns_only_decision_recommendation_report_and_catalog(pipeline_clone):
    _edit_config(pipeline_clone, lambda c: c["decision"].update(max_gap_to_oracle_pct=2.5))
    # the catalog, and the cross-study page made from it
    assert set(planned_rules(pipeline_clone)) == {
        "decision",
        "recommendation",
        "report",
        "catalog",
        "studies",
        "all",
    }


def test_tile_change_reruns_candidates_and_downstream_but_not_trace(pipeline_clone):
    def change(c):
        c["tiles"][0]["num_stages"] = c["tiles"][0]["num_stages"] + 1

    _edit_config(pipeline_clone, change)
    plan = planned_rules(pipeline_clone)
    assert "candidates" in plan
    assert MEASUREMENT <= set(plan), plan
    assert "trace" not in plan and "environment" not in plan


def test_editing_a_source_file_reruns_the_rule_that_declares_it(pipeline_clone):
    path = pipeline_clone / "headroom/decide/decision.py"
    path.write_text(path.read_text() + "\n# an edit\n")
    plan = planned_rules(pipeline_clone)
    assert "decision" in plan
    assert not {"trace", "candidates", "policies", "roofline"} & set(plan), plan


def test_touching_an_artifact_without_changing_it_schedules_nothing(pipeline_clone):
    later = time.time() + 60
    for rel in ["trace.parquet", "candidates.parquet", "portfolio/run-1.parquet"]:
        os.utime(pipeline_clone / "results/default" / rel, (later, later))
    assert planned_rules(pipeline_clone) == {}


def test_regenerated_identical_artifact_leaves_downstream_clean(pipeline_clone):
    # Really rewrite the trace (new mtime, same bytes): nothing downstream becomes stale.
    snakemake(pipeline_clone, "--forcerun", "trace", "--until", "trace")
    assert planned_rules(pipeline_clone) == {}


def test_a_deleted_sidecar_rebuilt_on_its_own_leaves_downstream_clean(pipeline_clone):
    # issue 31, case 23: a plain run that rebuilds an artifact (here: its deleted hash sidecar, so the
    # trace job reruns) also reruns every job downstream of it in that same run — Snakemake schedules
    # what depends on a job it runs before any checksum is compared — so the README says to rebuild it
    # on its own first (`--until`); the byte-identical artifact then dirties nothing downstream
    (pipeline_clone / "results/default/trace.parquet.blake3").unlink()
    plain = planned_rules(pipeline_clone)
    assert plain.get("trace") == 1 and "policies" in plain  # the same run would rerun downstream
    snakemake(pipeline_clone, "--until", "trace")
    assert (pipeline_clone / "results/default/trace.parquet.blake3").is_file()
    assert planned_rules(pipeline_clone) == {}
