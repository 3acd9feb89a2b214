"""The SQL entry point: results/catalog.duckdb, one catalog for every study.

Tables
- `artifacts`: one row per Parquet artifact (study, path, kind, blake3, bytes, mtime_ns, rows, rule,
  created_at, device, environment, params/code/versions as JSON);
- `lineage`: one row per (artifact, input) edge with the input's BLAKE3 recorded at write time
  and its BLAKE3 now, so a broken chain is one `WHERE NOT matches` away;
- one table per artifact kind (`trace`, `portfolio`, `portfolio_samples`, `policy_eval`, ...) with
  the rows of every artifact of that kind, a `study` column first;
- `excluded_studies`: (study, problem) of each study folder under results/ left out because it does
  not verify (half-written, an older schema, another study's artifact in it).

It spans this run's studies and every other study folder under results/ that verifies
(headroom/core/integrity.py), so a run with another `studies=` list forgets none; `headroom query`
names each folder left out. Every artifact's identity is checked as it is loaded
(headroom/core/identity.py). It is built into a fresh file and checkpointed, so no write-ahead log
belongs beside it: readers and `headroom verify` refuse one (DuckDB would replay it into the
answers), and `verify` compares everything it holds with a fresh build from the artifacts it
lists: every object's definition (tables and their columns, views, macros, schemas, sequences,
indexes, types), then every table's rows (`table_differences`).

The kind tables hold the artifacts' *data*, parsed from the very bytes whose BLAKE3 was checked at
build time: a query answers from verified bytes only and never reads a file (`headroom query`
opens the catalog with file access off). The catalog's own BLAKE3 is recorded beside it
(`catalog.duckdb.blake3`), so `headroom verify` covers it and `query` refuses a changed one.

The pipeline hands the catalog every artifact its rules declare (rules/common.smk's registry), so
a stage added later appears without touching this code; where each file lies under results/ (the
study of an artifact, the flat layout of before the study matrix) is headroom/core/layout.py's.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tempfile
import time
from pathlib import Path

import duckdb
import pyarrow as pa

from headroom.core import artifacts, identity, integrity, layout
from headroom.core.replay import lineage_input

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# A temporary catalog modified this recently belongs to a build in progress, not a killed one.
REBUILD_FRESH_S = 120.0
# How every reader opens the catalog: read-only, no file reachable (no allowed path, no temp
# directory), no extension installed or loaded, configuration locked. DuckDB allows the database's
# own files; writing to those is refused as files of an attached database.
QUERY_CONFIG = {
    "enable_external_access": False,
    "autoinstall_known_extensions": False,
    "autoload_known_extensions": False,
    "temp_directory": "",
    "lock_configuration": True,
}
# Reserved table names: a kind may not shadow them.
EXCLUDED_TABLE = "excluded_studies"
_RESERVED = {"artifacts", "lineage", EXCLUDED_TABLE}
WAL_SUFFIX = ".wal"
# The `artifacts` columns that describe a file's stat when the catalog was built, not its bytes (a
# file rewritten with the same bytes has a new mtime): left out when verify compares the table.
STAT_COLUMNS = " EXCLUDE (mtime_ns, created_at)"


def wal_file(catalog_path: str | os.PathLike) -> Path | None:
    """The write-ahead log beside the catalog, if there is one (DuckDB would replay it on open)."""
    wal = Path(str(catalog_path) + WAL_SUFFIX)
    return wal if os.path.lexists(wal) else None


def wal_message(wal: Path) -> str:
    return (
        f"{wal}: a write-ahead log beside the catalog, which DuckDB would replay into its answers; the "
        "catalog is built checkpointed and never written after, so this file is not the pipeline's: "
        f"delete it (and rebuild the catalog if in doubt)"
    )


def refuse_wal(catalog_path: str | os.PathLike) -> None:
    """ArtifactError when a write-ahead log lies beside the catalog."""
    wal = wal_file(catalog_path)
    if wal is not None:
        raise artifacts.ArtifactError(wal_message(wal))


def verify_file(catalog_path: str | os.PathLike) -> str:
    """The catalog's BLAKE3 once it matches the recorded one and no write-ahead log lies beside it."""
    refuse_wal(catalog_path)
    return artifacts.verify(catalog_path)


def connect_readonly(catalog_path: str | os.PathLike, config: dict | None = None):
    """A read-only connection to the catalog (QUERY_CONFIG, or `config`), refused when a write-ahead
    log lies beside it once open: DuckDB replays one as it opens a database, so a WAL planted after
    an earlier check (verify_file) is caught here, and one planted later is never read."""
    con = duckdb.connect(str(catalog_path), read_only=True, config=QUERY_CONFIG if config is None else config)
    try:
        refuse_wal(catalog_path)
    except artifacts.ArtifactError:
        con.close()
        raise
    return con


def open_readonly(catalog_path: str | os.PathLike):
    """A safe connection (QUERY_CONFIG) to the catalog, after checking its recorded BLAKE3."""
    verify_file(catalog_path)
    return connect_readonly(catalog_path)


def excluded(con, schema: str = "main") -> dict[str, str]:
    """{study: its first problem} of the study folders the catalog left out (`excluded_studies`)."""
    rows = con.execute(f"SELECT study, problem FROM {schema}.{EXCLUDED_TABLE} ORDER BY study").fetchall()
    return dict(rows)


def excluded_message(study: str, problem: str) -> str:
    return (
        f"study {study!r} is not in the catalog: its folder does not verify ({problem}); "
        "headroom verify lists every problem"
    )


def _rel(path: Path, base: Path) -> str:
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def temp_files(catalog_path: str | os.PathLike) -> list[Path]:
    """Temporary catalogs beside `catalog_path` (a build in progress, or one that was killed)."""
    catalog_path = Path(catalog_path)
    return sorted(catalog_path.parent.glob(f".{catalog_path.name}.*.tmp*"))


def rebuild_in_progress(catalog_path: str | os.PathLike) -> bool:
    now = time.time()
    for tmp in temp_files(catalog_path):
        try:
            if now - tmp.stat().st_mtime < REBUILD_FRESH_S:
                return True
        except FileNotFoundError:
            continue
    return False


def clean_stale_temps(catalog_path: str | os.PathLike) -> list[Path]:
    """Remove temporary catalogs left by killed builds (Snakemake runs one catalog job at a time)."""
    removed = []
    for tmp in temp_files(catalog_path):
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed


def _with_study(table: pa.Table, study: str, path: Path) -> pa.Table:
    """`table` with a `study` column first; an artifact's own `study` column must agree."""
    if "study" in table.column_names:
        own = set(table.column("study").to_pylist())
        if own - {study}:
            raise ValueError(
                f"{path}: its 'study' column holds {sorted(map(str, own))} but the artifact lies in "
                f"study {study!r}'s folder"
            )
        table = table.drop_columns(["study"])
    return table.add_column(0, "study", pa.array([study] * table.num_rows, pa.string()))


def _current(path: Path, digests: dict[Path, str]) -> str | None:
    """A file's BLAKE3 now (None when it is missing), each file hashed once into `digests`."""
    key = path.resolve()
    if key not in digests and path.exists():
        digests[key] = artifacts.hash_file(path)
    return digests.get(key)


def _read_artifact(path: Path, root: Path, results_root: Path, *, flat: bool, digests: dict[Path, str]):
    """One artifact's catalog row, its lineage edges, its kind and its data (a `study` column
    first); its bytes' BLAKE3 goes into `digests`, the file hashes shared by all artifacts."""
    data, digest = artifacts.read_verified_bytes(path)
    digests[path.resolve()] = digest
    stat = path.stat()
    rel = _rel(path, root)
    study = layout.study_of(path, results_root, flat=flat)
    try:
        table = artifacts.parse_parquet(data)
    except (OSError, pa.ArrowInvalid) as exc:
        raise artifacts.ArtifactError(f"{path}: not a readable Parquet artifact ({exc})") from exc
    meta = table.schema.metadata or {}
    kind = (meta.get(artifacts.META_KIND) or path.stem.encode()).decode()
    if not _IDENT.match(kind) or kind.lower() in _RESERVED:
        raise ValueError(f"{path}: artifact kind {kind!r} is not a valid SQL table name")
    raw = meta.get(artifacts.META_PROVENANCE)
    prov = json.loads(raw) if raw else {}
    edges, env = [], None
    for inp, h in sorted(prov.get("inputs", {}).items()):
        now = _current(lineage_input(path, inp, root), digests)
        edges.append((study, rel, inp, h, now, now == h))
        if Path(inp).name == "environment.parquet":
            env = h[:16]
    row = (
        study,
        rel,
        kind,
        digest,
        len(data),
        stat.st_mtime_ns,
        table.num_rows,
        prov.get("rule"),
        dt.datetime.fromtimestamp(stat.st_mtime, tz=dt.UTC).replace(tzinfo=None),
        prov.get("device"),
        env,
        json.dumps(prov.get("params", {}), sort_keys=True),
        json.dumps(prov.get("code", {}), sort_keys=True),
        json.dumps(prov.get("versions", {}), sort_keys=True),
    )
    return row, edges, kind, _with_study(table.replace_schema_metadata(None), study, path)


def _fill(con, rows, edges, by_kind: dict[str, list[pa.Table]], excluded=()) -> None:
    """Create and fill the catalog's tables: `artifacts`, `lineage`, one per artifact kind, and
    `excluded_studies` (study folders under results/ left out because they do not verify)."""
    con.execute(
        """CREATE TABLE artifacts (study VARCHAR, path VARCHAR PRIMARY KEY, kind VARCHAR,
           blake3 VARCHAR, bytes BIGINT, mtime_ns BIGINT, rows BIGINT, rule VARCHAR,
           created_at TIMESTAMP, device VARCHAR, environment VARCHAR, params JSON, code JSON,
           versions JSON)"""
    )
    con.execute(
        """CREATE TABLE lineage (study VARCHAR, artifact VARCHAR, input_path VARCHAR,
           input_blake3 VARCHAR, current_blake3 VARCHAR, matches BOOLEAN)"""
    )
    con.execute(f"CREATE TABLE {EXCLUDED_TABLE} (study VARCHAR, problem VARCHAR)")
    if rows:
        con.executemany("INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    if edges:
        con.executemany("INSERT INTO lineage VALUES (?, ?, ?, ?, ?, ?)", edges)
    if excluded:
        con.executemany(f"INSERT INTO {EXCLUDED_TABLE} VALUES (?, ?)", list(excluded))
    for kind, tables in sorted(by_kind.items()):
        names = []
        for i, table in enumerate(tables):
            names.append(f"_load_{i}")
            con.register(names[-1], table)
        union = " UNION ALL BY NAME ".join(f"SELECT * FROM {n}" for n in names)
        con.execute(f"CREATE TABLE {kind} AS {union}")
        for n in names:
            con.unregister(n)


def _write_atomically(catalog_path: Path, rows, edges, by_kind, excluded) -> None:
    """Write the catalog into a fresh temporary file, checkpointed (no write-ahead log), then its
    BLAKE3 sidecar, then move it into place; a WAL left beside the final name is removed."""
    catalog_path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale_temps(catalog_path)
    fd, tmp = tempfile.mkstemp(dir=catalog_path.parent, prefix=f".{catalog_path.name}.", suffix=".tmp")
    os.close(fd)
    os.unlink(tmp)  # duckdb creates the file itself (with the umask's permissions)
    try:
        con = duckdb.connect(tmp)
        _fill(con, rows, edges, by_kind, excluded)
        con.execute("CHECKPOINT")
        con.close()
        if wal_file(tmp) is not None:
            raise RuntimeError(f"{tmp}: DuckDB left a write-ahead log after a checkpoint and close")
        # The sidecar first, as for every artifact: whenever the catalog exists its hash does too.
        artifacts.write_sidecar(catalog_path, artifacts.hash_file(tmp))
        Path(str(catalog_path) + WAL_SUFFIX).unlink(missing_ok=True)
        os.replace(tmp, catalog_path)
    except BaseException:
        for leftover in (Path(tmp), Path(tmp + WAL_SUFFIX)):
            leftover.unlink(missing_ok=True)
        raise


def _collect(paths: list[Path], root: Path, results_root: Path):
    """(artifact rows, lineage edges, {kind: tables}) of `paths`, each read once, verified."""
    flat = any(len(Path(_rel(p, results_root)).parts) == 1 for p in paths)
    rows, edges = [], []
    by_kind: dict[str, list[pa.Table]] = {}
    digests: dict[Path, str] = {}  # every file hashed once, however many artifacts read it
    for path in sorted(paths):
        row, own_edges, kind, table = _read_artifact(path, root, results_root, flat=flat, digests=digests)
        rows.append(row)
        edges.extend(own_edges)
        by_kind.setdefault(kind, []).append(table)
    return rows, edges, by_kind


def other_studies(paths: list[Path], results_root: Path) -> tuple[list[Path], list[tuple[str, str]]]:
    """The artifacts of study folders under `results_root` that `paths` do not cover and that verify
    (headroom/core/integrity.py), and (study, first problem) of each folder that does not."""
    covered = {_rel(p, results_root).split("/")[0] for p in paths}
    if layout.is_flat(results_root):
        return [], []
    found, excluded = [], []
    for name, folder in layout.studies(results_root).items():
        if name in covered:
            continue
        problems = integrity.folder_problems(folder, results_root)
        if problems:
            excluded.append((name, f"{problems[0]} ({len(problems)} problem(s))"))
        else:
            found.extend(layout.discover(folder))
    return found, excluded


def build(paths, catalog_path: str | os.PathLike, *, project_root: str | os.PathLike) -> dict[str, object]:
    """(Re)build the catalog over the artifacts `paths` (the pipeline passes every artifact its
    rules declare) and those of every other study folder under results/ that verifies (folders
    that do not are left out and listed in `excluded_studies`); paths in it are relative to
    `project_root`. Each artifact's bytes are read once, checked against their recorded BLAKE3 and
    its identity (kind, study, lineage: headroom/core/identity.py; a problem in `paths` is an
    error naming it), and loaded into the catalog's tables. Written into a fresh file, atomically,
    its own BLAKE3 beside it; temporary catalogs of killed builds are removed first."""
    root = Path(project_root)
    catalog_path = Path(catalog_path)
    results_root = catalog_path.parent
    paths = sorted(Path(p) for p in paths)
    found = [line for p in paths for line in identity.problems(p, root)]
    if found:
        raise identity.IdentityError("; ".join(found))
    others, excluded = other_studies(paths, results_root)
    rows, edges, by_kind = _collect(paths + others, root, results_root)
    _write_atomically(catalog_path, rows, edges, by_kind, excluded)
    return {
        "artifacts": len(rows),
        "lineage": len(edges),
        "tables": len(by_kind),
        "excluded": [name for name, _ in excluded],
    }


# Every object a database holds: (what, schema, name, definition); $db is the database's name.
_OBJECTS_SQL = """
SELECT 'table', schema_name, table_name, sql FROM duckdb_tables() WHERE database_name = $db
UNION ALL SELECT 'view', schema_name, view_name, sql FROM duckdb_views()
    WHERE database_name = $db AND NOT internal
UNION ALL SELECT 'schema', 'main', schema_name, '' FROM duckdb_schemas()
    WHERE database_name = $db AND NOT internal
UNION ALL SELECT replace(function_type, '_', ' '), schema_name, function_name,
    coalesce(macro_definition, '') FROM duckdb_functions() WHERE database_name = $db AND NOT internal
UNION ALL SELECT 'sequence', schema_name, sequence_name, sql FROM duckdb_sequences() WHERE database_name = $db
UNION ALL SELECT 'index', schema_name, index_name, sql FROM duckdb_indexes() WHERE database_name = $db
UNION ALL SELECT 'type', schema_name, type_name, logical_type FROM duckdb_types()
    WHERE database_name = $db AND NOT internal
"""


def _objects(con, database: str) -> dict[tuple[str, str], str]:
    """{(what, name): definition} of every table, view, schema, macro, sequence, index and type in
    `database` (a name outside the main schema qualified by its schema)."""
    rows = con.execute(_OBJECTS_SQL, {"db": database}).fetchall()
    return {
        (what, name if schema == "main" else f"{schema}.{name}"): sql or ""
        for what, schema, name, sql in rows
    }


def _definition_differences(built: dict, held: dict) -> list[str]:
    """Objects of the catalog (`held`) that a fresh build (`built`) does not make, or makes otherwise:
    a column renamed, retyped or moved, a macro shadowing a function, a view, another schema."""
    out = [
        f"{w} {n!r} is not one a build makes (added inside the catalog)"
        for w, n in sorted(held.keys() - built.keys())
    ]
    out += [
        f"{w} {n!r} is missing (dropped inside the catalog)" for w, n in sorted(built.keys() - held.keys())
    ]
    out += [
        f"{w} {n!r} is defined otherwise than a build defines it (edited inside the catalog): "
        f"{held[w, n]!r}, a build's {built[w, n]!r}"
        for w, n in sorted(built.keys() & held.keys())
        if held[w, n] != built[w, n]
    ]
    return out


def _row_differences(con, tables: list[str]) -> list[str]:
    """Tables of `cat` whose rows differ from the fresh build's in `memory` (same definitions)."""
    out = []
    for t in tables:
        cols = STAT_COLUMNS if t == "artifacts" else ""
        extra, lost = (
            con.execute(
                f'SELECT count(*) FROM (SELECT *{cols} FROM {a}."{t}" EXCEPT ALL SELECT *{cols} FROM {b}."{t}")'
            ).fetchone()[0]
            for a, b in (("cat.main", "memory.main"), ("memory.main", "cat.main"))
        )
        if extra or lost:
            out.append(
                f"table {t!r} differs from its artifacts ({extra} row(s) not in them, {lost} of "
                "theirs missing): it was edited inside the catalog"
            )
    return out


def table_differences(catalog_path: Path, paths: list[Path], *, project_root: Path) -> list[str]:
    """How the catalog differs from a fresh build over `paths` (the artifacts it lists): first every
    object it holds against a build's (tables, columns and their types, views, macros, schemas,
    sequences, indexes, types), then, when those agree, every table's rows, each named with how
    many rows differ. `excluded_studies`' rows are not compared (they describe other folders at
    build time), nor the stat columns of `artifacts` (STAT_COLUMNS)."""
    rows, edges, by_kind = _collect(paths, Path(project_root), catalog_path.parent)
    con = duckdb.connect()
    try:
        _fill(con, rows, edges, by_kind)
        con.execute("ATTACH ? AS cat (READ_ONLY)", [str(catalog_path)])
        built, held = _objects(con, "memory"), _objects(con, "cat")
        out = _definition_differences(built, held)
        if out:
            return out
        tables = sorted(n for w, n in built if w == "table" and n != EXCLUDED_TABLE)
        return _row_differences(con, tables)
    finally:
        con.close()
