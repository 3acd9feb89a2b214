"""The catalog and the CLI over it: safe queries, verified bytes, studies, exit codes."""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from headroom.core import artifacts, catalog, cli, contracts, layout
from tests.artifact_helpers import write_filled


def _write(path: Path, df: pd.DataFrame, kind: str, inputs: dict[str, str] | None = None) -> str:
    """Write `df` as an artifact of `kind`, its contract's other required columns filled in."""
    return write_filled(path, df, kind, inputs, code={}, device="interpret")


def make_study(project: Path, folder: Path, verdict: str = "stop") -> list[Path]:
    """A small study: trace -> portfolio run 1 -> decision, with lineage, under `folder`."""
    trace = folder / "trace.parquet"
    h = _write(trace, pd.DataFrame({"invocation": [0, 1], "phase": ["prefill", "decode"]}), "trace")
    run = folder / "portfolio" / "run-1.parquet"
    rel = lambda p: p.relative_to(project).as_posix()  # noqa: E731
    h2 = _write(
        run,
        pd.DataFrame(
            {"run": [1, 1], "invocation": [0, 1], "candidate": ["t0", "t1"], "median_us": [3.0, 4.0]}
        ),
        "portfolio",
        {rel(trace): h},
    )
    decision = folder / "decision.parquet"
    _write(decision, pd.DataFrame({"verdict": [verdict], "reason": ["because"]}), "decision", {rel(run): h2})
    return [trace, run, decision]


def build(project: Path) -> Path:
    results = project / "results"
    catalog.build(layout.discover(results), results / layout.CATALOG_NAME, project_root=project)
    return results


@pytest.fixture
def flat(tmp_path):
    project = tmp_path / "proj"
    make_study(project, project / "results")
    return build(project)


@pytest.fixture
def two_studies(tmp_path):
    project = tmp_path / "proj"
    make_study(project, project / "results" / "default", "stop")
    make_study(project, project / "results" / "azure-conv", "continue")
    return build(project)


def run_cli(capsys, results: Path, *args: str) -> tuple[int, str, str]:
    code = cli.main(["--results", str(results), *args])
    out = capsys.readouterr()
    return code, out.out, out.err


# -- query is read-only by construction ----------------------------------------------------------
ATTACKS = [
    "EXPLAIN ANALYZE COPY (SELECT 'stop' AS verdict, 'forged' AS reason) TO '{decision}'",
    "EXPLAIN ANALYZE COPY (SELECT 'stop' AS verdict, 'forged' AS reason) TO '{decision}' (USE_TMP_FILE false)",
    "EXPLAIN ANALYZE COPY (SELECT 'x' AS a) TO '{results}/new.parquet' (USE_TMP_FILE false)",
    "COPY (SELECT 1) TO '{results}/catalog.duckdb.tmp/x.parquet'",
    "SELECT * FROM read_text('/etc/passwd')",
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_blob('/etc/passwd')",
    "SELECT * FROM glob('/etc/*')",
    "SELECT * FROM read_parquet('{decision}')",
    "SELECT * FROM '{decision}'",
    "INSTALL httpfs",
    "LOAD httpfs",
    "EXPLAIN ANALYZE INSTALL httpfs",
    "ATTACH '{results}/other.duckdb' AS other",
    "SET enable_external_access = true",
    "RESET lock_configuration",
    "CREATE TABLE forged AS SELECT 1",
    "EXPORT DATABASE '{results}/export'",
]


@pytest.mark.parametrize("sql", ATTACKS)
def test_query_refuses_writes_file_reads_and_extensions(flat, capsys, sql):
    decision = flat / "decision.parquet"
    before = {p: p.read_bytes() for p in flat.rglob("*") if p.is_file()}
    code, out, err = run_cli(capsys, flat, "query", sql.format(decision=decision, results=flat))
    assert code == cli.EXIT_ERROR, out
    assert "query failed" in err and "Traceback" not in err
    assert "root:" not in out  # nothing of /etc/passwd
    after = {p: p.read_bytes() for p in flat.rglob("*") if p.is_file()}
    assert after == before  # no file written, replaced or added
    assert cli.main(["--results", str(flat), "gate"]) == 0  # the verdict is still the real one


def test_query_answers_from_the_catalogs_tables(flat, capsys):
    code, out, err = run_cli(
        capsys,
        flat,
        "query",
        "SELECT study, run, count(*) AS n FROM portfolio GROUP BY ALL",
        "--format",
        "csv",
    )
    assert code == 0, err
    assert out.splitlines() == ["study,run,n", "default,1,2"]


def test_a_flipped_byte_after_build_changes_no_answer_and_is_reported(flat, capsys):
    run = flat / "portfolio" / "run-1.parquet"
    data = bytearray(run.read_bytes())
    data[len(data) // 3] ^= 0xFF
    run.write_bytes(bytes(data))
    sql = "SELECT run, count(*) AS n FROM portfolio GROUP BY run"
    code, out, err = run_cli(capsys, flat, "query", sql, "--format", "csv")
    assert code == 0
    assert out.splitlines() == ["run,n", "1,2"]  # the verified copy, never the flipped bytes
    assert "results/portfolio/run-1.parquet changed on disk" in err


def test_catalog_rejects_an_artifact_whose_bytes_do_not_match(tmp_path):
    project = tmp_path / "proj"
    paths = make_study(project, project / "results")
    data = bytearray(paths[1].read_bytes())
    data[40] ^= 1
    paths[1].write_bytes(bytes(data))
    with pytest.raises(artifacts.ArtifactHashError, match="run-1.parquet"):
        build(project)
    assert not (project / "results" / layout.CATALOG_NAME).exists()


def test_stale_check_costs_a_stat_per_artifact(flat):
    # The check stats every artifact and hashes none when size and mtime match.
    con = duckdb.connect(str(flat / "catalog.duckdb"), read_only=True)
    start = time.perf_counter()
    for _ in range(50):
        assert cli.stale_artifacts(con, flat.parent) == []
    per_query_s = (time.perf_counter() - start) / 50
    con.close()
    assert per_query_s < 0.05


# -- studies --------------------------------------------------------------------------------------
def test_every_table_has_a_study_column_derived_from_the_path(two_studies, capsys):
    con = duckdb.connect(str(two_studies / "catalog.duckdb"), read_only=True)
    tables = [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
    assert set(tables) == {"artifacts", "lineage", "trace", "portfolio", "decision", "excluded_studies"}
    for t in set(tables) - {"excluded_studies"}:  # empty: every study folder verifies
        assert con.execute(f"SELECT DISTINCT study FROM {t} ORDER BY 1").fetchall() == [
            ("azure-conv",),
            ("default",),
        ], t
    con.close()
    code, out, _ = run_cli(
        capsys, two_studies, "query", "SELECT study, verdict FROM decision ORDER BY 1", "--format", "csv"
    )
    assert code == 0 and out.splitlines() == ["study,verdict", "azure-conv,continue", "default,stop"]


def test_query_study_restricts_every_table(two_studies, capsys):
    sql = (
        "SELECT (SELECT count(DISTINCT study) FROM portfolio) AS p, (SELECT max(verdict) FROM decision) AS v"
    )
    code, out, err = run_cli(capsys, two_studies, "query", sql, "--study", "azure-conv", "--format", "csv")
    assert code == 0, err
    assert out.splitlines() == ["p,v", "1,continue"]
    code, _, err = run_cli(capsys, two_studies, "query", "SELECT 1", "--study", "nope")
    assert code == cli.EXIT_USAGE and "unknown study 'nope'" in err


def test_flat_layout_is_the_default_study(flat):
    assert layout.studies(flat) == {"default": flat}


def test_gate_over_several_studies_needs_a_study(two_studies, capsys):
    code, _, err = run_cli(capsys, two_studies, "gate")
    assert code == cli.EXIT_SEVERAL_STUDIES == 6
    assert "azure-conv, default" in err and "--study" in err
    assert run_cli(capsys, two_studies, "gate", "--study", "azure-conv")[0] == 3
    assert run_cli(capsys, two_studies, "--study", "default", "gate")[0] == 0
    assert run_cli(capsys, two_studies, "gate", "--study", "typo")[0] == cli.EXIT_USAGE


def test_gate_without_results_says_not_run_with_its_own_code(tmp_path, capsys):
    code, out, err = run_cli(capsys, tmp_path / "typo", "gate")
    assert code == cli.EXIT_NOT_RUN == 5
    assert code not in cli.GATE_EXIT.values()
    assert "no study has run" in err


def test_gate_without_decision_artifact_says_not_run(flat, capsys):
    (flat / "decision.parquet").unlink()
    code, out, _ = run_cli(capsys, flat, "gate")
    assert code == cli.EXIT_NOT_RUN and out.startswith("not run")


# -- verify covers everything with a recorded hash -----------------------------------------------
def test_verify_passes_on_an_intact_study(two_studies, capsys):
    code, out, _ = run_cli(capsys, two_studies, "verify")
    assert code == 0, out


def test_verify_fails_on_a_missing_sidecar(flat, capsys):
    artifacts.sidecar(flat / "trace.parquet").unlink()
    code, out, _ = run_cli(capsys, flat, "verify")
    assert code == 1 and "trace.parquet: no recorded BLAKE3" in out


def test_verify_fails_on_a_changed_catalog(flat, capsys):
    cat = flat / "catalog.duckdb"
    data = bytearray(cat.read_bytes())
    data[-100] ^= 1
    cat.write_bytes(bytes(data))
    code, out, _ = run_cli(capsys, flat, "verify")
    assert code == 1 and "catalog.duckdb: BLAKE3 mismatch" in out


def test_verify_covers_report_files_and_deleted_ones(flat, capsys):
    page = flat / "report" / "index.html"
    artifacts.write_file(page, b"<html>ok</html>")
    assert run_cli(capsys, flat, "verify")[0] == 0
    page.write_bytes(b"<html>forged</html>")
    code, out, _ = run_cli(capsys, flat, "verify")
    assert code == 1 and "index.html: BLAKE3 mismatch" in out
    page.unlink()
    code, out, _ = run_cli(capsys, flat, "verify")
    assert code == 1 and "index.html: missing" in out
    artifacts.sidecar(page).unlink()
    (flat / "report" / "unhashed.md").write_text("x")
    code, out, _ = run_cli(capsys, flat, "verify")
    assert code == 1 and "unhashed.md: no recorded BLAKE3" in out


def test_verify_says_when_the_catalog_is_stale(flat, capsys):
    _write(flat / "trace.parquet", pd.DataFrame({"invocation": [0], "phase": ["prefill"]}), "trace")
    code, out, _ = run_cli(capsys, flat, "verify")
    assert code == 1 and "catalog.duckdb: stale, it loaded results/trace.parquet" in out


# -- a catalog being rebuilt, killed or corrupt --------------------------------------------------
def test_build_removes_temporary_catalogs_of_killed_builds(flat):
    stale = [flat / ".catalog.duckdb.abc123.tmp", flat / ".catalog.duckdb.abc123.tmp.wal"]
    for p in stale:
        p.write_bytes(b"half a catalog")
    build(flat.parent)
    assert not any(p.exists() for p in stale)
    assert catalog.temp_files(flat / "catalog.duckdb") == []


def test_query_during_a_rebuild_says_so(flat, capsys, monkeypatch):
    monkeypatch.setattr(cli, "REBUILD_WAIT_S", 0.3)
    (flat / "catalog.duckdb").unlink()  # Snakemake removes an output before its job runs
    (flat / ".catalog.duckdb.xyz.tmp").write_bytes(b"")  # the job's temporary catalog, fresh
    code, _, err = run_cli(capsys, flat, "query", "SELECT 1")
    assert code == 1 and "is being rebuilt; try again" in err and "Traceback" not in err


def test_query_waits_for_a_rebuild_that_finishes(flat, capsys, monkeypatch):
    target = flat / "catalog.duckdb"
    saved = target.read_bytes()
    target.unlink()
    tmp = flat / ".catalog.duckdb.xyz.tmp"
    tmp.write_bytes(b"")
    calls = []

    def sleep(s):  # the build finishes while the query waits
        calls.append(s)
        tmp.unlink(missing_ok=True)
        target.write_bytes(saved)

    monkeypatch.setattr(cli.time, "sleep", sleep)
    code, out, err = run_cli(capsys, flat, "query", "SELECT count(*) AS n FROM trace", "--format", "csv")
    assert code == 0, err
    assert calls and out.splitlines() == ["n", "2"]


def test_a_killed_build_is_not_a_rebuild(flat, capsys):
    (flat / "catalog.duckdb").unlink()
    tmp = flat / ".catalog.duckdb.xyz.tmp"
    tmp.write_bytes(b"")
    old = time.time() - 3600
    os.utime(tmp, (old, old))
    code, _, err = run_cli(capsys, flat, "query", "SELECT 1")
    assert code == 1 and "no catalog at" in err and "run the pipeline" in err


def test_a_corrupt_catalog_is_named_with_how_to_rebuild(flat, capsys):
    cat = flat / "catalog.duckdb"
    cat.write_bytes(b"not a database" * 100)
    code, _, err = run_cli(capsys, flat, "query", "SELECT 1")
    assert code == 1 and "corrupt" in err and "rerun the pipeline" in err and "Traceback" not in err
    artifacts.record_hash(cat)  # corrupt before its hash was recorded: duckdb itself refuses it
    code, _, err = run_cli(capsys, flat, "query", "SELECT 1")
    assert code == 1 and "cannot be opened, it is corrupt" in err and "rerun the pipeline" in err


# -- permissions ----------------------------------------------------------------------------------
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664)])
def test_files_respect_the_umask(tmp_path, umask, mode):
    old = os.umask(umask)
    try:
        project = tmp_path / "proj"
        make_study(project, project / "results")
        results = build(project)
        artifacts.write_file(results / "report" / "report.md", b"# report")
    finally:
        os.umask(old)
    files = [p for p in results.rglob("*") if p.is_file()]
    assert any(p.name.endswith(".blake3") for p in files) and (results / "catalog.duckdb") in files
    assert {p.name: oct(p.stat().st_mode & 0o777) for p in files} == {p.name: oct(mode) for p in files}


# -- issue 23: the catalog spans every verifying study; no WAL; tables verified; bad files named ---
def test_catalog_holds_every_verifying_study_folder_and_lists_the_rest(tmp_path, capsys, monkeypatch):
    project = tmp_path / "proj"
    results = project / "results"
    for name in ("a", "b", "half", "old"):
        make_study(project, results / name)
    artifacts.sidecar(results / "half" / "decision.parquet").unlink()  # half-written
    monkeypatch.setattr(contracts, "CONTRACTS", {})  # a decision of an older schema: no verdict
    old = pd.DataFrame({"reason": ["old"]})
    artifacts.write(
        old, results / "old" / "decision.parquet", kind="decision", provenance={"rule": "decision"}
    )
    monkeypatch.undo()
    counts = catalog.build(
        layout.discover(results / "a"), results / layout.CATALOG_NAME, project_root=project
    )
    assert counts["excluded"] == ["half", "old"]
    code, out, _ = run_cli(
        capsys, results, "query", "SELECT DISTINCT study FROM artifacts ORDER BY 1", "--format", "csv"
    )
    assert code == 0 and out.splitlines() == ["study", "a", "b"]
    code, out, _ = run_cli(
        capsys, results, "query", "SELECT study, problem FROM excluded_studies ORDER BY 1", "--format", "csv"
    )
    lines = out.splitlines()[1:]
    assert lines[0].startswith("half,") and "decision.parquet: no recorded BLAKE3" in lines[0]
    assert lines[1].startswith("old,") and "contract" in lines[1]


def test_query_names_the_study_folders_the_catalog_left_out(tmp_path, capsys):
    """gate sees three study folders, the catalog holds two: query says which one is missing and why."""
    project = tmp_path / "proj"
    results = project / "results"
    for name in ("a", "b", "half"):
        make_study(project, results / name)
    artifacts.sidecar(results / "half" / "decision.parquet").unlink()  # half-written
    catalog.build(layout.discover(results / "a"), results / layout.CATALOG_NAME, project_root=project)
    sql = "SELECT DISTINCT study FROM decision ORDER BY 1"
    code, out, err = run_cli(capsys, results, "query", sql, "--format", "csv")
    assert code == 0 and out.splitlines() == ["study", "a", "b"]
    assert "warning: study 'half'" in err and "not in the catalog" in err and "no recorded BLAKE3" in err
    code, out, err = run_cli(capsys, results, "query", sql, "--study", "half")
    assert code == 1 and out == ""
    assert (
        "study 'half' is not in the catalog: its folder does not verify" in err and "decision.parquet" in err
    )
    code, _, err = run_cli(capsys, results, "query", sql, "--study", "a")
    assert code == 0 and "half" not in err


def test_verify_checks_the_list_of_study_folders_left_out(tmp_path, capsys):
    project = tmp_path / "proj"
    results = project / "results"
    for name in ("a", "half"):
        make_study(project, results / name)
    artifacts.sidecar(results / "half" / "decision.parquet").unlink()  # half-written
    catalog.build(layout.discover(results / "a"), results / layout.CATALOG_NAME, project_root=project)
    code, out, _ = run_cli(capsys, results, "verify", "--study", "a")
    assert code == 0, out
    _edit_catalog(
        results, "DELETE FROM excluded_studies", "INSERT INTO excluded_studies VALUES ('a', 'forged')"
    )
    code, out, _ = run_cli(capsys, results, "verify")
    assert code == 1 and "leaves study 'half' out without listing it" in out
    assert "holds study 'a' and lists it" in out


def test_a_study_folder_is_not_a_results_folder(two_studies, capsys):
    """Inside a study folder every lineage edge would look broken and the catalog missing."""
    for verb in (("verify",), ("query", "SELECT 1"), ("gate",)):
        code, out, err = run_cli(capsys, two_studies / "azure-conv", *verb)
        assert code == 1 and out == "", verb
        assert "azure-conv is a study folder of" in err and "--study azure-conv" in err


def _plant_wal(results: Path) -> Path:
    """A real write-ahead log for the catalog that changes a verdict, as a forger would make one."""
    cat = results / layout.CATALOG_NAME
    work = results.parent / "forge.duckdb"
    work.write_bytes(cat.read_bytes())
    con = duckdb.connect(str(work))
    con.execute("PRAGMA disable_checkpoint_on_shutdown")
    con.execute("SET wal_autocheckpoint = '1TB'")
    con.execute("UPDATE decision SET verdict = 'continue'")
    con.close()
    wal = Path(str(cat) + ".wal")
    Path(str(work) + ".wal").replace(wal)
    return wal


def test_a_planted_wal_is_refused_by_query_and_verify(flat, capsys):
    wal = _plant_wal(flat)
    code, out, err = run_cli(capsys, flat, "query", "SELECT verdict FROM decision", "--format", "csv")
    assert code == 1 and "continue" not in out and "write-ahead log" in err and str(wal) in err
    code, out, _ = run_cli(capsys, flat, "verify")
    assert code == 1 and "write-ahead log" in out
    with pytest.raises(artifacts.ArtifactError, match="write-ahead log"):
        catalog.open_readonly(flat / layout.CATALOG_NAME)


def test_a_wal_planted_after_the_check_is_refused_once_open(flat, capsys, monkeypatch):
    """The race: a WAL planted between the readers' first look and DuckDB opening the catalog."""
    _plant_wal(flat)
    monkeypatch.setattr(catalog, "verify_file", artifacts.verify)  # the first look saw none
    for study in ((), ("--study", "default")):
        code, out, err = run_cli(
            capsys, flat, "query", "SELECT verdict FROM decision", "--format", "csv", *study
        )
        assert code == 1 and "continue" not in out and "write-ahead log" in err, (study, out, err)
    with pytest.raises(artifacts.ArtifactError, match="write-ahead log"):
        catalog.open_readonly(flat / layout.CATALOG_NAME)


def test_build_is_checkpointed_and_removes_a_planted_wal(flat, capsys):
    _plant_wal(flat)
    build(flat.parent)
    assert catalog.wal_file(flat / layout.CATALOG_NAME) is None
    code, out, _ = run_cli(capsys, flat, "query", "SELECT verdict FROM decision", "--format", "csv")
    assert code == 0 and out.splitlines() == ["verdict", "stop"]
    assert run_cli(capsys, flat, "verify")[0] == 0


def test_verify_names_a_data_table_edited_inside_the_catalog(two_studies, capsys):
    cat = two_studies / layout.CATALOG_NAME
    con = duckdb.connect(str(cat))
    con.execute("UPDATE decision SET verdict = 'continue' WHERE study = 'default'")
    con.execute("CHECKPOINT")
    con.close()
    artifacts.record_hash(cat)  # the sidecar re-recorded: its bytes verify
    code, out, _ = run_cli(capsys, two_studies, "verify")
    assert code == 1 and "table 'decision' differs from its artifacts" in out
    assert "table 'trace'" not in out


def test_verify_names_a_table_added_inside_the_catalog(flat, capsys):
    cat = flat / layout.CATALOG_NAME
    con = duckdb.connect(str(cat))
    con.execute("CREATE VIEW verdicts AS SELECT 'continue' AS verdict")
    con.close()
    artifacts.record_hash(cat)
    code, out, _ = run_cli(capsys, flat, "verify")
    assert code == 1 and "view 'verdicts' is not one a build makes" in out


def _edit_catalog(results: Path, *sql: str) -> None:
    """Edit the catalog as a forger would, then re-record its sidecar: its bytes verify."""
    cat = results / layout.CATALOG_NAME
    con = duckdb.connect(str(cat))
    for statement in sql:
        con.execute(statement)
    con.execute("CHECKPOINT")
    con.close()
    artifacts.record_hash(cat)


#: Edits inside the catalog, each with what verify names (one catalog takes them all)
OBJECT_EDITS = [
    (  # the rows unchanged, two column names swapped: SELECT verdict answers the reasons
        (
            "ALTER TABLE decision RENAME COLUMN verdict TO was_verdict",
            "ALTER TABLE decision RENAME COLUMN reason TO verdict",
            "ALTER TABLE decision RENAME COLUMN was_verdict TO reason",
        ),
        "table 'decision' is defined otherwise",
    ),
    (("ALTER TABLE portfolio ALTER candidate TYPE BLOB",), "table 'portfolio' is defined otherwise"),
    (("CREATE MACRO upper(x) AS 'continue'",), "macro 'upper' is not one a build makes"),
    (("CREATE MACRO decisions() AS TABLE SELECT 1",), "table macro 'decisions' is not one"),
    (("CREATE SCHEMA s2", "CREATE TABLE s2.decision AS SELECT 1 AS x"), "schema 's2' is not one"),
    (("CREATE SEQUENCE n",), "sequence 'n' is not one a build makes"),
    (("CREATE TYPE verdicts AS ENUM ('stop')",), "type 'verdicts' is not one a build makes"),
    (("DROP TABLE trace",), "table 'trace' is missing"),
]


def test_verify_names_any_object_edited_inside_the_catalog(two_studies, capsys):
    """Not only rows: the definitions of what the catalog holds are compared with a fresh build's
    (a shadowing macro or swapped column names change answers without changing a row)."""
    _edit_catalog(two_studies, *(sql for edit, _ in OBJECT_EDITS for sql in edit))
    code, out, _ = run_cli(capsys, two_studies, "verify")
    assert code == 1
    for _, named in OBJECT_EDITS:
        assert named in out, (named, out)


def test_verify_reports_a_non_parquet_artifact_in_one_line(flat, capsys):
    bogus = flat / "portfolio" / "run-9.parquet"
    bogus.write_bytes(b"not parquet at all")
    artifacts.record_hash(bogus)
    code, out, err = run_cli(capsys, flat, "verify")
    assert code == 1 and "run-9.parquet: not a readable Parquet artifact" in out and "Traceback" not in err


def test_verify_says_when_the_catalog_forgets_a_verifying_study(tmp_path, capsys):
    """A catalog built for another `studies=` list: verify names the study folder it left out."""
    project = tmp_path / "proj"
    results = project / "results"
    make_study(project, results / "a")
    build(project)
    assert run_cli(capsys, results, "verify")[0] == 0
    make_study(project, results / "b")  # a study run since, by a run whose catalog was lost
    code, out, _ = run_cli(capsys, results, "verify")
    assert code == 1 and "does not hold study 'b', whose folder verifies" in out


def test_verify_accepts_an_artifact_rewritten_with_the_same_bytes(flat, capsys):
    """Only the stat columns of `artifacts` changed (a new mtime): no table was edited."""
    path = flat / "trace.parquet"
    data = path.read_bytes()
    later = time.time() + 10
    path.write_bytes(data)
    os.utime(path, (later, later))
    code, out, _ = run_cli(capsys, flat, "verify")
    assert code == 0, out
