"""`headroom query | verify | lineage | gate | recommend | trace describe | plan` -- the studies from the command line.

Exit codes: 0 ok; 1 verification failed or an error; 2 bad usage (an unknown study, no SQL);
`gate`: 0 stop, 3 continue, 4 no-decision, 5 not run (no decision artifact: the pipeline has not
run, or --results names the wrong folder), 6 several studies and no --study; `recommend`: 0, or 5
not run (no recommendation artifact), 1 refused (corrupt, another study's, an older schema), 2, 6 as
above; 130 interrupted
(Ctrl-C); 141 the reader of the output went away (`| head`), quietly.

The results folder: `--results` (before or after the verb), else `$HEADROOM_RESULTS`, else the
first `results/` folder in the working directory or a folder above it.

Security model of `query`: SQL runs on a read-only connection to the catalog with every file
access off (no path allowed, no temp directory, no extension installed or loaded, configuration
locked), so a query can read only the tables the catalog loaded from verified artifacts and can
write nothing; the catalog's own BLAKE3 is checked before it is opened. With `--study`, the same
connection is to a private temporary copy of that study's rows only (removed from disk once
opened), so no name reaches another study's rows. A query runs under a time limit and a memory
limit and stops at Ctrl-C.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import decimal
import importlib
import itertools
import json
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

from headroom import __version__
from headroom.core import artifacts, contracts, defaults, identity, layout, reruns
from headroom.core import catalog as hcatalog
from headroom.core.replay import lineage_input

EXIT_ERROR, EXIT_USAGE = 1, 2
GATE_EXIT = {"stop": 0, "continue": 3, "no-decision": 4}
EXIT_NOT_RUN = 5
EXIT_SEVERAL_STUDIES = 6
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a program stopped by Ctrl-C
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports `yes | head`
QUERY_CONFIG = hcatalog.QUERY_CONFIG
REBUILD_WAIT_S = 10.0
RESULTS_ENV = "HEADROOM_RESULTS"
RESULTS_NAME = "results"  # the pipeline's results folder (rules/common.smk)
QUERY_TIMEOUT_S = 60.0  # `query --timeout`: seconds a query may run (less waits for a slow reader)
QUERY_MEMORY_LIMIT = "2GB"  # `query --memory-limit`: DuckDB's memory_limit (no spilling: no temp dir)
TABLE_MAX_ROWS = 200  # `query --max-rows` of the table format; csv and json print every row
TABLE_HOLD_MAX = 100_000  # rows the table format holds in memory to align them (csv and json stream)
FETCH_ROWS = 10_000  # rows fetched from DuckDB at a time when streaming csv/json


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


def _err(msg: str) -> None:
    print(f"headroom: {msg}", file=sys.stderr)


def _project_root(results: Path) -> Path:
    return results.resolve().parent


# -- where the results are ------------------------------------------------------------------------
def find_results(given: str | None, cwd: Path | None = None) -> Path:
    """The results folder: `given` (--results), else $HEADROOM_RESULTS, else the first `results/`
    in `cwd` or a folder above it (at the latest the project's, beside its Snakefile, which may
    not exist yet); refused when it is not a results folder."""
    if given is None:
        given = os.environ.get(RESULTS_ENV) or None
    if given is not None:
        results = Path(given)
    else:
        cwd = Path.cwd() if cwd is None else cwd
        # the first results/ up the tree; a project's root (its Snakefile) ends the walk
        found = next((d / RESULTS_NAME for d in (cwd, *cwd.parents) if _holds_results(d)), None)
        if found is None:
            raise CliError(
                f"no {RESULTS_NAME}/ folder in {cwd} or any folder above it (has the pipeline run?); "
                f"run headroom inside the project, or name the folder with --results or {RESULTS_ENV}",
                EXIT_NOT_RUN,
            )
        results = found
    check_results_folder(results)
    return results


def _holds_results(folder: Path) -> bool:
    return (folder / RESULTS_NAME).is_dir() or (folder / "Snakefile").is_file()


def _looks_like_results(folder: Path) -> bool:
    """A results folder: empty (not run yet), named results/, or holding the catalog or recorded
    artifacts at its top or in a study folder (a shallow look: never a walk of the tree)."""
    if folder.name == RESULTS_NAME or (folder / layout.CATALOG_NAME).exists():
        return True
    try:
        if next(folder.iterdir(), None) is None:
            return True
    except OSError:
        return False
    marker = "*" + artifacts.SIDECAR_SUFFIX
    return any(folder.glob(marker)) or any(folder.glob("*/" + marker))


def check_results_folder(results: Path) -> None:
    """Refuse a --results that cannot be the pipeline's results folder (`/`, a file, a home)."""
    if not results.exists():
        return  # nothing has run there: each verb says "not run"
    if not results.is_dir():
        raise CliError(f"{results} is not a folder; --results names the pipeline's results folder")
    if (results.parent / layout.CATALOG_NAME).exists() and not (results / layout.CATALOG_NAME).exists():
        raise CliError(
            f"{results} is a study folder of {results.parent}; --results names the results folder "
            f"({results.parent}) and --study {results.name} the study"
        )
    if not _looks_like_results(results):
        raise CliError(
            f"{results} is not a headroom results folder (no {layout.CATALOG_NAME} and no recorded "
            f"artifact in it or in a study folder of it); point --results or {RESULTS_ENV} at the "
            f"pipeline's {RESULTS_NAME}/ folder"
        )


def _rebuild_hint(results: Path) -> str:
    from headroom.core import verify

    return verify._rebuild_hint(results)


def study_folder(results: Path, study: str | None) -> tuple[str, Path]:
    """The study a verb works on and its folder: `study` if given, else the only study there is."""
    found = layout.studies(results)
    if study is not None:
        if study in found:
            return study, found[study]
        if not found:
            raise CliError(f"no study has run under {results} (no artifacts there)", EXIT_NOT_RUN)
        raise CliError(f"unknown study {study!r}; studies under {results}: {', '.join(found)}", EXIT_USAGE)
    if len(found) > 1:
        raise CliError(
            f"{results} holds {len(found)} studies ({', '.join(found)}); name one with --study",
            EXIT_SEVERAL_STUDIES,
        )
    if not found:
        raise CliError(f"no study has run under {results} (no artifacts there)", EXIT_NOT_RUN)
    return next(iter(found.items()))


# -- query ----------------------------------------------------------------------------------------
def _verified_catalog(results: Path) -> Path:
    """The catalog path once its bytes match their recorded BLAKE3; waits out a rebuild briefly."""
    path = results / layout.CATALOG_NAME
    deadline = time.monotonic() + REBUILD_WAIT_S
    while True:
        rebuilding = hcatalog.rebuild_in_progress(path)
        try:
            hcatalog.verify_file(path)
            return path
        except artifacts.ArtifactHashError as exc:
            if not rebuilding:
                raise CliError(
                    f"the catalog {path} is corrupt or changed since it was built (recorded BLAKE3 "
                    f"{exc.recorded}, file has {exc.actual}); {_rebuild_hint(results)}"
                ) from None
        except artifacts.ArtifactError as exc:
            if hcatalog.wal_file(path) is not None or isinstance(exc, artifacts.NotRegularFileError):
                raise CliError(str(exc)) from None
            if path.exists():
                if not rebuilding:
                    raise CliError(
                        f"the catalog {path} has no recorded BLAKE3 ({_sidecar_problem(path)}); "
                        f"{_rebuild_hint(results)}"
                    ) from None
            elif not rebuilding:
                raise CliError(
                    f"no catalog at {path}; run the pipeline first (snakemake --cores 1 --resources gpu=1)"
                ) from None
        if time.monotonic() > deadline:
            raise CliError(f"the catalog {path} is being rebuilt; try again in a moment")
        time.sleep(0.2)


def _sidecar_problem(path: Path) -> str:
    """What is wrong with the sidecar of `path`, which holds no readable BLAKE3."""
    side = artifacts.sidecar(path)
    if not os.path.lexists(side):
        return f"{side.name} is missing"
    if not side.is_file():
        return f"{side.name} is not a regular file"
    return f"{side.name} is empty or not a hash record"


def _open_catalog(path: Path, memory_limit: str, study: str | None):
    """A connection as every reader's (QUERY_CONFIG) with DuckDB's memory limit; with `study`, to
    a copy of that study's rows only, in a private temporary file (removed once opened)."""
    import duckdb

    config = {**QUERY_CONFIG, "memory_limit": memory_limit}
    if study is None:
        return hcatalog.connect_readonly(path, config)  # a WAL planted since the first look refused
    with tempfile.TemporaryDirectory(prefix="headroom-study-") as tmp:
        copy = Path(tmp) / "study.duckdb"
        build = {k: config[k] for k in ("autoinstall_known_extensions", "autoload_known_extensions")}
        with duckdb.connect(str(copy), config={**build, "memory_limit": memory_limit}) as con:
            con.execute(f"ATTACH '{str(path).replace(chr(39), chr(39) * 2)}' AS src (READ_ONLY)")
            hcatalog.refuse_wal(path)  # attached: DuckDB has replayed any WAL there into `src`
            _copy_study(con, study)
        return duckdb.connect(str(copy), read_only=True, config=config)  # open: the file may go


def _copy_study(con, study: str) -> None:
    """Copy every table of the attached catalog `src` into the connection's own database (the
    study's copy), tables with a study column restricted to the rows of `study`."""
    known = [r[0] for r in con.execute("SELECT DISTINCT study FROM src.main.artifacts ORDER BY 1").fetchall()]
    left_out = hcatalog.excluded(con, "src.main")
    if study in left_out:
        raise CliError(hcatalog.excluded_message(study, left_out[study]))
    if study not in known:
        raise CliError(
            f"unknown study {study!r}; the catalog holds: {', '.join(known) or 'none'}", EXIT_USAGE
        )
    columns = con.execute(
        "SELECT table_name, list(column_name) FROM information_schema.columns "
        "WHERE table_catalog = 'src' AND table_schema = 'main' GROUP BY table_name ORDER BY 1"
    ).fetchall()
    for name, cols in columns:
        where = " WHERE study = $study" if "study" in cols else ""
        con.execute(
            f'CREATE TABLE "{name}" AS SELECT * FROM src.main."{name}"{where}',
            {"study": study} if where else None,
        )


def _connect(results: Path, memory_limit: str = QUERY_MEMORY_LIMIT, study: str | None = None):
    import duckdb

    for attempt in range(3):
        path = _verified_catalog(results)
        try:
            return _open_catalog(path, memory_limit, study)
        except duckdb.Error as exc:
            if attempt < 2 and (not path.exists() or hcatalog.rebuild_in_progress(path)):
                time.sleep(0.2)  # replaced while we opened it: take the new one
                continue
            raise CliError(
                f"the catalog {path} cannot be opened, it is corrupt ({str(exc).splitlines()[0]}); "
                f"{_rebuild_hint(results)}"
            ) from None
    raise AssertionError("unreachable")


def stale_artifacts(con, root: Path, study: str | None = None) -> list[str]:
    """Artifacts on disk that no longer match what the catalog loaded: a stat per artifact, and a
    hash only where size or mtime differ from what was recorded."""
    sql = "SELECT path, blake3, bytes, mtime_ns FROM artifacts"
    rows = con.execute(sql + " WHERE study = ?", [study]).fetchall() if study else con.execute(sql).fetchall()
    out = []
    for rel, recorded, size, mtime_ns in rows:
        path = root / rel
        try:
            st = path.stat()
        except FileNotFoundError:
            out.append(f"{rel} is gone from disk (the catalog loaded BLAKE3 {recorded[:16]})")
            continue
        if st.st_size == size and st.st_mtime_ns == mtime_ns:
            continue
        now = artifacts.hash_file(path)
        if now != recorded:
            out.append(
                f"{rel} changed on disk: the catalog loaded BLAKE3 {recorded[:16]}, file has {now[:16]}"
            )
    return out


class QueryStopped(Exception):
    """The query's own work stopped between batches of rows (time limit, Ctrl-C)."""


class _Bounded:
    """Run a query's work in a worker thread so that the main thread stays free for Ctrl-C; the
    work is stopped (con.interrupt inside DuckDB, QueryStopped between batches of rows) on Ctrl-C
    or once it has run `limit_s` seconds of wall time, less the time spent writing output to a
    slow reader (a pager, a full pipe), which does not count."""

    def __init__(self, con, limit_s: float):
        self.con, self.limit_s = con, limit_s
        self._start = time.monotonic()
        self._idle_s, self._idle_since = 0.0, None
        self.stopped: str | None = None

    def write(self, stream, text: str) -> None:
        """`text` onto `stream`, the time it takes not counted against the limit."""
        self._idle_since = since = time.monotonic()
        try:
            stream.write(text)
        finally:
            self._idle_s += time.monotonic() - since
            self._idle_since = None

    def check(self) -> None:
        """Between batches: stop here once the main thread said stop."""
        if self.stopped is not None:
            raise QueryStopped(self.stopped)

    def _over(self) -> bool:
        now, since = time.monotonic(), self._idle_since
        idle = self._idle_s + (now - since if since is not None else 0.0)
        return self.limit_s > 0 and now - self._start - idle > self.limit_s

    def run(self, work):
        box: dict = {}
        done = threading.Event()  # waited on, not Thread.join: a join cut by Ctrl-C marks the
        # thread stopped while it still runs (CPython 3.11 threading._wait_for_tstate_lock)

        def target():
            try:
                box["value"] = work(self)
            except BaseException as exc:  # handed to the main thread
                box["error"] = exc
            finally:
                done.set()

        worker = threading.Thread(target=target, name="headroom-query")
        self._start = time.monotonic()
        worker.start()
        try:
            while not done.wait(0.05):
                if self.stopped is None and self._over():
                    self.stopped = "time"
                    self.con.interrupt()
        except KeyboardInterrupt:
            self.stopped = "interrupt"
            self.con.interrupt()
            done.wait()
        worker.join()
        if "error" in box:
            raise box["error"]
        return box.get("value")


def _query_error(exc, args: argparse.Namespace, stopped: str | None) -> CliError:
    import duckdb

    if stopped == "interrupt":
        return CliError("query interrupted (Ctrl-C)", EXIT_INTERRUPTED)
    if stopped == "time":
        return CliError(
            f"query stopped: it ran past its time limit of {args.timeout:g} s "
            "(--timeout SECONDS sets another, 0 none)"
        )
    if isinstance(exc, duckdb.OutOfMemoryException):
        return CliError(
            f"query stopped: it needs more memory than its limit of {args.memory_limit} "
            "(--memory-limit sets another, e.g. 8GB; nothing spills to disk)"
        )
    return CliError(
        f"query failed: {exc}\n(headroom query is read-only and reaches no file: it reads the "
        "catalog's tables, loaded from verified artifacts, and nothing else)"
    )


def _max_rows(args: argparse.Namespace) -> int | None:
    """Rows to print (None: all): --max-rows for every format, else the table's default."""
    n = args.max_rows if args.max_rows is not None else (TABLE_MAX_ROWS if args.format == "table" else 0)
    return n or None


def cmd_query(args: argparse.Namespace) -> int:
    import duckdb

    results = Path(args.results)
    con = _connect(results, args.memory_limit, args.study)
    bounded = _Bounded(con, args.timeout)
    try:
        for line in stale_artifacts(con, _project_root(results), args.study):
            _err(f"warning: {line}; answers come from the catalog's verified copy: {_rebuild_hint(results)}")
        for name, problem in hcatalog.excluded(con).items():  # none in a --study copy
            _err(f"warning: {hcatalog.excluded_message(name, problem)}")
        statements = con.extract_statements(args.sql)
        if not statements:
            raise CliError("no SQL statement given", EXIT_USAGE)
        bounded.run(lambda b: _run_statements(b, statements, args.format, _max_rows(args)))
    except (duckdb.Error, QueryStopped) as exc:
        raise _query_error(exc, args, bounded.stopped) from None
    finally:
        con.close()
    return 0


def _run_statements(bounded: _Bounded, statements, fmt: str, max_rows: int | None) -> None:
    """Run every statement; print the last one's rows in `fmt`, at most `max_rows` of them."""
    for i, st in enumerate(statements):
        cur = bounded.con.execute(st.query)
        if i < len(statements) - 1:
            continue
        columns = [d[0] for d in cur.description or []]
        rows = _fetch(bounded, cur)
        WRITERS[fmt](columns, itertools.islice(rows, max_rows) if max_rows else rows, _Out(bounded))
        if max_rows and next(rows, None) is not None:
            _err(f"showing the first {max_rows} rows; more exist (--max-rows N shows N, 0 all of them)")


def _fetch(bounded: _Bounded, cur):
    """The result's rows, fetched in batches as DuckDB streams them (never all at once); stopped
    between batches once the main thread said stop (the time limit, Ctrl-C)."""
    while True:
        bounded.check()
        batch = cur.fetchmany(FETCH_ROWS)
        if not batch:
            return
        yield from batch


class _Out:
    """stdout for the writers: what they write goes through `bounded.write` (not timed)."""

    def __init__(self, bounded: _Bounded):
        self.bounded = bounded

    def write(self, text: str) -> None:
        self.bounded.write(sys.stdout, text)


# -- output formats (query and gate) --------------------------------------------------------------
def jsonable(value):
    """A value as strict JSON holds it: BLOB as hex, non-finite floats as the strings NaN,
    Infinity and -Infinity (JSON has no such numbers), times in ISO 8601, DECIMAL as a number,
    lists and structs element by element, anything else as its text."""
    import numpy as np

    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return jsonable(float(value))
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | np.ndarray):
        return [jsonable(v) for v in value]
    return None if _is_missing(value) else str(value)


def _is_missing(value) -> bool:
    import pandas as pd

    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):
        return False


def _cell(value):
    """A value in a csv or table cell: BLOB as hex, lists and structs as JSON, NULL empty."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, list | dict):
        return json.dumps(jsonable(value))
    return value


def _write_csv(columns: list[str], rows, out) -> None:
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([_cell(v) for v in row])


def _write_json(columns: list[str], rows, out) -> None:
    """A JSON array of one object per row, written as the rows arrive."""
    sep = "["
    for row in rows:
        record = dict(zip(columns, map(jsonable, row), strict=True))
        out.write(sep + json.dumps(record, separators=(",", ":"), allow_nan=False))
        sep = ","
    out.write("[]\n" if sep == "[" else "]\n")


def _write_table(columns: list[str], rows, out) -> None:
    """Aligned columns: every row is held in memory first, so at most TABLE_HOLD_MAX of them."""
    import pandas as pd

    held = [[_cell(v) for v in row] for row in itertools.islice(rows, TABLE_HOLD_MAX + 1)]
    if len(held) > TABLE_HOLD_MAX:
        raise CliError(
            f"the table format aligns its columns, so it holds every row in memory, and prints at most "
            f"{TABLE_HOLD_MAX:,} rows; this answer has more: --format csv or json streams every row"
        )
    df = pd.DataFrame(held, columns=columns)
    if not len(df):
        out.write(f"(0 rows) columns: {', '.join(columns)}\n")
        return
    with pd.option_context("display.max_columns", None, "display.width", 200):
        out.write(df.to_string(index=False) + "\n")


WRITERS = {"csv": _write_csv, "json": _write_json, "table": _write_table}


# -- verify ---------------------------------------------------------------------------------------
def verify_results(results: Path, study: str | None = None) -> tuple[list[str], int]:
    """(every problem found, number of files checked): headroom/core/verify.py."""
    from headroom.core import verify

    folder = study_folder(results, study)[1] if study is not None else None
    return verify.verify_results(results, study, folder)


def cmd_verify(args: argparse.Namespace) -> int:
    problems, n = verify_results(Path(args.results), args.study)
    if args.recompute and not problems:  # headroom/core/recompute.py: re-run the derived stages
        from headroom.core import recompute

        folder = study_folder(Path(args.results), args.study)[1] if args.study else None
        problems = recompute.recompute_results(Path(args.results), folder)
    lock = reruns.stale_lock(_project_root(Path(args.results)))
    if lock:  # not a problem of the results, but the next run stops on it
        _err(f"warning: {lock}")
    if problems:
        for p in problems:
            print(f"FAIL {p}")
        print(f"{len(problems)} problem(s) in {n} file(s)")
        return 1
    again = "; the derived stages recompute to the same tables" if args.recompute else ""
    print(f"ok: {n} files verified (artifacts, report, catalog), every lineage edge matches{again}")
    return 0


# -- lineage --------------------------------------------------------------------------------------
BAD_STATUS = ("missing", "changed", "unrecorded", "unreadable")


def _rel(path: Path, root: Path) -> str:
    resolved = path.resolve()
    return str(resolved.relative_to(root) if resolved.is_relative_to(root) else path)


def lineage_node(path: Path, root: Path, depth: int | None = None, seen: set[str] | None = None) -> dict:
    """The lineage of one artifact as data: its rule, BLAKE3 and status (ok, changed, missing,
    unrecorded, unreadable), its code and its inputs, each input an artifact node or a source;
    `depth` levels of inputs (None: all), each artifact expanded once (`seen`)."""
    seen = set() if seen is None else seen
    node: dict = {"path": _rel(path, root), "status": "ok"}
    try:
        node["blake3"] = artifacts.verify(path)
        prov = artifacts.read_provenance(path)
    except artifacts.ArtifactHashError as exc:
        node.update(status="changed", blake3=exc.actual, recorded=exc.recorded)
        prov = _provenance_or_none(path)
    except artifacts.ArtifactError as exc:
        status = (
            "missing"
            if not path.exists()
            else "unrecorded"
            if not artifacts.sidecar(path).exists()
            else "unreadable"
        )
        return {**node, "status": status, "error": str(exc)}
    if prov is None:
        return {**node, "status": "unreadable", "error": f"{path}: not a readable Parquet artifact"}
    node.update(rule=prov.get("rule"), code=dict(sorted(prov.get("code", {}).items())), inputs=[])
    if node["path"] in seen:
        return {**node, "repeated": True, "inputs": []}
    seen.add(node["path"])
    for inp, recorded in sorted(prov.get("inputs", {}).items()):
        node["inputs"].append(_input_node(lineage_input(path, inp, root), inp, recorded, root, depth, seen))
    return node


def _provenance_or_none(path: Path) -> dict | None:
    try:
        return artifacts.read_provenance(path)
    except artifacts.ArtifactError:
        return None


def _input_node(path: Path, name: str, recorded: str, root: Path, depth: int | None, seen: set[str]) -> dict:
    """An input of an artifact: beyond `depth` (not expanded), a source file (no recorded BLAKE3
    of its own) or an artifact node; marked changed when it is not the bytes its reader read."""
    if depth is not None and depth <= 0:
        return {"path": _rel(path, root), "read_as": recorded, "beyond_depth": True}
    if not artifacts.sidecar(path).exists():
        return _source_node(path, name, recorded)
    node = lineage_node(path, root, None if depth is None else depth - 1, seen)
    node["read_as"] = recorded
    if node.get("blake3") not in (None, recorded) and node["status"] == "ok":
        node["status"] = "changed"  # intact itself, but not the bytes its reader read
    return node


def _source_node(path: Path, name: str, recorded: str) -> dict:
    node = {"source": name, "read_as": recorded, "status": "ok"}
    if not path.exists():
        return {**node, "status": "missing"}
    if not path.is_file():
        return {**node, "status": "unreadable", "error": "not a regular file"}
    now = artifacts.hash_file(path)
    return {**node, "blake3": now, "status": "ok" if now == recorded else "changed"}


def lineage_problems(node: dict) -> int:
    """How many nodes of a lineage tree are missing, changed, unrecorded or unreadable."""
    own = int(node.get("status") in BAD_STATUS)
    return own + sum(lineage_problems(n) for n in node.get("inputs", []))


def lineage_lines(node: dict, code: bool = True, pad: str = "") -> list[str]:
    """A lineage tree as indented text, one line per artifact, code file and source."""
    if "source" in node:
        status = (
            ""
            if node["status"] == "ok"
            else f"  {node['status'].upper()} (now {node.get('blake3', '-')[:16]})"
        )
        return [f"{pad}source {node['source']}  {node['read_as'][:16]}{status}"]
    if node.get("beyond_depth"):
        return [f"{pad}{node['path']}  (beyond --depth)"]
    status = node["status"]
    if status == "changed" and "recorded" in node:
        status = f"CHANGED (recorded {node['recorded'][:16]})"
    elif status in BAD_STATUS:
        status = status.upper() + (f" ({node['error']})" if "error" in node else "")
    if "rule" not in node:
        return [f"{pad}{node['path']}  {status}"]
    line = f"{pad}{node['path']}  [rule {node['rule']}, blake3 {node['blake3'][:16]}, {status}]"
    if node.get("read_as") not in (None, node["blake3"]):
        line += f"  <- read as {node['read_as'][:16]}"
    lines = [line + ("  (see above)" if node.get("repeated") else "")]
    if code:
        lines += [f"{pad}  code {name}  {h[:16]}" for name, h in node["code"].items()]
    for sub in node["inputs"]:
        lines += lineage_lines(sub, code, pad + "  ")
    return lines


def _lineage_target(args: argparse.Namespace, results: Path) -> Path:
    """The artifact `lineage` was asked about; anything that has no lineage is refused, saying why."""
    path = Path(args.path)
    if not path.exists() and args.study:  # a path relative to the study's folder
        path = study_folder(results, args.study)[1] / args.path
    if not path.exists():
        raise CliError(f"{args.path}: no such artifact")
    if path.is_dir():
        raise CliError(f"{path} is a folder; lineage takes one artifact (a .parquet file under {results})")
    if path.resolve() == (results / layout.CATALOG_NAME).resolve():
        raise CliError(
            f"{path} is the catalog: it has no lineage of its own (it loads every artifact); its "
            '`lineage` table holds every artifact\'s edges: headroom query "SELECT * FROM lineage"'
        )
    if not path.is_file():
        raise CliError(f"{path} is not a regular file; lineage takes an artifact (a .parquet file)")
    if path.suffix != ".parquet":
        has = (
            "has a recorded BLAKE3 (headroom verify covers it) but"
            if artifacts.sidecar(path).exists()
            else ""
        )
        raise CliError(
            f"{path} {has} is not a headroom artifact, so it records no lineage; lineage takes a "
            f".parquet artifact under {results}, e.g. the decision.parquet the report is built from"
        )
    return path


def cmd_lineage(args: argparse.Namespace) -> int:
    results = Path(args.results)
    node = lineage_node(_lineage_target(args, results), _project_root(results), args.depth)
    if args.json:
        print(json.dumps(jsonable(node), indent=2))
    else:
        for line in lineage_lines(node, code=args.code):
            print(line)
    bad = lineage_problems(node)
    if bad:
        _err(f"{bad} artifact(s) in this lineage are missing or changed; headroom verify lists every problem")
    return EXIT_ERROR if bad else 0


# -- gate -----------------------------------------------------------------------------------------
def _regenerate_hint() -> str:
    return "delete it and rerun the pipeline (snakemake --cores 1 --resources gpu=1)"


def decision_row(path: Path, root: Path) -> dict:
    """The headline row of a decision artifact (its bytes, kind, study and inputs checked,
    headroom/core/identity.py): every row carries the same verdict, one of the gate's; refused otherwise.
    Values as Arrow holds them: a missing value is None, whatever its column's type, and only a float
    column holds NaN (what `query` reads from the catalog's copy of the same rows)."""
    try:
        table = artifacts.read_table(path)
        identity.check(path, root)
    except artifacts.ArtifactError as exc:
        raise CliError(str(exc)) from None
    if not table.num_rows:
        raise CliError(f"{path} holds no rows, a decision holds at least one; {_regenerate_hint()}")
    verdicts = (
        set(map(str, table.column("verdict").to_pylist())) if "verdict" in table.column_names else {None}
    )
    row = table.slice(0, 1).to_pylist()[0]
    if len(verdicts) != 1 or row.get("verdict") not in GATE_EXIT:
        raise CliError(
            f"{path}: verdict {sorted(map(str, verdicts))} is not one of {', '.join(GATE_EXIT)}; {_regenerate_hint()}"
        )
    return row


def cmd_gate(args: argparse.Namespace) -> int:
    results = Path(args.results)
    study, folder = study_folder(results, args.study)
    path = folder / "decision.parquet"
    if not path.exists():
        message = f"not run: {path} does not exist (run the pipeline, or check --results/--study)"
        print(message, file=sys.stderr if args.json else sys.stdout)
        return EXIT_NOT_RUN
    row = decision_row(path, _project_root(results))
    if args.json:  # only JSON on stdout, for scripts
        print(json.dumps(jsonable({"study": study, **row}), allow_nan=False))
    else:
        reason = row.get("reason", "")
        print(f"{row['verdict']}: {reason}" if reason else row["verdict"])
    return GATE_EXIT[row["verdict"]]


# -- recommend ------------------------------------------------------------------------------------
def cmd_recommend(args: argparse.Namespace) -> int:
    """What to ship (headroom/core/recommend.py); exit 0, 5 not run, 1 a refused artifact."""
    from headroom.core import recommend

    results = Path(args.results)
    study, folder = study_folder(results, args.study_name or args.study)
    path = folder / "recommendation.parquet"
    if not path.exists():
        raise CliError(
            f"not run: {path} does not exist (run the pipeline, or check --results/--study)", EXIT_NOT_RUN
        )
    try:
        table = identity.read(path, _project_root(results))
        contracts.check("recommendation", artifacts.to_table(table))
    except (artifacts.ArtifactError, ValueError) as exc:
        raise CliError(f"{exc}; {_regenerate_hint()}") from None
    if table.empty:
        raise CliError(f"{path} holds no rows; {_regenerate_hint()}")
    # the decision it came from is checked for --json too: the same refusals, the same exit codes
    reason = decision_row(folder / "decision.parquet", _project_root(results)).get("reason") or ""
    if args.json:
        print(json.dumps(jsonable({"study": study, "rows": table.to_dict("records")}), allow_nan=False))
        return 0
    print("\n".join(recommend.lines(table, reason)))
    return 0


# -- verbs of higher floors ----------------------------------------------------------------------
#: Modules above core that add their own verb (``add_parser(sub)``): `plan`, the predicted GPU time
#: per study (issue 19); `family check`; `export`, a family's table as its users load it (issue 32);
#: `tune`, a fused-MoE config table from our benchmark (issue 34).
VERBS_UPSTAIRS = (
    "headroom.measure.cost",
    "headroom.families.cli",
    "headroom.families.export",
    "headroom.families.moe.tune",
)


def upstairs(module: str):
    """A module of a higher floor (trace, measure), imported by name when its verb runs: core
    imports nothing above itself, and a verb that is not run costs its module nothing."""
    return importlib.import_module(module)


# -- trace describe -------------------------------------------------------------------------------
def cmd_trace_describe(args: argparse.Namespace) -> int:
    htrace = upstairs("headroom.trace.invocations")
    if args.path:
        path = Path(args.path)
    else:
        path = study_folder(Path(args.results), args.study)[1] / "trace.parquet"
    fraction = args.train_fraction
    if fraction is None:  # the study's own split, as the policies stage uses it
        from headroom.core import config as hconfig

        cfg_path = _project_root(Path(args.results or RESULTS_NAME)) / "config" / "config.yaml"
        fraction = (
            hconfig.load(cfg_path)["policies"]["train_fraction"]
            if cfg_path.exists()
            else defaults.value("policies", "train_fraction")
        )
    try:
        df = artifacts.read(path)
        print(htrace.describe_text(df, fraction, artifacts.read_provenance(path).get("extra")))
    except ValueError as exc:  # ArtifactError is a ValueError too
        raise CliError(str(exc)) from None
    return 0


# -- snakemake ------------------------------------------------------------------------------------
def snakemake_cache_problem() -> str | None:
    """Why Snakemake would stop with a traceback before reading the workflow, if it would: it
    creates its source cache under the user cache folder ($XDG_CACHE_HOME, else ~/.cache) first."""
    from platformdirs import AppDirs  # what Snakemake itself asks (snakemake.common.get_appdirs)

    cache = Path(AppDirs("snakemake", "snakemake").user_cache_dir) / "snakemake" / "source-cache"
    try:
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=cache):
            pass
    except OSError as exc:
        return (
            f"Snakemake cannot create its source cache {cache} ({exc.strerror}; HOME={os.environ.get('HOME')}); "
            "it would stop with a traceback before reading the workflow. Point the cache at a folder "
            "you can write: XDG_CACHE_HOME=/tmp/$USER-cache headroom snakemake ... (or snakemake ...)"
        )
    return None


def cmd_snakemake(args: argparse.Namespace) -> int:
    """`python -m snakemake ARGS` once its cache folder is known to be writable."""
    problem = snakemake_cache_problem()
    if problem:
        raise CliError(problem)
    sys.stdout.flush()
    os.execv(sys.executable, [sys.executable, "-m", "snakemake", *args.args])
    return 0  # not reached: execv replaces this process


def _count(text: str) -> int:
    """argparse type: a whole number from 0 to sys.maxsize (what a count of rows or levels can be)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is negative; give 0 or more")
    if n > sys.maxsize:
        raise argparse.ArgumentTypeError(f"{text} is too large; give at most {sys.maxsize} (0: all)")
    return n


def _seconds(text: str) -> float:
    """argparse type: seconds >= 0 (0: no limit)."""
    try:
        s = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(s) or s < 0:
        raise argparse.ArgumentTypeError(f"{text} is not a time limit; give seconds >= 0 (0: none)")
    return s


def _memory(text: str) -> str:
    """argparse type: a DuckDB memory size such as 500MB, 2GB, 1.5GiB."""
    import re

    if not re.fullmatch(r"\s*\d+(\.\d+)?\s*(B|KB|MB|GB|TB|KiB|MiB|GiB|TiB)\s*", text, re.I):
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size; give e.g. 500MB or 4GB")
    return text.strip()


def _common() -> argparse.ArgumentParser:
    """--results and --study, accepted after the verb too (`headroom gate --study x`); SUPPRESS
    keeps the value given before the verb otherwise."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--results", default=argparse.SUPPRESS, help="the pipeline's results folder")
    common.add_argument("--study", default=argparse.SUPPRESS, help="the study to work on")
    return common


def _add_query(sub, common) -> None:
    q = sub.add_parser("query", parents=[common], help="read-only SQL on results/catalog.duckdb")
    q.add_argument("sql")
    q.add_argument(
        "--format",
        choices=["table", "csv", "json"],
        default="table",
        help="json: BLOB as hex, NaN/inf as the strings NaN, Infinity, -Infinity",
    )
    q.add_argument(
        "--max-rows",
        type=_count,
        default=None,
        help=f"print at most this many rows, 0 all (default: {TABLE_MAX_ROWS} for table, all for csv/json)",
    )
    q.add_argument(
        "--timeout",
        type=_seconds,
        default=QUERY_TIMEOUT_S,
        help=f"seconds the query may run, 0 no limit (default: {QUERY_TIMEOUT_S:g})",
    )
    q.add_argument(
        "--memory-limit",
        type=_memory,
        default=QUERY_MEMORY_LIMIT,
        help=f"memory the query may use (default: {QUERY_MEMORY_LIMIT})",
    )
    q.set_defaults(func=cmd_query)


def _add_lineage(sub, common) -> None:
    ln = sub.add_parser(
        "lineage",
        parents=[common],
        help="the chain of artifacts and rules behind one artifact; exit 1 if one is missing or changed",
    )
    ln.add_argument("path")
    ln.add_argument("--depth", type=_count, default=None, help="levels of inputs to show (default: all)")
    shown = ln.add_mutually_exclusive_group()
    # The artifacts only by default: every rule's code files, at every level, are hundreds of lines.
    shown.add_argument(
        "--code", action="store_true", help="also list each rule's source files and their BLAKE3"
    )
    shown.add_argument("--no-code", action="store_true", help="the artifacts only (the default)")
    ln.add_argument("--json", action="store_true", help="the lineage tree as JSON")
    ln.set_defaults(func=cmd_lineage)


def _add_trace(sub, common) -> None:
    t = sub.add_parser("trace", help="trace tools")
    tsub = t.add_subparsers(dest="trace_command", required=True)
    td = tsub.add_parser("describe", parents=[common], help="the invocation mix of a trace artifact")
    td.add_argument("path", nargs="?", help="trace artifact (default: the study's trace.parquet)")
    td.add_argument(
        "--train-fraction",
        type=float,
        default=None,
        help="chronological train share (default: policies.train_fraction of config/config.yaml)",
    )
    td.set_defaults(func=cmd_trace_describe)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="headroom", description=__doc__.splitlines()[0])
    p.add_argument(
        "--results",
        default=None,
        help=f"the pipeline's results folder (default: ${RESULTS_ENV}, else the first {RESULTS_NAME}/ "
        "here or in a folder above)",
    )
    p.add_argument("--study", default=None, help="the study to work on (default: the only one there is)")
    p.add_argument("--version", action="version", version=f"headroom {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    common = _common()
    _add_query(sub, common)
    v = sub.add_parser("verify", parents=[common], help="re-hash every artifact and check every lineage edge")
    v.add_argument(
        "--recompute",
        action="store_true",
        help="also re-run the CPU-derived stages in a temporary folder and compare their tables",
    )
    v.set_defaults(func=cmd_verify)
    _add_lineage(sub, common)
    g = sub.add_parser(
        "gate",
        parents=[common],
        help="print the decision; exit 0 stop, 3 continue, 4 no-decision, 5 not run, 6 several studies",
    )
    g.add_argument("--json", action="store_true", help="print the decision row as JSON only")
    g.set_defaults(func=cmd_gate)
    r = sub.add_parser(
        "recommend",
        parents=[common],
        help="what to ship: verdict, kernel or policy, how sure (3 lines); exit 5 not run",
    )
    r.add_argument("study_name", nargs="?", default=None, metavar="STUDY", help="the study (or --study)")
    r.add_argument("--json", action="store_true", help="the recommendation artifact's rows as JSON only")
    r.set_defaults(func=cmd_recommend)
    _add_trace(sub, common)
    sm = sub.add_parser(
        "snakemake",
        help="run snakemake ARGS after checking that it can start (a writable cache folder)",
    )
    sm.add_argument("args", nargs=argparse.REMAINDER, help="snakemake's own arguments")
    sm.set_defaults(func=cmd_snakemake)
    for module in VERBS_UPSTAIRS:
        upstairs(module).add_parser(sub)
    return p


def _results_of(args: argparse.Namespace) -> str | None:
    """The results folder every verb works on; `trace describe PATH` does without one."""
    # none reads results (export reads the study folder it is given)
    if args.command in ("snakemake", "plan", "family", "export", "tune"):
        return None
    if args.command == "trace" and args.path:
        try:
            return str(find_results(args.results))
        except CliError:
            return None
    return str(find_results(args.results))


def _quiet_stdout() -> None:
    """The reader of stdout went away (`| head`): drop what is left unwritten, say nothing."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


class StdoutError(Exception):
    """Writing the answer to stdout failed (a full disk, /dev/full, an I/O error): `main` says so."""

    def __init__(self, cause: OSError):
        super().__init__(cause.strerror or str(cause))


class _Stdout:
    """sys.stdout whose write and flush errors (other than a reader gone away, BrokenPipeError) are
    StdoutError, so `main` can tell them from a verb's own OSError and say so in one line."""

    def __init__(self, raw):
        self._raw = raw

    def write(self, text: str) -> int:
        try:
            return self._raw.write(text)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutError(exc) from None

    def flush(self) -> None:
        try:
            self._raw.flush()
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise StdoutError(exc) from None

    def __getattr__(self, name: str):
        return getattr(self._raw, name)


def _open_std_streams() -> list[str]:
    """Which of stdout and stderr were closed at start (`headroom gate >&-`): each is opened on
    /dev/null, so the verb runs as usual (and no file the verb opens takes the free descriptor 1 or
    2, where a library's writes to it would land)."""
    closed = []
    for fd, name in ((1, "stdout"), (2, "stderr")):
        if getattr(sys, name) is None:
            closed.append(name)
            null = os.open(os.devnull, os.O_WRONLY)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "w", closefd=False))  # noqa: SIM115 (kept open for the run)
    return closed


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line; `headroom snakemake` hands every word after the verb to Snakemake."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if args.command == "snakemake":
        args.args = [*extra, *args.args]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: list[str] | None = None) -> int:
    closed = _open_std_streams()
    raw, sys.stdout = sys.stdout, _Stdout(sys.stdout)
    try:
        code = _run(parse(argv))
        sys.stdout.flush()  # here, not at exit: a reader gone away (`| head`) is then quiet too
        if "stdout" in closed:
            _err("stdout was closed, so the answer was not printed; the exit code stands")
        return code
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except StdoutError as exc:
        _quiet_stdout()  # what is left unwritten goes nowhere, at exit too
        _err(f"cannot write the answer to stdout ({exc}); nothing more was written")
        return EXIT_ERROR
    except KeyboardInterrupt:  # while the last output was flushed
        return _interrupted()
    finally:
        sys.stdout = raw


def _run(args: argparse.Namespace) -> int:
    """The verb's exit code; its refusals and Ctrl-C as one line on stderr, never a traceback."""
    try:
        args.results = _results_of(args)
        return args.func(args)
    except CliError as exc:
        _err(str(exc))
        return exc.code
    except artifacts.ArtifactError as exc:  # a file refused on a read path: one line, no traceback
        _err(str(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        return _interrupted()


def _interrupted() -> int:
    _err("interrupted (Ctrl-C); nothing was changed")
    return EXIT_INTERRUPTED


if __name__ == "__main__":
    # `python -m headroom.core.cli`: run the imported module's main, so that a verb of a higher
    # floor raising headroom.core.cli.CliError meets the same class here (not __main__'s copy)
    from headroom.core import cli as _cli

    sys.exit(_cli.main())
