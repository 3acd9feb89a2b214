"""What an artifact is and where it belongs, checked by every reader, not only its bytes.

A verified BLAKE3 says a file is the one its sidecar names; it does not say the file is the right
one. Another study's decision copied in with its sidecar, a trace copied over the decision, a
calibration and a graph sweep swapped: each verifies. So every reader (the stage harness for a
job's inputs, `headroom gate`, the catalog build, `headroom verify`) also checks the artifact's
identity from its provenance:

- kind: the kind recorded in the file (`headroom.kind`) is the kind its name says
  (`artifacts.kind_of_name`), and a portfolio run is the run its name says (`artifacts.run_problem`);
- study: an artifact the pipeline derived (policies, decision, roofline, ...) was made for the study
  whose folder it lies in (`wildcards.study`); measured artifacts may come from another study (a
  replay imports them byte for byte), so they are held to their folder's environment.parquet
  instead: recorded for the same study, in the same environment (`replay.IDENTITIES`), and to their
  lineage;
- lineage: every input it recorded that is an artifact of its study folder still has the BLAKE3
  recorded then, so an artifact made from another run's files is refused (the calibration records
  the environment it was measured in, so a calibration of another run is refused too).
- the deliverable: a recommendation artifact's dispatch.json beside it is the regular file whose
  BLAKE3 it recorded (``dispatch_problems``), so `headroom recommend` never shows a dispatch_blake3
  that is not the file's.

A recorded folder is checked before a replay plans (headroom/core/replay.py), with the same kind
check and one more for folders recorded before the calibration's environment edge.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from headroom.core import artifacts, layout
from headroom.core.replay import IDENTITIES, MEASURED, lineage_input

#: Kinds measured on a device (or imported by a replay): their study is the one that measured them;
#: and the engine's steps a kernel family's trace is made from, an input of the measurements as the
#: trace is (`headroom verify --recompute` copies them, as it copies the trace).
MEASURED_KINDS = frozenset(MEASURED) | {"portfolio", "portfolio_samples", "steps"}


class IdentityError(artifacts.ArtifactError):
    """An artifact verifies but is not the artifact its name and folder say."""


def folder_study(path: str | os.PathLike, project_root: str | os.PathLike) -> str | None:
    """The study folder an artifact lies in (results/<study>/...), None outside one. Where it lies,
    not where links lead: results/c linked to results/b is study c's folder (a results folder that
    is itself a link, to a data disk, is matched by its target too)."""
    results = Path(project_root) / "results"
    for base, here in (
        (Path(os.path.abspath(results)), Path(os.path.abspath(path))),
        (results.resolve(), Path(path).parent.resolve() / Path(path).name),
    ):
        if here.is_relative_to(base):
            rel = here.relative_to(base).parts
            return rel[0] if len(rel) > 1 else None
    return None


def _lineage_problems(path: Path, prov: dict[str, Any], root: Path, study: str) -> list[str]:
    """Recorded inputs in the artifact's study folder whose recorded BLAKE3 differs from now."""
    out = []
    folder = (root.resolve() / "results" / study).resolve()
    for inp, recorded in sorted(prov.get("inputs", {}).items()):
        beside = lineage_input(path, inp, root).resolve()
        if not beside.is_relative_to(folder) or not artifacts.sidecar(beside).is_file():
            continue
        try:
            now = artifacts.recorded_hash(beside)
        except artifacts.ArtifactError:
            continue  # the input's own check names it
        if now != recorded:
            out.append(
                f"{path}: made from a {beside.name} with BLAKE3 {recorded[:16]}, but the one beside it "
                f"({beside}) has {now[:16]}: it belongs to another run or study"
            )
    return out


def _measured_problems(path: Path, prov: dict[str, Any], root: Path, study: str) -> list[str]:
    """A measured artifact recorded for another study or in another environment than its folder's
    environment.parquet (a generation-1 calibration copied into a generation-2 replay, say)."""
    env = root.resolve() / "results" / study / "environment.parquet"
    if path.resolve() == env or not env.is_file():
        return []
    try:
        env_prov = artifacts.read_provenance(env)
    except artifacts.ArtifactError:
        return []  # the environment's own check names it
    out = []
    for key, (value_of, words) in IDENTITIES.items():
        mine, theirs = value_of(prov), value_of(env_prov)
        if mine != theirs and (key == "study" or None not in (mine, theirs)):
            out.append(
                f"{path}: recorded {words} {mine!r}, but its folder's {env.name} {words} {theirs!r}: it "
                "belongs to another run; delete it and its sidecar and rerun (or replay the folder again)"
            )
    return out


def dispatch_problems(path: str | os.PathLike, prov: dict[str, Any] | None = None) -> list[str]:
    """The dispatch table beside the recommendation artifact at `path` (results/<study>/dispatch.json)
    against the BLAKE3 the artifact recorded when the stage wrote both: in its provenance
    (``extra.dispatch``) and its ``dispatch_blake3`` column, which must agree. The table's own sidecar
    only says its bytes are the ones someone hashed: an edited table with a fresh sidecar, another
    study's copied in, a deleted one or a link to another file passes that, and fails this. The table
    must be a regular file, not a link: the stage never writes one."""
    path = Path(path)
    table = path.parent / layout.DISPATCH_NAME
    hint = f"delete {table.name} and its sidecar and rerun the pipeline, which writes both again"
    try:
        prov = artifacts.read_provenance(path) if prov is None else prov
        column = artifacts.read_table(path).column("dispatch_blake3").to_pylist()
    except KeyError:
        return [f"{path}: no dispatch_blake3 column: it records no dispatch table to check"]
    except (artifacts.ArtifactError, ValueError) as exc:
        return [str(exc)]
    recorded = ((prov.get("extra") or {}).get("dispatch") or {}).get("blake3")
    if not recorded or set(column) != {recorded}:
        return [
            f"{path}: records dispatch table BLAKE3 {recorded} in its provenance but {sorted(map(str, set(column)))} "
            f"in its dispatch_blake3 column: not the artifact the recommendation stage wrote; "
            f"delete it and rerun the pipeline"
        ]
    if table.is_symlink():
        target = os.readlink(table)
        try:
            now = artifacts.hash_file(table)
        except (OSError, artifacts.ArtifactError):
            now = "none (unreadable)"
        return [
            f"{table}: a symbolic link to {target}, not the dispatch table the recommendation stage wrote "
            f"({path.name} records BLAKE3 {recorded}, the link's target has {now}); {hint}"
        ]
    if not table.exists():
        return [f"{table}: missing, but {path.name} records its BLAKE3 {recorded} (deleted?); {hint}"]
    try:
        now = artifacts.hash_file(table)
    except artifacts.ArtifactError as exc:
        return [f"{exc} ({path.name} records BLAKE3 {recorded})"]
    if now != recorded:
        return [
            f"{table}: BLAKE3 {now}, but {path.name} records {recorded}: not the dispatch table this study's "
            f"recommendation stage wrote (edited, or another study's); {hint}"
        ]
    return []


def problems(path: str | os.PathLike, project_root: str | os.PathLike) -> list[str]:
    """Every way the artifact at `path` is not what its name and folder say (see the module doc);
    for a recommendation artifact, also its dispatch table (``dispatch_problems``)."""
    path = Path(path)
    try:
        kind = artifacts.read_kind(path)
        prov = artifacts.read_provenance(path)
    except (artifacts.ArtifactError, ValueError) as exc:
        return [str(exc)]
    expected = artifacts.kind_of_name(path)
    out = dispatch_problems(path, prov) if (kind or expected) == "recommendation" else []
    if kind is not None and kind != expected:
        out.append(
            f"{path}: holds a {kind!r} artifact (rule {prov.get('rule')}), not the {expected!r} its "
            "name says; delete it and its sidecar and rerun the pipeline, which writes the right one"
        )
    run = artifacts.run_problem(path, prov)
    if run:
        out.append(f"{path}: {run}; delete it and its sidecar and rerun the pipeline")
    study = folder_study(path, project_root)
    if study is None:
        return out
    recorded = (prov.get("wildcards") or {}).get("study")
    if recorded and recorded != study and (kind or expected) not in MEASURED_KINDS:
        out.append(
            f"{path}: an artifact of study {recorded!r} inside study {study!r}'s folder; delete it and "
            "its sidecar and rerun the pipeline, which makes this study's own"
        )
    if (kind or expected) in MEASURED_KINDS:
        out += _measured_problems(path, prov, Path(project_root), study)
    return out + _lineage_problems(path, prov, Path(project_root), study)


def check(path: str | os.PathLike, project_root: str | os.PathLike) -> None:
    """Raise IdentityError naming every problem `problems` finds."""
    found = problems(path, project_root)
    if found:
        raise IdentityError("; ".join(found))


def read(path: str | os.PathLike, project_root: str | os.PathLike):
    """A verified read (bytes against their BLAKE3) of an artifact whose identity holds."""
    df = artifacts.read(path)
    check(path, project_root)
    return df
