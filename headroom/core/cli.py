"""`headroom query | verify | lineage | gate | trace describe | plan` -- the studies from the command line.

Exit codes: 0 ok; 1 verification failed or an error; 2 bad usage (an unknown study, no SQL);
`gate`: 0 stop, 3 continue, 4 no-decision, 5 not run (no decision artifact: the pipeline has not
run, or --results names the wrong folder), 6 several studies and no --study.

Security model of `query`: SQL runs on a read-only connection to the catalog with every file
access off (no path allowed, no temp directory, no extension installed or loaded, configuration
locked), so a query can read only the tables the catalog loaded from verified artifacts and can
write nothing; the catalog's own BLAKE3 is checked before it is opened.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from headroom import __version__
from headroom.core import artifacts, identity
from headroom.core import catalog as hcatalog
from headroom.core.replay import lineage_input

EXIT_ERROR, EXIT_USAGE = 1, 2
GATE_EXIT = {"stop": 0, "continue": 3, "no-decision": 4}
EXIT_NOT_RUN = 5
EXIT_SEVERAL_STUDIES = 6
QUERY_CONFIG = hcatalog.QUERY_CONFIG
REBUILD_WAIT_S = 10.0


class CliError(Exception):
    def __init__(self, message: str, code: int = EXIT_ERROR):
        super().__init__(message)
        self.code = code


def _err(msg: str) -> None:
    print(f"headroom: {msg}", file=sys.stderr)


def _project_root(results: Path) -> Path:
    return results.resolve().parent


def _rebuild_hint(results: Path) -> str:
    return (
        f"delete {results / hcatalog.CATALOG_NAME} and rerun the pipeline "
        "(snakemake --cores 1 --resources gpu=1), which rebuilds only the catalog"
    )


def study_folder(results: Path, study: str | None) -> tuple[str, Path]:
    """The study a verb works on and its folder: `study` if given, else the only study there is."""
    found = hcatalog.studies(results)
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
    path = results / hcatalog.CATALOG_NAME
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
                        f"the catalog {path} has no recorded BLAKE3 ({artifacts.sidecar(path).name} is "
                        f"missing); {_rebuild_hint(results)}"
                    ) from None
            elif not rebuilding:
                raise CliError(
                    f"no catalog at {path}; run the pipeline first (snakemake --cores 1 --resources gpu=1)"
                ) from None
        if time.monotonic() > deadline:
            raise CliError(f"the catalog {path} is being rebuilt; try again in a moment")
        time.sleep(0.2)


def _connect(results: Path):
    import duckdb

    for attempt in range(3):
        path = _verified_catalog(results)
        try:
            return duckdb.connect(str(path), read_only=True, config=QUERY_CONFIG)
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


def _restrict_to_study(con, study: str) -> None:
    """Temporary views that shadow every table with a study column by its rows of `study`."""
    db = con.execute("SELECT current_database()").fetchone()[0]
    known = [r[0] for r in con.execute("SELECT DISTINCT study FROM artifacts ORDER BY 1").fetchall()]
    if study not in known:
        raise CliError(
            f"unknown study {study!r}; the catalog holds: {', '.join(known) or 'none'}", EXIT_USAGE
        )
    tables = con.execute(
        "SELECT DISTINCT table_name FROM information_schema.columns "
        "WHERE table_catalog = ? AND table_schema = 'main' AND column_name = 'study'",
        [db],
    ).fetchall()
    literal = "'" + study.replace("'", "''") + "'"
    for (name,) in tables:
        con.execute(
            f'CREATE TEMP VIEW "{name}" AS SELECT * FROM "{db}".main."{name}" WHERE study = {literal}'
        )


def cmd_query(args: argparse.Namespace) -> int:
    import duckdb

    results = Path(args.results)
    con = _connect(results)
    try:
        if args.study:
            _restrict_to_study(con, args.study)
        for line in stale_artifacts(con, _project_root(results), args.study):
            _err(f"warning: {line}; answers come from the catalog's verified copy: {_rebuild_hint(results)}")
        statements = con.extract_statements(args.sql)
        if not statements:
            raise CliError("no SQL statement given", EXIT_USAGE)
        df = None
        for st in statements:
            df = con.execute(st.query).df()
    except duckdb.Error as exc:
        raise CliError(
            f"query failed: {exc}\n(headroom query is read-only and reaches no file: it reads the "
            "catalog's tables, loaded from verified artifacts, and nothing else)"
        ) from None
    finally:
        con.close()
    if args.format == "csv":
        df.to_csv(sys.stdout, index=False)
    elif args.format == "json":
        sys.stdout.write(df.to_json(orient="records", date_format="iso", indent=None) + "\n")
    else:
        import pandas as pd

        with pd.option_context(
            "display.max_rows", args.max_rows, "display.max_columns", None, "display.width", 200
        ):
            print(df.to_string(index=False) if len(df) else f"(0 rows) columns: {', '.join(df.columns)}")
    return 0


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
    if problems:
        for p in problems:
            print(f"FAIL {p}")
        print(f"{len(problems)} problem(s) in {n} file(s)")
        return 1
    again = "; the derived stages recompute to the same tables" if args.recompute else ""
    print(f"ok: {n} files verified (artifacts, report, catalog), every lineage edge matches{again}")
    return 0


# -- lineage --------------------------------------------------------------------------------------
def lineage_tree(path: Path, root: Path, depth: int = 0, seen: set[str] | None = None) -> list[str]:
    seen = set() if seen is None else seen
    rel = path.resolve().relative_to(root) if path.resolve().is_relative_to(root) else path
    lines = []
    pad = "  " * depth
    try:
        digest = artifacts.verify(path)
        status = "ok"
    except artifacts.ArtifactHashError as exc:
        digest, status = exc.actual, f"CHANGED (recorded {exc.recorded[:16]})"
    except artifacts.ArtifactError as exc:
        return [f"{pad}{rel}  MISSING ({exc})"]
    prov = artifacts.read_provenance(path)
    lines.append(f"{pad}{rel}  [rule {prov.get('rule')}, blake3 {digest[:16]}, {status}]")
    if str(rel) in seen:
        return lines
    seen.add(str(rel))
    for name, h in sorted(prov.get("code", {}).items()):
        lines.append(f"{pad}  code {name}  {h[:16]}")
    for inp, recorded in sorted(prov.get("inputs", {}).items()):
        inp_path = lineage_input(path, inp, root)
        if artifacts.sidecar(inp_path).exists():
            sub = lineage_tree(inp_path, root, depth + 1, seen)
            if recorded != artifacts.hash_file(inp_path):
                sub[0] += f"  <- recorded as {recorded[:16]} by {rel}"
            lines.extend(sub)
        else:
            lines.append(f"{pad}  source {inp}  {recorded[:16]}")
    return lines


def cmd_lineage(args: argparse.Namespace) -> int:
    results = Path(args.results)
    path = Path(args.path)
    if not path.exists() and args.study:  # a path relative to the study's folder
        path = study_folder(results, args.study)[1] / args.path
    if not path.exists():
        raise CliError(f"{args.path}: no such artifact")
    for line in lineage_tree(path, _project_root(results)):
        print(line)
    return 0


# -- gate -----------------------------------------------------------------------------------------
def cmd_gate(args: argparse.Namespace) -> int:
    results = Path(args.results)
    study, folder = study_folder(results, args.study)
    path = folder / "decision.parquet"
    if not path.exists():
        print(f"not run: {path} does not exist (run the pipeline, or check --results/--study)")
        return EXIT_NOT_RUN
    try:  # the decision's bytes, kind, study and inputs (headroom/core/identity.py)
        row = identity.read(path, _project_root(results)).iloc[0].to_dict()
    except artifacts.ArtifactError as exc:
        raise CliError(str(exc)) from None
    verdict = str(row.get("verdict", "no-decision"))
    reason = row.get("reason", "")
    print(f"{verdict}: {reason}" if reason else verdict)
    if args.json:
        row = {"study": study, **row}
        print(
            json.dumps(
                {
                    k: (v if isinstance(v, str | int | float | bool) or v is None else str(v))
                    for k, v in row.items()
                }
            )
        )
    return GATE_EXIT.get(verdict, GATE_EXIT["no-decision"])


# -- trace describe -------------------------------------------------------------------------------
def cmd_trace_describe(args: argparse.Namespace) -> int:
    from headroom.trace import invocations as htrace

    if args.path:
        path = Path(args.path)
    else:
        path = study_folder(Path(args.results), args.study)[1] / "trace.parquet"
    fraction = args.train_fraction
    if fraction is None:  # the study's own split, as the policies stage uses it
        from headroom.core import config as hconfig

        cfg_path = _project_root(Path(args.results)) / "config" / "config.yaml"
        fraction = hconfig.load(cfg_path)["policies"]["train_fraction"] if cfg_path.exists() else 0.5
    try:
        df = artifacts.read(path)
        print(htrace.describe_text(df, fraction))
    except ValueError as exc:  # ArtifactError is a ValueError too
        raise CliError(str(exc)) from None
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="headroom", description=__doc__.splitlines()[0])
    p.add_argument("--results", default="results", help="the pipeline's results folder (default: results)")
    p.add_argument("--study", default=None, help="the study to work on (default: the only one there is)")
    # Also accepted after the verb (`headroom gate --study x`); SUPPRESS keeps the global value otherwise.
    study = argparse.ArgumentParser(add_help=False)
    study.add_argument("--study", default=argparse.SUPPRESS, help="the study to work on")
    p.add_argument("--version", action="version", version=f"headroom {__version__}")
    sub = p.add_subparsers(dest="command", required=True)

    q = sub.add_parser("query", parents=[study], help="read-only SQL on results/catalog.duckdb")
    q.add_argument("sql")
    q.add_argument("--format", choices=["table", "csv", "json"], default="table")
    q.add_argument("--max-rows", type=int, default=200)
    q.set_defaults(func=cmd_query)

    v = sub.add_parser("verify", parents=[study], help="re-hash every artifact and check every lineage edge")
    v.add_argument(
        "--recompute",
        action="store_true",
        help="also re-run the CPU-derived stages in a temporary folder and compare their tables",
    )
    v.set_defaults(func=cmd_verify)

    ln = sub.add_parser(
        "lineage", parents=[study], help="the chain of artifacts and rules behind one artifact"
    )
    ln.add_argument("path")
    ln.set_defaults(func=cmd_lineage)

    g = sub.add_parser(
        "gate",
        parents=[study],
        help="print the decision; exit 0 stop, 3 continue, 4 no-decision, 5 not run, 6 several studies",
    )
    g.add_argument("--json", action="store_true", help="also print the decision row as JSON")
    g.set_defaults(func=cmd_gate)

    t = sub.add_parser("trace", help="trace tools")
    tsub = t.add_subparsers(dest="trace_command", required=True)
    td = tsub.add_parser("describe", parents=[study], help="the invocation mix of a trace artifact")
    td.add_argument("path", nargs="?", help="trace artifact (default: the study's trace.parquet)")
    td.add_argument(
        "--train-fraction",
        type=float,
        default=None,
        help="chronological train share (default: policies.train_fraction of config/config.yaml)",
    )
    td.set_defaults(func=cmd_trace_describe)

    from headroom.measure import cost  # `plan`: predicted GPU time per study (issue 19)

    cost.add_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CliError as exc:
        _err(str(exc))
        return exc.code
    except artifacts.ArtifactError as exc:  # a file refused on a read path: one line, no traceback
        _err(str(exc))
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
