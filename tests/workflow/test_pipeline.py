"""End to end: the whole DAG in a temporary copy of the project, then the CLI over its results."""

from __future__ import annotations

import json

import pytest

from headroom import dispatch
from headroom.core import artifacts, contracts
from tests.pipeline import headroom, planned_rules, snakemake
from tests.recommendation_sets import assert_study_ships

pytestmark = pytest.mark.slow

# Every artifact kind with a contract: a full run writes each of them.
KINDS = list(contracts.CONTRACTS)


def test_full_run_produces_every_artifact_and_verifies(pipeline_run):
    results = pipeline_run / "results"
    for name in ["catalog.duckdb", "default/report/index.html", "default/report/report.md"]:
        assert (results / name).exists(), name
    proc = headroom(pipeline_run, "verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "every lineage edge matches" in proc.stdout


@pytest.mark.parametrize("kind", KINDS)
def test_query_returns_rows_for_every_artifact_kind(pipeline_run, kind):
    proc = headroom(pipeline_run, "query", f"SELECT count(*) AS n FROM {kind}", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["n"] > 0


def test_catalog_lists_every_artifact_with_its_hash_and_lineage(pipeline_run):
    proc = headroom(pipeline_run, "query", "SELECT path, blake3 FROM artifacts", "--format", "json")
    rows = json.loads(proc.stdout)
    assert {r["path"] for r in rows} >= {
        "results/default/trace.parquet",
        "results/default/portfolio/run-1.parquet",
    }
    for r in rows:
        assert r["blake3"] == artifacts.hash_file(pipeline_run / r["path"])
    proc = headroom(
        pipeline_run, "query", "SELECT count(*) AS bad FROM lineage WHERE NOT matches", "--format", "json"
    )
    assert json.loads(proc.stdout)[0]["bad"] == 0
    # every lineage edge's recorded hash is the input's hash now
    proc = headroom(pipeline_run, "query", "SELECT input_path, input_blake3 FROM lineage", "--format", "json")
    edges = json.loads(proc.stdout)
    assert edges
    for e in edges:
        assert e["input_blake3"] == artifacts.hash_file(pipeline_run / e["input_path"])


def test_query_is_read_only(pipeline_run):
    for sql in [
        "CREATE TABLE x AS SELECT 1",
        "INSERT INTO artifacts (path) VALUES ('x')",
        "DROP VIEW trace",
        "COPY (SELECT 1) TO 'leak.csv'",
        "ATTACH 'other.duckdb'",
    ]:
        proc = headroom(pipeline_run, "query", sql)
        assert proc.returncode == 1, sql
        assert "read-only" in proc.stderr, proc.stderr
    assert not (pipeline_run / "leak.csv").exists()


def test_query_output_formats(pipeline_run):
    sql = "SELECT phase, count(*) AS n FROM trace GROUP BY phase ORDER BY phase"
    csv = headroom(pipeline_run, "query", sql, "--format", "csv").stdout.splitlines()
    assert csv[0] == "phase,n"
    table = headroom(pipeline_run, "query", sql).stdout
    assert "phase" in table and "n" in table


def test_interpreter_run_is_no_decision_and_says_so(pipeline_run):
    proc = headroom(pipeline_run, "--results", "results", "--study", "default", "gate")
    assert proc.returncode == 4, proc.stdout
    assert proc.stdout.startswith("no-decision")
    first = (pipeline_run / "results/default/report/report.md").read_text().lstrip().splitlines()[0]
    assert "not GPU measurements" in first


def test_the_cpu_study_ships_a_dispatch_table_that_repeats_the_engines_choices(pipeline_run):
    rec = assert_study_ships(pipeline_run / "results/default")
    assert set(rec["verdict"]) == {"no-decision"} and set(rec["ship"]) <= {"kernel", "phase-pair"}
    proc = headroom(pipeline_run, "recommend")
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 3, proc.stdout + proc.stderr
    assert proc.stdout.startswith("Verdict: ") and "not GPU measurements" in proc.stdout.splitlines()[0]
    # issue 31, case 21: the folder loads (verified against it), a CPU study's one scope or its profile
    assert dispatch.load(pipeline_run / "results/default").study == "default"
    # case 29, issue 33 item 3: on the interpreter a native (torch on the CPU) runs faster than every
    # kernel of ours: it is the global kernel, shipped, and our best kernel's speed against it is said
    native = rec[rec["faster_native"] != ""]
    assert len(native) and (native["faster_native_speedup"] < 1).all(), rec.to_dict("records")
    assert (native["kernel"] == native["faster_native"]).all() and (
        native["kernel"] != native["our_kernel"]
    ).all()
    assert set(native["backend"]) == {"sdpa-math"} and set(native["tile"]) == {-1}
    said = proc.stdout.splitlines()[1]
    assert "native-sdpa-math" in said and "; our best kernel, " in said and " its speed" in said, said
    report = (pipeline_run / "results/default/report/report.md").read_text()
    assert "native-sdpa-math" in report and "Our best kernel, " in report


def test_lineage_walks_back_to_the_trace(pipeline_run):
    proc = headroom(pipeline_run, "lineage", "results/default/decision.parquet")
    assert proc.returncode == 0, proc.stderr
    assert "results/default/trace.parquet" in proc.stdout
    assert "rule decision" in proc.stdout


def test_second_run_has_nothing_to_do(pipeline_run):
    assert planned_rules(pipeline_run) == {}


def test_rerun_after_nothing_changed_leaves_artifacts_byte_identical(pipeline_clone):
    before = {p: artifacts.hash_file(p) for p in (pipeline_clone / "results/default").glob("*.parquet")}
    snakemake(pipeline_clone, "--forcerun", "trace", "candidates", "--until", "candidates", "trace")
    after = {p: artifacts.hash_file(p) for p in (pipeline_clone / "results/default").glob("*.parquet")}
    assert (
        before[pipeline_clone / "results/default/trace.parquet"]
        == after[pipeline_clone / "results/default/trace.parquet"]
    )
    assert (
        before[pipeline_clone / "results/default/candidates.parquet"]
        == after[pipeline_clone / "results/default/candidates.parquet"]
    )


def test_timed_calls_counted_by_sql_match_the_study(pipeline_run):
    from headroom.core import config as hconfig

    study = hconfig.resolve(hconfig.load(pipeline_run / "config/config.yaml"), cuda_available=False)
    admitted = json.loads(
        headroom(
            pipeline_run, "query", "SELECT count(DISTINCT candidate) AS n FROM portfolio", "--format", "json"
        ).stdout
    )[0]["n"]
    expected = (
        study["portfolio"]["runs"] * study["trace"]["invocations"] * admitted * study["portfolio"]["reps"]
    )
    proc = headroom(
        pipeline_run,
        "query",
        "SELECT count(*) AS n, count(DISTINCT run) AS runs FROM portfolio_samples",
        "--format",
        "json",
    )
    got = json.loads(proc.stdout)[0]
    assert got == {"n": expected, "runs": study["portfolio"]["runs"]}
    assert admitted == len(study["tiles"]) * len(study["rope"]) + len(study["native_candidates"])


def test_every_module_a_job_loaded_is_a_declared_code_input(pipeline_run):
    """src() derives each rule's code inputs from its script's imports; each job records the project
    modules it really loaded, and every one must be among them (else an edit would not rerun it)."""
    from headroom.core.layout import discover

    checked = set()
    for path in discover(pipeline_run / "results"):
        prov = artifacts.read_provenance(path)
        loaded = set(prov["modules"])
        assert loaded, path
        undeclared = loaded - set(prov["code"])
        assert not undeclared, (
            f"rule {prov['rule']} ({path.name}) loaded undeclared modules {sorted(undeclared)}"
        )
        checked.add(prov["rule"])
    assert {"trace", "correctness", "portfolio", "policies", "decision"} <= checked


def test_device_artifacts_share_one_environment_and_record_placement(pipeline_run):
    from headroom.core.layout import discover

    envs, placements = set(), set()
    for path in discover(pipeline_run / "results/default"):
        prov = artifacts.read_provenance(path)
        if prov["device"] in ("cuda", "interpret"):
            envs.add(prov["environment"])
            placements.add(prov["placement"]["host"])
    assert len(envs) == 1 and len(placements) == 1
    env_row = artifacts.read(pipeline_run / "results/default/environment.parquet").iloc[0]
    assert envs == {env_row["environment_id"]}


@pytest.mark.parametrize(
    "deleted",
    [
        ["results/default/policy_eval.parquet", "results/default/policy_eval.parquet.blake3"],
        ["results/default/roofline.parquet"],
        ["results/default/decision.parquet.blake3"],  # the hash sidecar alone
    ],
    ids=["artifact-and-sidecar", "artifact", "sidecar"],
)
def test_a_deleted_intermediate_artifact_is_rebuilt_by_a_plain_run(pipeline_clone, deleted):
    # what `verify`'s hash-error advice says to do: delete it and run the pipeline again
    for rel in deleted:
        (pipeline_clone / rel).unlink()
    assert planned_rules(pipeline_clone) != {}
    snakemake(pipeline_clone)
    for rel in deleted:
        assert (pipeline_clone / rel).exists(), rel
    proc = headroom(pipeline_clone, "verify")
    assert proc.returncode == 0, proc.stdout
