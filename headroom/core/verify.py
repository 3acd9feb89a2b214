"""`headroom verify`: every file's bytes, every artifact's identity and lineage, and the catalog.

Checked, for every study folder under results/ (or one study):
- every artifact, report page and the catalog against its recorded BLAKE3 (a FIFO, a device or a
  directory where one should be is refused, never read);
- every artifact's identity (headroom/core/identity.py: kind, study, the inputs beside it) and its
  contract (headroom/core/contracts.py: an artifact of an older schema fails);
- every lineage edge: the input it names still exists and has the BLAKE3 recorded then;
- recorded hashes whose file is gone;
- the catalog: no write-ahead log beside it, every artifact it loaded unchanged on disk, and every
  table it holds (the data tables, `artifacts`, `lineage`) equal, row for row, to what a fresh
  build from those artifacts holds, so a table edited inside the catalog is named.

`--recompute` (headroom/core/recompute.py) also re-runs the derived stages.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from headroom.core import artifacts, contracts, identity
from headroom.core import catalog as hcatalog
from headroom.core.replay import lineage_input


def _rebuild_hint(results: Path) -> str:
    return (
        f"delete {results / hcatalog.CATALOG_NAME} and rerun the pipeline "
        "(snakemake --cores 1 --resources gpu=1), which rebuilds only the catalog"
    )


def _contract_problems(path: Path) -> list[str]:
    kind = artifacts.read_kind(path)
    if kind not in contracts.CONTRACTS:
        return []
    try:
        with artifacts.open_regular(path) as fh:
            contracts.check(kind, pq.read_table(fh))
    except (ValueError, OSError, pa.ArrowInvalid) as exc:
        return [f"{path}: does not meet the current {kind!r} contract (an older schema?): {exc}"]
    return []


def artifact_problems(path: Path, root: Path, current: dict[str, str]) -> list[str]:
    """An artifact that verified (its BLAKE3 in `current`): identity, contract, lineage edges."""
    try:
        prov = artifacts.read_provenance(path)
        found = identity.problems(path, root) + _contract_problems(path)
    except artifacts.ArtifactError as exc:  # not Parquet, though its bytes match their sidecar
        return [str(exc)]
    for inp, recorded in sorted(prov.get("inputs", {}).items()):
        inp_path = lineage_input(path, inp, root).resolve()
        if not inp_path.exists():
            found.append(f"{path}: lineage input {inp} no longer exists (recorded BLAKE3 {recorded})")
            continue
        try:
            now = current.get(str(inp_path)) or artifacts.hash_file(inp_path)
        except artifacts.ArtifactError as exc:
            found.append(f"{path}: lineage input {inp}: {exc}")
            continue
        if now != recorded:
            found.append(f"{path}: lineage input {inp} changed: recorded {recorded}, now {now}")
    return found


def _orphan_sidecars(scope: Path, results: Path) -> list[str]:
    """Recorded hashes whose file is gone, or is not a regular file."""
    out = []
    for side in sorted(scope.rglob("*" + artifacts.SIDECAR_SUFFIX)):
        target = Path(str(side)[: -len(artifacts.SIDECAR_SUFFIX)])
        if hcatalog._hidden(side, results):
            continue
        if not target.exists():
            out.append(f"{target}: missing; its recorded BLAKE3 ({side.name}) remains (deleted?)")
        elif not target.is_file():
            out.append(f"{target}: not a regular file (a FIFO, device or directory); remove it and rerun")
    return out


def files_problems(files: list[Path], root: Path) -> tuple[list[str], dict[str, str]]:
    """Hash and identity problems of `files`, and {resolved path: BLAKE3} of those that verified."""
    problems: list[str] = []
    current: dict[str, str] = {}
    for path in files:
        try:
            current[str(path.resolve())] = artifacts.verify(path)
        except artifacts.ArtifactError as exc:
            problems.append(str(exc))
    for path in files:
        if path.suffix == ".parquet" and str(path.resolve()) in current:
            problems.extend(artifact_problems(path, root, current))
    return problems, current


def folder_problems(folder: Path, results: Path) -> list[str]:
    """Everything wrong with one study folder (the catalog is not looked at)."""
    files = [f for f in hcatalog.hashed_files(results) if f.resolve().is_relative_to(folder.resolve())]
    problems, _ = files_problems(files, results.resolve().parent)
    return problems + _orphan_sidecars(folder, results)


def _stale_catalog(con, results: Path, root: Path, current: dict[str, str], study: str | None) -> list[str]:
    """Artifacts whose bytes differ from what the catalog loaded."""
    path = results / hcatalog.CATALOG_NAME
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
                f"{_rebuild_hint(results)}"
            )
    return problems


def catalog_problems(results: Path, root: Path, current: dict[str, str], study: str | None) -> list[str]:
    """The catalog against the artifacts: none changed since it loaded them, and every table equal
    to a fresh build's from the same artifacts (a table edited inside the catalog is named)."""
    import duckdb

    path = results / hcatalog.CATALOG_NAME
    try:
        con = duckdb.connect(str(path), read_only=True, config=hcatalog.QUERY_CONFIG)
    except duckdb.Error as exc:
        return [f"{path}: cannot be opened ({str(exc).splitlines()[0]}); {_rebuild_hint(results)}"]
    try:
        stale = _stale_catalog(con, results, root, current, study)
        rels = [r[0] for r in con.execute("SELECT path FROM artifacts ORDER BY path").fetchall()]
        held = {r[0] for r in con.execute("SELECT DISTINCT study FROM artifacts").fetchall()}
    except duckdb.Error as exc:
        return [f"{path}: no artifacts table ({str(exc).splitlines()[0]}); {_rebuild_hint(results)}"]
    finally:
        con.close()
    if stale:
        return stale
    forgotten = [
        f"{path}: does not hold study {name!r}, whose folder verifies; {_rebuild_hint(results)}"
        for name, folder in hcatalog.studies(results).items()
        if name not in held and (study is None or name == study) and not folder_problems(folder, results)
    ]
    if forgotten:
        return forgotten
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
    files = hcatalog.hashed_files(results)
    catalog_file = (results / hcatalog.CATALOG_NAME).resolve()
    if folder is not None:
        files = [
            f for f in files if f.resolve().is_relative_to(folder.resolve()) or f.resolve() == catalog_file
        ]
    problems, current = files_problems(files, root)
    problems += _orphan_sidecars(folder if folder is not None else results, results)
    wal = hcatalog.wal_file(results / hcatalog.CATALOG_NAME)
    if wal is not None:
        problems.append(hcatalog.wal_message(wal))
    elif str(catalog_file) in current:
        problems.extend(catalog_problems(results, root, current, study))
    if not files:
        problems.append(f"no artifacts under {results}")
    return problems, len(files)
