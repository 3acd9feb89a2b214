"""The CLI for people and scripts (issue 23): bounded queries, messages instead of tracebacks,
quiet pipes, the results folder found from anywhere in the project, lineage as a check."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from headroom.core import artifacts, catalog, cli, layout
from tests.artifact_helpers import write_filled

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, df: pd.DataFrame, kind: str, inputs: dict[str, str] | None = None) -> str:
    """`df` as an artifact of `kind`, its contract's other required columns filled in."""
    return write_filled(path, df, kind, inputs, code={"scripts/x.py": "c0de" * 16})


def _study(project: Path, name: str, verdict: str) -> None:
    """trace -> decision under results/<name>/, with lineage."""
    folder = project / "results" / name
    trace = folder / "trace.parquet"
    h = _write(trace, pd.DataFrame({"invocation": [0, 1], "phase": ["prefill", "decode"]}), "trace")
    decision = pd.DataFrame({"verdict": [verdict], "reason": ["because"]})
    _write(folder / "decision.parquet", decision, "decision", {trace.relative_to(project).as_posix(): h})


@pytest.fixture
def project(tmp_path) -> Path:
    """Two studies (default: stop, azure-conv: continue) and their catalog."""
    root = tmp_path / "proj"
    _study(root, "default", "stop")
    _study(root, "azure-conv", "continue")
    results = root / "results"
    catalog.build(layout.discover(results), results / layout.CATALOG_NAME, project_root=root)
    return root


def run(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def headroom(*args: str, cwd: Path, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "headroom.core.cli", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        **kw,
    )


def _spawn(*args: str, cwd: Path, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        [sys.executable, *args], cwd=cwd, env=env, stderr=subprocess.PIPE, text=True, **kw
    )


def _interrupt_when_busy(code: str, cwd: Path, **kw) -> tuple[subprocess.Popen, str, float]:
    """Run `code` (after the imports, which print "ready"), Ctrl-C it 2 s into its work; the
    process, its stderr and the seconds it took to stop."""
    proc = _spawn(
        "-c",
        f"import sys; from headroom.core import cli; print('ready', file=sys.stderr, flush=True); {code}",
        cwd=cwd,
        **kw,
    )
    assert proc.stderr.readline().strip() == "ready"
    time.sleep(2)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    err = proc.communicate(timeout=30)[1]
    return proc, err, time.monotonic() - sent


# -- 11: query under a time limit, a memory limit, and Ctrl-C -------------------------------------
LONG_SCAN = "SELECT sum(range % 7) FROM range(100000000000)"  # minutes of CPU, no memory


def test_query_stops_at_its_time_limit_with_a_message(project, capsys):
    start = time.monotonic()
    code, _, err = run(capsys, "--results", str(project / "results"), "query", LONG_SCAN, "--timeout", "1")
    assert time.monotonic() - start < 15
    assert code == cli.EXIT_ERROR and "time limit of 1 s" in err and "--timeout" in err


def test_query_stops_at_its_memory_limit_with_a_message(project, capsys):
    sql = "SELECT list(range) FROM range(200000000)"
    code, _, err = run(capsys, "--results", str(project / "results"), "query", sql, "--memory-limit", "100MB")
    assert code == cli.EXIT_ERROR and "memory than its limit of 100MB" in err and "--memory-limit" in err


class _Discard:
    """stdout that forgets what it is given; with `delay_s`, a slow reader: it keeps what it is
    given, after `delay_s` seconds per write (time the query's limit does not count)."""

    def __init__(self, delay_s: float = 0.0):
        self.delay_s, self.writes = delay_s, []

    def write(self, text: str) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
            self.writes.append(text)

    def flush(self) -> None:
        pass


def test_the_time_limit_counts_the_work_of_printing_rows_too(project, capsys, monkeypatch):
    # cheap for DuckDB, dear to print (1 ms a value here): on main only DuckDB's own time counted,
    # so this printed all 20,000 rows (and a 3 s limit stopped a cross join printed as csv after 17 s)
    jsonable = cli.jsonable
    monkeypatch.setattr(cli, "jsonable", lambda v: time.sleep(0.001) or jsonable(v))
    monkeypatch.setattr(cli, "FETCH_ROWS", 100)
    monkeypatch.setattr(sys, "stdout", _Discard())
    sql = "SELECT range FROM range(20000)"  # 20 s of printing
    start = time.monotonic()
    code = cli.main(
        ["--results", str(project / "results"), "query", sql, "--format", "json", "--timeout", "1"]
    )
    assert time.monotonic() - start < 6
    assert code == cli.EXIT_ERROR and "time limit of 1 s" in capsys.readouterr().err


def test_time_spent_writing_to_a_slow_reader_does_not_count(project, capsys, monkeypatch):
    slow = _Discard(delay_s=0.3)  # a pager that is read slowly: 9 writes, 2.7 s, a 1 s limit
    monkeypatch.setattr(sys, "stdout", slow)
    sql = "SELECT range AS n FROM range(8)"
    code = cli.main(
        ["--results", str(project / "results"), "query", sql, "--format", "json", "--timeout", "1"]
    )
    assert code == 0, capsys.readouterr().err
    assert json.loads("".join(slow.writes)) == [{"n": n} for n in range(8)]


def test_the_table_format_holds_a_bounded_number_of_rows(project, capsys, monkeypatch):
    monkeypatch.setattr(cli, "TABLE_HOLD_MAX", 50)
    results, sql = str(project / "results"), "SELECT range AS n FROM range(1000)"
    code, out, err = run(capsys, "--results", results, "query", sql, "--max-rows", "0")
    assert code == cli.EXIT_ERROR and out == ""
    assert "prints at most 50 rows" in err and "--format csv or json streams every row" in err
    code, out, _ = run(capsys, "--results", results, "query", sql, "--max-rows", "0", "--format", "csv")
    assert code == 0 and len(out.splitlines()) == 1001


@pytest.mark.parametrize(
    "option, value, says",
    [
        ("--timeout", "-1", "-1 is not a time limit"),
        ("--timeout", "nan", "nan is not a time limit"),
        ("--memory-limit", "lots", "'lots' is not a memory size"),
    ],
)
def test_query_limits_refuse_nonsense(project, capsys, option, value, says):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--results", str(project / "results"), "query", "SELECT 1", option, value])
    assert exc.value.code == cli.EXIT_USAGE
    assert says in capsys.readouterr().err


@pytest.mark.parametrize(
    "sql, fmt",
    [(LONG_SCAN, "table"), (LONG_SCAN.replace("sum(range % 7)", "range"), "json")],
    ids=["in-duckdb", "printing-rows"],
)
def test_query_stops_promptly_at_ctrl_c(project, sql, fmt):
    main = f"sys.exit(cli.main(['query', {sql!r}, '--format', {fmt!r}, '--timeout', '0']))"
    proc, err, stop_s = _interrupt_when_busy(main, project, stdout=subprocess.DEVNULL)
    assert stop_s < 5, "SIGINT honoured late"
    assert proc.returncode == cli.EXIT_INTERRUPTED, err
    assert "interrupted" in err and "Traceback" not in err


# -- 16, 25: the results folder -------------------------------------------------------------------
def test_the_filesystem_root_is_not_a_results_folder(capsys):
    start = time.monotonic()
    code, _, err = run(capsys, "--results", "/", "verify")
    assert time.monotonic() - start < 5  # no walk of the filesystem
    assert code == cli.EXIT_ERROR and "/ is not a headroom results folder" in err


def test_results_found_from_a_subfolder_of_the_project(project):
    sub = project / "results" / "default" / "deeper"
    sub.mkdir()
    proc = headroom("gate", "--study", "default", cwd=sub)
    assert proc.returncode == 0 and proc.stdout.startswith("stop"), proc.stderr
    proc = headroom("gate", "--study", "azure-conv", cwd=project / "results")
    assert proc.returncode == 3, proc.stderr


def test_results_from_the_environment_and_after_the_verb(project, tmp_path, capsys, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv(cli.RESULTS_ENV, str(project / "results"))
    assert run(capsys, "gate", "--study", "azure-conv")[0] == 3
    monkeypatch.delenv(cli.RESULTS_ENV)
    assert run(capsys, "gate", "--study", "default", "--results", str(project / "results"))[0] == 0
    code, _, err = run(capsys, "verify", "--results", str(project / "results"))
    assert code == 0, err


@pytest.mark.parametrize(
    "verb",
    [
        ["query", "SELECT 1"],
        ["verify"],
        ["lineage", "x.parquet"],
        ["gate"],
        ["recommend"],
        ["trace", "describe"],
    ],
    ids=lambda v: v[0],
)
def test_every_verb_takes_results_and_study_before_or_after_it(verb):
    after = cli.parse([*verb, "--results", "/r", "--study", "s"])
    before = cli.parse(["--results", "/r", "--study", "s", *verb])
    assert (after.results, after.study) == (before.results, before.study) == ("/r", "s")


def test_no_results_folder_names_where_it_looked(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cli.RESULTS_ENV, raising=False)
    monkeypatch.setattr(cli, "RESULTS_NAME", "results-of-no-one")  # not a stray /tmp/results above
    code, _, err = run(capsys, "gate")
    assert code == cli.EXIT_NOT_RUN
    assert f"no results-of-no-one/ folder in {tmp_path} or any folder above it" in err
    assert cli.RESULTS_ENV in err and "--results" in err


def test_a_project_not_run_yet_says_not_run(tmp_path, capsys, monkeypatch):
    (tmp_path / "Snakefile").write_text("")
    (tmp_path / "config").mkdir()
    monkeypatch.chdir(tmp_path / "config")
    monkeypatch.delenv(cli.RESULTS_ENV, raising=False)
    code, _, err = run(capsys, "gate")
    assert code == cli.EXIT_NOT_RUN and f"no study has run under {tmp_path / 'results'}" in err


# -- 19, 26: lineage ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "target, says",
    [
        ("results/catalog.duckdb", "is the catalog: it has no lineage"),
        ("results/default/report/index.html", "has a recorded BLAKE3 (headroom verify covers it) but"),
        ("/etc/passwd", "is not a headroom artifact"),
        ("results/default", "is a folder; lineage takes one artifact"),
    ],
)
def test_lineage_of_what_has_none_says_why(project, capsys, monkeypatch, target, says):
    artifacts.write_file(project / "results/default/report/index.html", b"<html></html>")
    monkeypatch.chdir(project)
    code, out, err = run(capsys, "lineage", target)
    assert code == cli.EXIT_ERROR and out == ""
    assert says in err and len(err.strip().splitlines()) == 1


def test_lineage_exits_1_when_an_input_is_changed_or_missing(project, capsys, monkeypatch):
    monkeypatch.chdir(project)
    decision = "results/default/decision.parquet"
    assert run(capsys, "lineage", decision)[0] == 0
    trace = project / "results/default/trace.parquet"
    _write(trace, pd.DataFrame({"invocation": [0], "phase": ["prefill"]}), "trace")  # a new trace
    code, out, err = run(capsys, "lineage", decision)
    assert code == cli.EXIT_ERROR and "CHANGED" in out and "missing or changed" in err
    trace.unlink()
    code, out, _ = run(capsys, "lineage", decision)
    assert code == cli.EXIT_ERROR and "MISSING" in out and "Traceback" not in out
    code, out, _ = run(capsys, "lineage", decision, "--json")
    assert code == cli.EXIT_ERROR and json.loads(out)["inputs"][0]["status"] == "missing"


def test_lineage_depth_code_and_json(project, capsys, monkeypatch):
    monkeypatch.chdir(project)
    decision = "results/default/decision.parquet"
    # issue 31 case 28: the artifacts only by default (every rule's code files at every level were
    # 683 lines on an interpreter run); --code adds them, --no-code is the default kept
    _, short, _ = run(capsys, "lineage", decision)
    assert "code " not in short and "results/default/trace.parquet  [rule trace" in short
    _, full, _ = run(capsys, "lineage", decision, "--code")
    assert "code scripts/x.py" in full and "results/default/trace.parquet  [rule trace" in full
    _, out, _ = run(capsys, "lineage", decision, "--no-code")
    assert out == short
    with pytest.raises(SystemExit):
        cli.parse(["lineage", decision, "--code", "--no-code"])
    _, out, _ = run(capsys, "lineage", decision, "--depth", "0")
    assert "trace.parquet  (beyond --depth)" in out
    code, out, _ = run(capsys, "lineage", decision, "--json")
    tree = json.loads(out)
    assert code == 0 and tree["rule"] == "decision" and tree["status"] == "ok"
    assert tree["inputs"][0]["path"] == "results/default/trace.parquet"
    assert tree["inputs"][0]["read_as"] == tree["inputs"][0]["blake3"]


# -- 17, 18: damaged sidecars and artifacts -------------------------------------------------------
def _unlink_then_mkdir(path: Path) -> None:
    path.unlink()
    path.mkdir()


DAMAGE = {
    "empty": lambda side: side.write_bytes(b""),
    "non-utf8": lambda side: side.write_bytes(b"\xff\xfe\x00 not a hash"),
    "directory": _unlink_then_mkdir,
}


@pytest.mark.parametrize("damage", DAMAGE)
@pytest.mark.parametrize(
    "verb, target, says",
    [
        (["gate", "--study", "default"], "default/decision.parquet", "holds no BLAKE3|is not a regular file"),
        (["query", "SELECT 1"], "catalog.duckdb", "is empty or not a hash record|is not a regular file"),
    ],
    ids=["gate", "query"],
)
def test_a_damaged_sidecar_is_one_line_naming_it(project, capsys, damage, verb, target, says):
    side = artifacts.sidecar(project / "results" / target)
    DAMAGE[damage](side)
    code, out, err = run(capsys, "--results", str(project / "results"), *verb)
    assert code == cli.EXIT_ERROR and out == "" and len(err.strip().splitlines()) == 1, err
    assert side.name in err and re.search(says, err) and "rerun the pipeline" in err


@pytest.mark.parametrize("damage", DAMAGE)
def test_verify_and_lineage_name_a_damaged_sidecar(project, capsys, damage):
    side = artifacts.sidecar(project / "results/default/decision.parquet")
    DAMAGE[damage](side)
    code, out, _ = run(capsys, "--results", str(project / "results"), "verify")
    assert code == cli.EXIT_ERROR and f"FAIL {side.parent / 'decision.parquet'}: its sidecar {side}" in out
    code, out, _ = run(
        capsys, "--results", str(project / "results"), "lineage", str(side.parent / "decision.parquet")
    )
    assert code == cli.EXIT_ERROR and "UNREADABLE" in out and side.name in out


def test_a_parquet_name_on_other_bytes_with_a_matching_sidecar_is_refused(project, capsys):
    results = project / "results"
    for name in ("decision", "trace"):
        path = results / "default" / f"{name}.parquet"
        artifacts.write_file(path, b"not parquet at all")  # its sidecar records these very bytes
    code, out, err = run(capsys, "--results", str(results), "verify")
    assert code == cli.EXIT_ERROR and "decision.parquet: not a readable Parquet artifact" in out
    code, out, err = run(capsys, "--results", str(results), "gate", "--study", "default")
    assert code == cli.EXIT_ERROR and out == "" and len(err.strip().splitlines()) == 1
    assert "decision.parquet: not a readable Parquet artifact" in err and "rerun the pipeline" in err
    code, out, err = run(
        capsys, "--results", str(results), "trace", "describe", str(results / "default/trace.parquet")
    )
    assert code == cli.EXIT_ERROR and "trace.parquet: not a readable Parquet artifact" in err


# -- 20, 24: gate ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "rows, says",
    [
        ({"verdict": pd.Series([], dtype=str), "reason": pd.Series([], dtype=str)}, "holds no rows"),
        (
            {"verdict": ["maybe"], "reason": ["?"]},
            "verdict ['maybe'] is not one of stop, continue, no-decision",
        ),
        (  # every row of a decision carries the headline verdict: rows that disagree are refused
            {"verdict": ["stop", "continue"], "reason": ["a", "b"]},
            "verdict ['continue', 'stop'] is not one of stop, continue, no-decision",
        ),
    ],
)
def test_gate_refuses_a_malformed_decision(project, capsys, rows, says):
    path = project / "results/default/decision.parquet"
    _write(path, pd.DataFrame(rows), "decision")
    code, out, err = run(capsys, "--results", str(project / "results"), "gate", "--study", "default")
    assert code == cli.EXIT_ERROR and out == ""
    assert says in err and "rerun the pipeline" in err and len(err.strip().splitlines()) == 1


def test_gate_json_prints_only_json(project, capsys):
    code, out, _ = run(
        capsys, "--results", str(project / "results"), "gate", "--study", "azure-conv", "--json"
    )
    assert code == 3
    assert json.loads(out) == {"study": "azure-conv", "verdict": "continue", "reason": "because"}


def test_gate_json_writes_a_missing_value_as_null(project, capsys):
    """Issue 31, case 27: a missing value is JSON null, whatever its column's type (pandas' NaN in a
    string column is a null in the artifact); a float NaN Arrow holds as a value stays the string NaN,
    as `query --format json` writes it."""
    import pyarrow as pa

    decision = pd.DataFrame(
        {
            "verdict": ["continue"],
            "reason": ["because"],
            "selected_policy": [float("nan")],
            "runs_agree": [None],
        }
    )
    _write(project / "results/default/decision.parquet", decision, "decision")
    code, out, _ = run(capsys, "--results", str(project / "results"), "gate", "--study", "default", "--json")
    assert code == 3 and '"NaN"' not in out
    assert json.loads(out) == {
        "study": "default", "verdict": "continue", "reason": "because", "selected_policy": None, "runs_agree": None
    }  # fmt: skip
    table = pa.table(
        {"verdict": ["stop"], "reason": ["r"], "estimate": pa.array([float("nan")]), "ci_low": [None]}
    )
    artifacts.write(table, project / "results/default/decision.parquet", kind="decision", provenance={})
    code, out, _ = run(capsys, "--results", str(project / "results"), "gate", "--study", "default", "--json")
    assert code == 0 and json.loads(out)["estimate"] == "NaN" and json.loads(out)["ci_low"] is None


# -- 21, 22: Ctrl-C and closed pipes --------------------------------------------------------------
def test_ctrl_c_in_verify_exits_130_without_a_traceback(project):
    slow = (
        "import time; cli.artifacts.hash_file = lambda path: time.sleep(60); sys.exit(cli.main(['verify']))"
    )
    proc, err, stop_s = _interrupt_when_busy(slow, project)
    assert proc.returncode == cli.EXIT_INTERRUPTED, err
    assert "interrupted" in err and "Traceback" not in err and stop_s < 5


@pytest.mark.parametrize("unbuffered", ["1", ""], ids=["unbuffered", "buffered"])
@pytest.mark.parametrize(
    "args",
    [
        ("query", "SELECT * FROM range(200000)", "--format", "csv"),
        ("query", "SELECT 1 AS one"),  # little output: all of it written at the end
        ("lineage", "results/default/decision.parquet"),
        ("gate", "--study", "default"),
    ],
)
def test_a_reader_that_goes_away_ends_the_output_quietly(project, args, unbuffered, monkeypatch):
    # buffered (no PYTHONUNBUFFERED, as a user's shell has it), a small output reaches the pipe
    # only at the end: on main, Python's exit flush then said "Exception ignored ... BrokenPipeError"
    monkeypatch.setenv("PYTHONUNBUFFERED", unbuffered)
    proc = _spawn("-m", "headroom.core.cli", *args, cwd=project, stdout=subprocess.PIPE)
    proc.stdout.readline() if args[1].startswith("SELECT *") else None
    proc.stdout.close()  # `| head -1`
    err = proc.communicate(timeout=60)[1]
    assert proc.returncode == cli.EXIT_BROKEN_PIPE, err
    assert err == ""


# -- 23, 32: query output -------------------------------------------------------------------------
def test_max_rows_caps_every_format_and_says_so(project, capsys):
    results = str(project / "results")
    sql = "SELECT range AS n FROM range(1000)"
    code, out, err = run(capsys, "--results", results, "query", sql, "--max-rows", "5")
    assert code == 0 and len(out.strip().splitlines()) == 1 + 5 and "first 5 rows" in err
    _, out, _ = run(capsys, "--results", results, "query", sql, "--format", "csv", "--max-rows", "5")
    assert out.splitlines() == ["n", "0", "1", "2", "3", "4"]
    _, out, _ = run(capsys, "--results", results, "query", sql, "--format", "json", "--max-rows", "2")
    assert json.loads(out) == [{"n": 0}, {"n": 1}]
    _, out, err = run(capsys, "--results", results, "query", sql, "--format", "csv")
    assert len(out.splitlines()) == 1001 and err == ""  # csv and json: every row by default


def test_negative_max_rows_is_a_usage_error(project, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--results", str(project / "results"), "query", "SELECT 1", "--max-rows", "-5"])
    assert exc.value.code == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "-5 is negative" in err and "Traceback" not in err


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT study, verdict FROM catalog.main.decision",
        "SELECT study, verdict FROM main.decision",
        "SELECT study, verdict FROM query_table('catalog.main.decision')",
        "SELECT study, verdict FROM query('SELECT * FROM catalog.main.decision')",
    ],
)
def test_study_cannot_be_bypassed_by_a_qualified_name(project, capsys, sql):
    results = str(project / "results")
    code, out, err = run(
        capsys, "--results", results, "query", sql, "--study", "azure-conv", "--format", "csv"
    )
    assert "default" not in out
    assert code == cli.EXIT_ERROR or out.splitlines() == ["study,verdict", "azure-conv,continue"], err


def test_a_study_connection_is_as_locked_as_the_catalog(project, capsys):
    results = str(project / "results")
    for sql in (
        "SELECT * FROM read_text('/etc/passwd')",
        f"ATTACH '{results}/catalog.duckdb' AS again",
        "SET enable_external_access = true",
        "CREATE TABLE forged AS SELECT 1 AS x",
    ):
        code, out, err = run(capsys, "--results", results, "query", sql, "--study", "default")
        assert code == cli.EXIT_ERROR and "query failed" in err, sql
    assert (project / "results" / layout.CATALOG_NAME).exists()


def test_json_output_keeps_blob_and_infinity(project, capsys):
    sql = "SELECT 'ab'::BLOB AS b, 'inf'::DOUBLE AS up, '-inf'::DOUBLE AS down, 'nan'::DOUBLE AS nan, NULL AS none"
    code, out, _ = run(capsys, "--results", str(project / "results"), "query", sql, "--format", "json")
    assert code == 0
    assert json.loads(out) == [
        {"b": "6162", "up": "Infinity", "down": "-Infinity", "nan": "NaN", "none": None}
    ]
    assert "Infinity" in out and "null" in out  # strict JSON: no bare Infinity or NaN tokens
    json.loads(out, parse_constant=lambda c: pytest.fail(f"non-standard JSON constant {c}"))


# -- 35: gate's exit code, every time -------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("HEADROOM_SOAK"),
    reason="a 500-call soak (8.5 min on 2 idle cores, 32 min on a shared machine), run once, not in every CI run: HEADROOM_SOAK=1 pytest -m slow -k 500",
)
def test_gate_exit_code_is_the_same_500_times(project):
    codes: dict[int, int] = {}
    for _ in range(500):
        proc = headroom("gate", "--study", "azure-conv", cwd=project)
        codes[proc.returncode] = codes.get(proc.returncode, 0) + 1
    print(f"500 gate calls: exit codes {codes}")
    assert codes == {3: 500}, codes


# -- 37: an unwritable HOME -----------------------------------------------------------------------
def test_snakemake_with_an_unwritable_home_gets_the_fix_not_a_traceback(tmp_path):
    env = {"HOME": "/dev/null", "XDG_CACHE_HOME": ""}
    proc = headroom("snakemake", "--dry-run", cwd=tmp_path, env=env)
    assert proc.returncode == cli.EXIT_ERROR and "Traceback" not in proc.stderr
    assert "cannot create its source cache /dev/null/.cache" in proc.stderr
    assert "XDG_CACHE_HOME=" in proc.stderr
    ok = headroom("snakemake", "--version", cwd=tmp_path, env={**env, "XDG_CACHE_HOME": str(tmp_path)})
    assert ok.returncode == 0 and ok.stdout.strip()[0].isdigit(), ok.stderr


# -- issue 31 cases 16-18, 20, 24: closed or full stdout, bounded counts, locks, rerun hints -------
#: Each verb (`snakemake` hands over to Snakemake, `plan` has its own test) with the exit code it
#: gives on `project`: gate's verdict (default: stop), recommend's "not run" (no recommendation
#: there), trace describe's error (a hand-made trace of two columns), export's "not run" (no
#: dispatch table there).
VERBS = [
    (("query", "SELECT study FROM decision", "--format", "csv"), 0),
    (("verify",), 0),
    (("lineage", "results/default/decision.parquet"), 0),
    (("gate", "--study", "default"), cli.GATE_EXIT["stop"]),
    (("gate", "--study", "azure-conv", "--json"), cli.GATE_EXIT["continue"]),
    (("recommend", "--study", "default"), cli.EXIT_NOT_RUN),
    (("trace", "describe", "--study", "default"), 0),
    (("export", "results/default"), cli.EXIT_NOT_RUN),
]


def _no_traceback(proc: subprocess.CompletedProcess) -> str:
    err = proc.stderr
    assert "Traceback" not in err and "Exception ignored" not in err, err
    return err


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> Path:
    """A results folder whose study has a recommendation (recommend --json prints it)."""
    from tests import analysis_sets as S
    from tests.recommendation_sets import recommend, write_study

    _, d, table, content = recommend(lambda k, t, f, r, m, i: S.BASE_US[k] * (0.8 if f else 1.0), "ABC" * 8)
    return write_study(tmp_path_factory.mktemp("shipped") / "results" / "hand", d, table, content).parent


@pytest.mark.parametrize("args, want", VERBS, ids=[" ".join(a[:2]) for a, _ in VERBS])
def test_every_verb_with_stdout_closed_exits_with_its_code_and_says_so(project, args, want):
    # case 16: `headroom gate >&-` was an AttributeError traceback
    proc = subprocess.run(
        [sys.executable, "-m", "headroom.core.cli", *args],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        timeout=120,
        preexec_fn=lambda: os.close(1),  # noqa: PLW1509 (the child's stdout closed, as `>&-` does)
    )
    err = _no_traceback(proc)
    assert proc.returncode == want, err
    assert "stdout was closed, so the answer was not printed" in err


def test_a_closed_stdout_gives_no_free_descriptor_to_the_catalog(project):
    # with fd 1 closed, the first file opened takes it: a library writing to stdout would write there
    before = (project / "results" / layout.CATALOG_NAME).read_bytes()
    subprocess.run(
        [sys.executable, "-m", "headroom.core.cli", "query", "SELECT * FROM decision"],
        cwd=project,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        timeout=120,
        preexec_fn=lambda: os.close(1),  # noqa: PLW1509
    )
    assert (project / "results" / layout.CATALOG_NAME).read_bytes() == before


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
@pytest.mark.parametrize(
    "args",
    [
        ("recommend", "--json"),
        ("query", "SELECT * FROM recommendation", "--format", "csv"),
        ("query", "SELECT * FROM recommendation", "--format", "json"),
        ("query", "SELECT * FROM recommendation"),
        ("gate", "--json"),
        ("verify",),
    ],
    ids=lambda a: " ".join(a),
)
def test_stdout_on_a_full_device_is_one_line_and_no_traceback(shipped, args):
    # case 17: OSError [Errno 28] tracebacks
    catalog.build(layout.discover(shipped), shipped / layout.CATALOG_NAME, project_root=shipped.parent)
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "headroom.core.cli", *args],
            cwd=shipped.parent,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    err = _no_traceback(proc)
    assert proc.returncode == cli.EXIT_ERROR, err
    assert err.strip().splitlines()[-1] == (
        "headroom: cannot write the answer to stdout (No space left on device); nothing more was written"
    ), err


@pytest.mark.parametrize("flag", [("query", "SELECT 1", "--max-rows"), ("lineage", "x.parquet", "--depth")])
def test_a_count_past_int64_is_a_usage_error(project, flag):
    # case 18: --max-rows 9223372036854775808 was a ValueError traceback from islice
    proc = headroom(*flag, "9223372036854775808", cwd=project)
    err = _no_traceback(proc)
    assert proc.returncode == cli.EXIT_USAGE
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(f"9223372036854775808 is too large; give at most {sys.maxsize} (0: all)")
    )
    assert headroom(
        *flag[:2], "--max-rows" if flag[0] == "query" else "--depth", str(sys.maxsize), cwd=project
    ).returncode in (0, 1)


def _lock(project: Path) -> Path:
    """What a snakemake run killed with kill -9 leaves: its lock files, paths relative to the project."""
    locks = project / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("results/default/trace.parquet\n")
    (locks / "0.output.lock").write_text("results/default/decision.parquet\n")
    return locks


def test_verify_names_a_lock_left_by_a_killed_run(project):
    # case 20: a plain rerun stops on Snakemake's stale lock until `snakemake --unlock`
    locks = _lock(project)
    proc = headroom("verify", cwd=project)
    err = _no_traceback(proc)
    assert proc.returncode == 0 and proc.stdout.startswith("ok: ")  # the results are fine
    assert f"warning: {locks} holds 2 lock(s) of a snakemake run that did not end" in err
    assert "snakemake --unlock" in err and "Directory cannot be locked" in err
    for lock in locks.iterdir():
        lock.unlink()
    assert "lock" not in headroom("verify", cwd=project).stderr


def test_a_lock_held_by_a_running_snakemake_is_not_named(project):
    _lock(project)
    # a process whose command line names snakemake, running in the project (as a live run does)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "snakemake"], cwd=project)
    try:
        assert "lock" not in headroom("verify", cwd=project).stderr
    finally:
        live.kill()
        live.wait()


def _record(project: Path, output: str, rule: str, inputs: list[str], start: float, job: int) -> None:
    """One of Snakemake's metadata records (.snakemake/metadata/<urlsafe base64 of the output>)."""
    import base64

    folder = project / ".snakemake" / "metadata"
    folder.mkdir(parents=True, exist_ok=True)
    name = base64.urlsafe_b64encode(output.encode()).decode()
    record = {"rule": rule, "input": inputs, "job_hash": job, "starttime": start, "endtime": start + 1}
    (folder / name).write_text(json.dumps(record))


def _records(project: Path) -> None:
    """The jobs that made `project`'s results, as Snakemake records them: trace -> decision ->
    catalog (every artifact)."""
    r = "results/default"
    for ext in ("", ".blake3"):
        _record(project, f"{r}/trace.parquet{ext}", "trace", ["scripts/trace.py"], 1.0, 11)
        _record(project, f"{r}/decision.parquet{ext}", "decision", [f"{r}/trace.parquet"], 2.0, 12)
        _record(
            project,
            f"results/catalog.duckdb{ext}",
            "catalog",
            [f"{r}/trace.parquet", f"{r}/decision.parquet"],
            3.0,
            13,
        )


def test_verify_names_the_jobs_a_plain_run_reruns(project):
    # case 24: after a deleted artifact, verify said a plain run "rebuilds only the catalog"
    _records(project)
    (project / "results/default/decision.parquet").unlink()
    proc = headroom("verify", cwd=project)
    _no_traceback(proc)
    stale = next(line for line in proc.stdout.splitlines() if "catalog.duckdb: stale" in line)
    assert "rebuilds only the catalog" not in proc.stdout
    assert stale.endswith(
        "rerun the pipeline (snakemake --cores 1 --resources gpu=1), which reruns decision, catalog "
        "(Snakemake's records of their inputs)"
    ), stale


def test_the_rerun_hint_follows_snakemakes_records(project):
    from headroom.core import reruns

    assert reruns.rerun_rules(project) is None  # no records: the hint says to ask for a dry run
    assert "snakemake --dry-run" in reruns.rerun_hint(project, ["results/catalog.duckdb"])
    _records(project)
    assert reruns.rerun_rules(project) == []  # nothing missing
    assert reruns.rerun_rules(project, ["results/catalog.duckdb"]) == ["catalog"]
    # a deleted sidecar reruns its job, and so everything after it (README, "How reruns behave")
    assert reruns.rerun_rules(project, ["results/default/trace.parquet.blake3"]) == [
        "trace",
        "decision",
        "catalog",
    ]
    assert reruns.rerun_rules(project, changed=["results/default/decision.parquet"]) == ["catalog"]
    (project / "results/default/trace.parquet").unlink()  # what is gone on disk counts by itself
    assert reruns.rerun_rules(project) == ["trace", "decision", "catalog"]
