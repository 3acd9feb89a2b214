"""`headroom query | verify | lineage | gate | trace describe` -- the study from the command line.

Exit codes: 0 ok; 1 verification failed or an error; 2 bad usage; `gate`: 0 stop, 3 continue,
4 no-decision.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from headroom.core import artifacts
from headroom.core.replay import lineage_input

GATE_EXIT = {"stop": 0, "continue": 3, "no-decision": 4}
# Statement types `query` runs; anything else (INSERT, CREATE, COPY, ATTACH, SET, ...) is refused.
READ_ONLY_STATEMENTS = {"SELECT", "EXPLAIN"}


def _err(msg: str) -> None:
    print(f"headroom: {msg}", file=sys.stderr)


def _project_root(results: Path) -> Path:
    return results.resolve().parent


# -- query ----------------------------------------------------------------------------------------
def cmd_query(args: argparse.Namespace) -> int:
    import duckdb

    catalog = Path(args.results) / "catalog.duckdb"
    if not catalog.exists():
        _err(f"no catalog at {catalog}; run the pipeline first (snakemake --cores 1 --resources gpu=1)")
        return 1
    catalog_abs = catalog.resolve()
    os.chdir(_project_root(Path(args.results)))  # views name artifacts relative to the project root
    con = duckdb.connect(str(catalog_abs), read_only=True)
    try:
        statements = con.extract_statements(args.sql)
        if not statements:
            _err("no SQL statement given")
            return 2
        for st in statements:
            kind = st.type.name
            if kind not in READ_ONLY_STATEMENTS:
                _err(f"query is read-only: a {kind} statement is not allowed ({st.query.strip()[:60]!r})")
                return 1
        df = None
        for st in statements:
            df = con.execute(st.query).df()
    except duckdb.Error as exc:
        _err(f"query failed: {exc}")
        return 1
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
def verify_results(results: Path) -> list[str]:
    """Every problem found: artifacts whose bytes changed, and lineage edges whose input changed."""
    from headroom.core.catalog import discover

    root = _project_root(results)
    problems: list[str] = []
    found = discover(results)
    current: dict[str, str] = {}
    for path in found:
        try:
            current[str(path.resolve())] = artifacts.verify(path)
        except artifacts.ArtifactError as exc:
            problems.append(str(exc))
    for path in found:
        try:
            prov = artifacts.read_provenance(path)
        except artifacts.ArtifactError as exc:
            problems.append(str(exc))
            continue
        for inp, recorded in sorted(prov.get("inputs", {}).items()):
            inp_path = lineage_input(path, inp, root).resolve()
            if not inp_path.exists():
                problems.append(f"{path}: lineage input {inp} no longer exists (recorded BLAKE3 {recorded})")
                continue
            now = current.get(str(inp_path)) or artifacts.hash_file(inp_path)
            if now != recorded:
                problems.append(f"{path}: lineage input {inp} changed: recorded {recorded}, now {now}")
    if not found:
        problems.append(f"no artifacts under {results}")
    return problems


def cmd_verify(args: argparse.Namespace) -> int:
    results = Path(args.results)
    problems = verify_results(results)
    from headroom.core.catalog import discover

    n = len(discover(results)) if results.exists() else 0
    if problems:
        for p in problems:
            print(f"FAIL {p}")
        print(f"{len(problems)} problem(s) in {n} artifact(s)")
        return 1
    print(f"ok: {n} artifacts verified, every lineage edge matches")
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
    path = Path(args.path)
    if not path.exists():
        _err(f"{path}: no such artifact")
        return 1
    root = _project_root(Path(args.results))
    for line in lineage_tree(path, root):
        print(line)
    return 0


# -- gate -----------------------------------------------------------------------------------------
def cmd_gate(args: argparse.Namespace) -> int:
    path = Path(args.results) / "decision.parquet"
    if not path.exists():
        print(f"no-decision: {path} does not exist yet (run the pipeline)")
        return GATE_EXIT["no-decision"]
    try:
        row = artifacts.read(path).iloc[0].to_dict()
    except artifacts.ArtifactError as exc:
        _err(str(exc))
        return 1
    verdict = str(row.get("verdict", "no-decision"))
    reason = row.get("reason", "")
    print(f"{verdict}: {reason}" if reason else verdict)
    if args.json:
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

    path = Path(args.path or Path(args.results) / "trace.parquet")
    fraction = args.train_fraction
    if fraction is None:  # the study's own split, as the policies stage uses it
        from headroom.core import config as hconfig

        cfg_path = _project_root(Path(args.results)) / "config" / "config.yaml"
        fraction = hconfig.load(cfg_path)["policies"]["train_fraction"] if cfg_path.exists() else 0.5
    try:
        df = artifacts.read(path)
        print(htrace.describe_text(df, fraction))
    except ValueError as exc:  # ArtifactError is a ValueError too
        _err(str(exc))
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="headroom", description=__doc__.splitlines()[0])
    p.add_argument("--results", default="results", help="the pipeline's results folder (default: results)")
    sub = p.add_subparsers(dest="command", required=True)

    q = sub.add_parser("query", help="read-only SQL on results/catalog.duckdb")
    q.add_argument("sql")
    q.add_argument("--format", choices=["table", "csv", "json"], default="table")
    q.add_argument("--max-rows", type=int, default=200)
    q.set_defaults(func=cmd_query)

    v = sub.add_parser("verify", help="re-hash every artifact and check every lineage edge")
    v.set_defaults(func=cmd_verify)

    ln = sub.add_parser("lineage", help="the chain of artifacts and rules behind one artifact")
    ln.add_argument("path")
    ln.set_defaults(func=cmd_lineage)

    g = sub.add_parser("gate", help="print the decision; exit 0 stop, 3 continue, 4 no-decision")
    g.add_argument("--json", action="store_true", help="also print the decision row as JSON")
    g.set_defaults(func=cmd_gate)

    t = sub.add_parser("trace", help="trace tools")
    tsub = t.add_subparsers(dest="trace_command", required=True)
    td = tsub.add_parser("describe", help="the invocation mix of a trace artifact")
    td.add_argument("path", nargs="?", help="trace artifact (default: RESULTS/trace.parquet)")
    td.add_argument(
        "--train-fraction",
        type=float,
        default=None,
        help="chronological train share (default: policies.train_fraction of config/config.yaml)",
    )
    td.set_defaults(func=cmd_trace_describe)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
