"""The SQL entry point: results/catalog.duckdb.

Tables
- `artifacts`: one row per Parquet artifact (path, kind, blake3, bytes, rows, rule, created_at,
  device, environment, params/code/versions as JSON);
- `lineage`: one row per (artifact, input) edge with the input's BLAKE3 recorded at write time
  and its BLAKE3 now, so a broken chain is one `WHERE NOT matches` away.
Views: one per artifact kind (`trace`, `portfolio`, `portfolio_samples`, `policy_eval`, ...) over
all Parquet files of that kind, so `SELECT` works without knowing paths.

The pipeline hands the catalog every artifact its rules declare (rules/common.smk's registry), so
a stage added later appears without touching this code; `discover` finds them on disk for
`headroom verify`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import tempfile
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from headroom.core import artifacts
from headroom.core.replay import lineage_input

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def discover(results_dir: str | os.PathLike) -> list[Path]:
    """Every artifact (a Parquet file with a recorded BLAKE3) under `results_dir`, sorted."""
    root = Path(results_dir)
    return sorted(
        p for p in root.rglob("*.parquet") if artifacts.sidecar(p).exists() and not p.name.startswith(".")
    )


def _rel(path: Path, base: Path) -> str:
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return path.resolve().as_posix()


def _sql_str(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def build(paths, catalog_path: str | os.PathLike, *, project_root: str | os.PathLike) -> dict[str, int]:
    """(Re)build the catalog over the artifacts `paths` (the pipeline passes every artifact its
    rules declare); paths in it are relative to `project_root`, and `headroom query` runs from
    there. Each artifact is verified first. Written atomically."""
    root = Path(project_root)
    rows, edges = [], []
    by_kind: dict[str, list[str]] = {}
    digests: dict[Path, str] = {}  # every file hashed once, however many artifacts read it

    def current(path: Path) -> str | None:
        key = path.resolve()
        if key not in digests and path.exists():
            digests[key] = artifacts.hash_file(path)
        return digests.get(key)

    for path in sorted(Path(p) for p in paths):
        digest = artifacts.verify(path)
        digests[path.resolve()] = digest
        rel = _rel(path, root)
        kind = artifacts.read_kind(path) or path.stem
        if not _IDENT.match(kind):
            raise ValueError(f"{path}: artifact kind {kind!r} is not a valid SQL view name")
        prov = artifacts.read_provenance(path)
        meta = pq.read_metadata(path)
        env = None
        for inp, h in sorted(prov.get("inputs", {}).items()):
            now = current(lineage_input(path, inp, root))
            edges.append((rel, inp, h, now, now == h))
            if Path(inp).name == "environment.parquet":
                env = h[:16]
        rows.append(
            (
                rel,
                kind,
                digest,
                path.stat().st_size,
                meta.num_rows,
                prov.get("rule"),
                dt.datetime.fromtimestamp(path.stat().st_mtime, tz=dt.UTC).replace(tzinfo=None),
                prov.get("device"),
                env,
                json.dumps(prov.get("params", {}), sort_keys=True),
                json.dumps(prov.get("code", {}), sort_keys=True),
                json.dumps(prov.get("versions", {}), sort_keys=True),
            )
        )
        by_kind.setdefault(kind, []).append(rel)

    catalog_path = Path(catalog_path)
    catalog_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=catalog_path.parent, prefix=f".{catalog_path.name}.", suffix=".tmp")
    os.close(fd)
    os.unlink(tmp)  # duckdb creates the file itself
    try:
        con = duckdb.connect(tmp)
        con.execute(
            """CREATE TABLE artifacts (path VARCHAR PRIMARY KEY, kind VARCHAR, blake3 VARCHAR, bytes BIGINT,
               rows BIGINT, rule VARCHAR, created_at TIMESTAMP, device VARCHAR, environment VARCHAR,
               params JSON, code JSON, versions JSON)"""
        )
        con.execute(
            """CREATE TABLE lineage (artifact VARCHAR, input_path VARCHAR, input_blake3 VARCHAR,
               current_blake3 VARCHAR, matches BOOLEAN)"""
        )
        if rows:
            con.executemany("INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
        if edges:
            con.executemany("INSERT INTO lineage VALUES (?, ?, ?, ?, ?)", edges)
        for kind, paths in sorted(by_kind.items()):
            files = "[" + ", ".join(_sql_str(p) for p in paths) + "]"
            con.execute(f"CREATE VIEW {kind} AS SELECT * FROM read_parquet({files}, union_by_name = true)")
        con.close()
        os.replace(tmp, catalog_path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        Path(tmp + ".wal").unlink(missing_ok=True)
        raise
    return {"artifacts": len(rows), "lineage": len(edges), "views": len(by_kind)}
