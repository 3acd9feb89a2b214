"""`headroom verify`: every file's bytes, every artifact's identity and lineage, and the catalog.

Checked, for every study folder under results/ (or one study):
- every file, artifact and lineage edge (headroom/core/integrity.py: recorded BLAKE3s, non-regular
  files refused unread, identity, contract, lineage, recorded hashes whose file is gone);
- the catalog: no write-ahead log beside it, every artifact it loaded unchanged on disk, every
  verifying study folder held, and everything it holds equal to a fresh build from the artifacts
  it lists: first each object's definition (tables and their columns, views, macros, schemas,
  sequences, indexes, types: a renamed column or a macro shadowing a function is named), then
  every table (the data tables, `artifacts`, `lineage`) row for row, so a table edited inside the
  catalog is named.

`--recompute` (headroom/core/recompute.py) also re-runs the derived stages.
"""

from __future__ import annotations

from pathlib import Path

from headroom.core import artifacts, integrity, layout, reruns
from headroom.core import catalog as hcatalog


def _rebuild_hint(results: Path) -> str:
    """Rebuilding the catalog: delete it and rerun, naming the jobs that reruns (headroom/core/reruns.py)."""
    path = results / layout.CATALOG_NAME
    root = results.resolve().parent
    return f"delete {path} and " + reruns.rerun_hint(root, [str(path.resolve().relative_to(root))])


def _stale_hint(results: Path, rel: str) -> str:
    """An artifact the catalog loaded is gone (a plain run writes it again and what is made from it)
    or has other bytes now (a plain run reruns what is made from it, the catalog too)."""
    return reruns.rerun_hint(results.resolve().parent, changed=[rel])


def _stale_catalog(con, results: Path, root: Path, current: dict[str, str], study: str | None) -> list[str]:
    """Artifacts whose bytes differ from what the catalog loaded."""
    path = results / layout.CATALOG_NAME
    problems = []
    for row_study, rel, recorded in con.execute("SELECT study, path, blake3 FROM artifacts").fetchall():
        if study and row_study != study:
            continue
        now = current.get(str((root / rel).resolve()))
        if now is None and (root / rel).exists():
            try:
                now = artifacts.hash_file(root / rel)
            except artifacts.ArtifactError as exc:
                problems.append(f"{path}: it loaded {rel}, which is now refused: {exc}")
                continue
        if now != recorded:
            what = "is missing" if now is None else f"has BLAKE3 {now}"
            problems.append(
                f"{path}: stale, it loaded {rel} with BLAKE3 {recorded} but the file {what}; "
                f"{_stale_hint(results, rel)}"
            )
    return problems


def _span_problems(results: Path, held: set[str], listed: dict[str, str], study: str | None) -> list[str]:
    """The catalog's span against the study folders: it holds each one that verifies and lists
    each other one in `excluded_studies`; none both."""
    path, hint = results / layout.CATALOG_NAME, _rebuild_hint(results)
    out = []
    for name, folder in layout.studies(results).items():
        if study is not None and name != study:
            continue
        if name in held:
            if name in listed:
                out.append(f"{path}: holds study {name!r} and lists it in excluded_studies too; {hint}")
        elif not integrity.folder_problems(folder, results):
            out.append(f"{path}: does not hold study {name!r}, whose folder verifies; {hint}")
        elif name not in listed:
            out.append(f"{path}: leaves study {name!r} out without listing it in excluded_studies; {hint}")
    return out


def catalog_problems(results: Path, root: Path, current: dict[str, str], study: str | None) -> list[str]:
    """The catalog against the artifacts: none changed since it loaded them, every study folder held
    or listed as left out (`_span_problems`), and everything it holds equal to a fresh build's from
    the same artifacts (`catalog.table_differences`: an object or a table edited inside it is named)."""
    import duckdb

    path = results / layout.CATALOG_NAME
    try:
        con = hcatalog.connect_readonly(path)
    except artifacts.ArtifactError as exc:  # a write-ahead log planted since the first look
        return [str(exc)]
    except duckdb.Error as exc:
        return [f"{path}: cannot be opened ({str(exc).splitlines()[0]}); {_rebuild_hint(results)}"]
    try:
        stale = _stale_catalog(con, results, root, current, study)
        rels = [r[0] for r in con.execute("SELECT path FROM artifacts ORDER BY path").fetchall()]
        held = {r[0] for r in con.execute("SELECT DISTINCT study FROM artifacts").fetchall()}
        listed = hcatalog.excluded(con)
    except duckdb.Error as exc:
        return [
            f"{path}: no artifacts or excluded_studies table ({str(exc).splitlines()[0]}); {_rebuild_hint(results)}"
        ]
    finally:
        con.close()
    if stale:
        return stale
    spanned = _span_problems(results, held, listed, study)
    if spanned:
        return spanned
    try:
        return [
            f"{path}: {line}; {_rebuild_hint(results)}"
            for line in hcatalog.table_differences(path, [root / r for r in rels], project_root=root)
        ]
    except (artifacts.ArtifactError, ValueError) as exc:
        return [f"{path}: cannot be rebuilt from the artifacts it lists ({exc}); {_rebuild_hint(results)}"]


def verify_results(
    results: Path, study: str | None = None, folder: Path | None = None
) -> tuple[list[str], int]:
    """(every problem found, number of files checked) for the whole results folder, or for the study
    whose folder is `folder` (the catalog's rows of that study only)."""
    root = results.resolve().parent
    files = layout.hashed_files(results)
    catalog_file = (results / layout.CATALOG_NAME).resolve()
    if folder is not None:
        files = [
            f for f in files if f.resolve().is_relative_to(folder.resolve()) or f.resolve() == catalog_file
        ]
    problems, current = integrity.files_problems(files, root)
    problems += integrity.orphan_sidecars(folder if folder is not None else results, results)
    wal = hcatalog.wal_file(results / layout.CATALOG_NAME)
    if wal is not None:
        problems.append(hcatalog.wal_message(wal))
    elif str(catalog_file) in current:
        problems.extend(catalog_problems(results, root, current, study))
    if not files:
        problems.append(f"no artifacts under {results}")
    return problems, len(files)
