"""Whether a results folder's files are intact: each file against its recorded BLAKE3 (a FIFO, a
device or a directory where one should be is refused, never read), each artifact's identity
(headroom/core/identity.py: kind, study, the inputs beside it) and contract
(headroom/core/contracts.py: an artifact of an older schema fails), each lineage edge (the input
it names still exists with the BLAKE3 recorded then, or is now shipped gzipped beside that name and
decompresses to those bytes), and recorded hashes whose file is gone.

The catalog spans the study folders that pass (headroom/core/catalog.py); `headroom verify`
(headroom/core/verify.py) reports these problems and the catalog's.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import pyarrow as pa

from headroom.core import artifacts, contracts, identity, layout
from headroom.core.replay import lineage_input


def _contract_problems(path: Path) -> list[str]:
    """The artifact's table against its kind's contract. Parsed from an Arrow-owned copy of its
    bytes (artifacts.parse_parquet), never from the Python file object: Arrow's scan wraps that
    in a PythonFile whose last reference one of its worker threads may drop after the interpreter
    began to exit; that thread then needs the GIL, CPython 3.11 ends it with pthread_exit inside a
    noexcept C++ destructor, and the process aborts at exit ("terminate called without an active
    exception", rc -6/134; seen in a core dump of `headroom verify`)."""
    kind = artifacts.read_kind(path)
    if kind not in contracts.CONTRACTS:
        return []
    try:
        contracts.check(kind, artifacts.parse_parquet(artifacts.read_regular(path)))
    except (ValueError, OSError, pa.ArrowInvalid) as exc:
        return [f"{path}: does not meet the current {kind!r} contract (an older schema?): {exc}"]
    return []


def gzipped_as(inp_path: Path, recorded: str) -> bool:
    """Whether an input recorded as a plain file is now shipped gzipped beside its name (a request
    log: conversation_trace.jsonl -> conversation_trace.jsonl.gz, `gzip -9 -n`) with the very bytes
    recorded once decompressed: the lineage edge still holds (a reference recorded from the plain
    file keeps verifying; the plan matches its request log on the shipped name,
    headroom.measure.cost)."""
    packed = inp_path.with_name(inp_path.name + ".gz")
    if not packed.exists():
        return False
    try:
        with artifacts.open_regular(packed) as raw, gzip.GzipFile(fileobj=raw, mode="rb") as fh:
            digest = artifacts.hash_stream(fh)
    except (artifacts.ArtifactError, OSError, EOFError, zlib.error):
        return False
    return digest == recorded


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
            if gzipped_as(inp_path, recorded):
                continue
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


def orphan_sidecars(scope: Path, results: Path) -> list[str]:
    """Recorded hashes whose file is gone, or is not a regular file."""
    out = []
    for side in sorted(scope.rglob("*" + artifacts.SIDECAR_SUFFIX)):
        target = Path(str(side)[: -len(artifacts.SIDECAR_SUFFIX)])
        if layout.hidden(side, results):
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
    files = [f for f in layout.hashed_files(results) if f.resolve().is_relative_to(folder.resolve())]
    problems, _ = files_problems(files, results.resolve().parent)
    return problems + orphan_sidecars(folder, results)
