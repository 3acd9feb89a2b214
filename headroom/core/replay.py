"""Replay: a study whose measurements come from a recorded folder instead of a GPU.

`check_recorded` runs in the process that plans the DAG, before any job: every recorded artifact's
BLAKE3 must verify, and the recorded lineage between them must hold (a trace copied in from another
study does not match the hash the correctness run recorded for its trace), so a mixed folder is
refused naming both artifacts. `import_artifact` then brings each one into results/<study>/.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from headroom.core import artifacts

PROJECT_ROOT = Path(__file__).resolve().parents[2]

#: The measurement artifacts a replay takes (besides portfolio/run-<r>[-samples]).
MEASURED = ("environment", "trace", "candidates", "correctness", "lifecycle", "graph_sweep", "calibration")
#: Measurement artifacts a replay takes when the recorded folder has them: a family study's engine
#: steps (its trace's lineage input); attention's references and those recorded before have none.
OPTIONAL = ("steps",)


#: A recorded folder's copies of the project source files its measured artifacts name as lineage
#: inputs (a kernel family's module: the trace stage reads it), each with its BLAKE3 sidecar, kept at
#: import (tools/import_reference.py) and imported beside a replay's artifacts, where
#: :func:`lineage_input` finds them: a replayed reference verifies against the source it was measured
#: with once that file has moved on. Attention's references name no source file.
SOURCES = "sources"


def is_source(recorded_input: str) -> bool:
    """Whether a recorded lineage input is a project source file (Python), not data or an artifact."""
    path = Path(recorded_input)
    return path.suffix == ".py" and not path.is_absolute() and "results" not in path.parts


class ReplayError(ValueError):
    """A recorded folder cannot be replayed; the message names the folder and the artifacts."""


def recorded_runs(folder: str | Path) -> list[int]:
    """The portfolio runs recorded in `folder` (portfolio/run-<r>.parquet)."""
    runs = []
    for path in (Path(folder) / "portfolio").glob("run-*.parquet"):
        tag = path.stem.split("-", 1)[1]
        if tag.isdigit():
            runs.append(int(tag))
    return sorted(runs)


def recorded_names(folder: str | Path) -> list[str]:
    """The artifacts a replay of `folder` imports, relative to it; a missing one is an error."""
    folder = Path(folder)
    runs = recorded_runs(folder)
    if not runs:
        raise ReplayError(f"replay folder {folder}: no portfolio/run-<r>.parquet")
    names = [f"{n}.parquet" for n in MEASURED]
    names += [f"portfolio/run-{r}{suffix}.parquet" for r in runs for suffix in ("", "-samples")]
    missing = [n for n in names if not (folder / n).is_file()]
    names += [f"{n}.parquet" for n in OPTIONAL if (folder / f"{n}.parquet").is_file()]
    if missing:
        raise ReplayError(f"replay folder {folder}: missing {', '.join(missing)}")
    return names


def _recorded_as(input_path: str, folder: Path, names: set[str]) -> str | None:
    """The name in `folder` of an input a recorded artifact read (recorded as results/trace.parquet
    or results/<study>/trace.parquet); None for inputs that are not measurement artifacts."""
    parts = Path(input_path).parts
    if "results" not in parts:
        return None
    rest = parts[parts.index("results") + 1 :]
    for tail in (rest, rest[1:]):
        name = Path(*tail).as_posix() if tail else ""
        if name in names:
            return name
    return None


def lineage_input(artifact: str | Path, recorded_input: str, root: str | Path) -> Path:
    """Where the input a lineage edge names is now. Artifacts of a study read only that study's
    artifacts, so an input recorded under results/ (results/trace.parquet in the flat layout,
    results/<study>/trace.parquet since) is looked up in the artifact's own study folder: a replayed
    artifact's recorded edges then point at the replayed copies, whatever study recorded them.
    A source file a replay imported with them (:data:`SOURCES`) is that copy. Other inputs (request
    logs, the sources of a study measured here) are relative to the project root."""
    root = Path(root)
    artifact = Path(artifact).resolve()
    parts = Path(recorded_input).parts
    results = root.resolve() / "results"
    if artifact.is_relative_to(results) and len(artifact.relative_to(results).parts) > 1:
        study_dir = results / artifact.relative_to(results).parts[0]
        if "results" in parts:
            rest = parts[parts.index("results") + 1 :]
            for tail in (rest, rest[1:]):
                if tail and (study_dir / Path(*tail)).exists():
                    return study_dir / Path(*tail)
        kept = study_dir / SOURCES / recorded_input
        if is_source(recorded_input) and kept.is_file():
            return kept
    return root / recorded_input


#: A recorded folder's README.md lists its artifacts as written at import (tools/import_reference.py)
MANIFEST_HEADER = ("| artifact | BLAKE3 | bytes |", "| --- | --- | --- |")
_MANIFEST_ROW = re.compile(r"^\| (?P<name>[^|]+) \| `(?P<digest>[0-9a-f]{64})` \| (?P<bytes>\d+) \|$")


def manifest_row(name: str, digest: str, size: int) -> str:
    return f"| {name} | `{digest}` | {size} |"


def manifest(folder: Path) -> dict[str, str]:
    """{artifact: BLAKE3} as the folder's README.md recorded them at import ({} without one)."""
    readme = folder / "README.md"
    if not readme.is_file():
        return {}
    rows = (_MANIFEST_ROW.match(line) for line in readme.read_text(encoding="utf-8").splitlines())
    return {m["name"]: m["digest"] for m in rows if m}


def manifest_conflicts(folder: Path, digests: dict[str, str]) -> list[str]:
    """Artifacts whose BLAKE3 differs from the one the folder's README recorded at import."""
    recorded = manifest(folder)
    return [
        f"{name} has BLAKE3 {digest[:16]}, but {folder.name}'s README.md recorded {recorded[name][:16]} "
        f"for it at import (an artifact of another run copied in)"
        for name, digest in digests.items()
        if name in recorded and recorded[name] != digest
    ]


def code_conflicts(folder: Path, names: list[str]) -> list[str]:
    """Pairs of artifacts of `folder` made by different versions of a module they both loaded. The
    artifacts of one run are made by one version of the code (an edit reruns every rule that loads
    the file), so a pair that differs comes from two runs: a calibration of an older generation
    copied into a folder recorded before the calibration recorded its environment, say."""
    first: dict[str, tuple[str, str]] = {}  # module -> (the first artifact that loaded it, its hash)
    pairs: dict[tuple[str, str], list[str]] = {}
    for name in names:
        for module, digest in sorted(artifacts.read_provenance(folder / name).get("code", {}).items()):
            other, known = first.setdefault(module, (name, digest))
            if known != digest:
                pairs.setdefault((other, name), []).append(f"{module} {known[:12]} vs {digest[:12]}")
    return [f"{a} and {b} were made by different code ({', '.join(m)})" for (a, b), m in pairs.items()]


def family_identity(prov: dict) -> str | None:
    """The kernel family an artifact records it was made for (provenance `extra.family`: name, and for
    a family other than the built-in attention its version and source BLAKE3), as one string; None
    for an artifact that records none (one made before families, or by a stage that does not say)."""
    family = (prov.get("extra") or {}).get("family")
    if not isinstance(family, dict) or not family.get("name"):
        return None
    parts = [str(family["name"])] + ([str(family["version"])] if family.get("version") else [])
    source = family.get("source_blake3")
    return " ".join(parts) + (f" (source {str(source)[:16]})" if source else "")


#: What a recorded artifact says it was measured for and in: (provenance reader, how it is named).
IDENTITIES = {
    "study": (lambda prov: (prov.get("wildcards") or {}).get("study"), "for study"),
    "environment": (lambda prov: prov.get("environment"), "in environment"),
    "family": (family_identity, "for family"),
}


def identity_conflicts(folder: Path, names: list[str]) -> list[str]:
    """Artifacts of `folder` recorded for another study, in another environment (GPU model, driver,
    versions) or for another kernel family (name, version, source hash) than the folder's other
    artifacts. One run records one study, one environment and one family in every artifact's
    provenance; an artifact recorded before the study layout names no study (that is its identity
    too), an artifact of a rule without a device names no environment, and one made before families
    (or by a stage that does not record it) no family."""
    provs = {name: artifacts.read_provenance(folder / name) for name in names}
    out = []
    for key, (value_of, words) in IDENTITIES.items():
        groups: dict[object, list[str]] = {}
        for name, prov in provs.items():
            value = value_of(prov)
            if value is not None or key == "study":
                groups.setdefault(value, []).append(name)
        if len(groups) < 2:
            continue
        label = {
            v: f"{words} {v!r}" if v is not None else "for no study (before results/<study>/)" for v in groups
        }
        major = max(groups, key=lambda v: len(groups[v]))
        out += [
            f"{', '.join(groups[v])} was recorded {label[v]}, {groups[major][0]} (and the folder's other "
            f"artifacts) {label[major]}"
            for v in groups
            if v != major
        ]
    return out


def _kinds_and_hashes(folder: Path, names: list[str], who: str) -> dict[str, str]:
    """{name: BLAKE3} of a recorded folder's artifacts, each verified and of the kind its name says."""
    digests = {}
    for name in names:
        try:
            digests[name] = artifacts.verify(folder / name)
            kind = artifacts.read_kind(folder / name)
            run = artifacts.run_problem(name, artifacts.read_provenance(folder / name))
        except (artifacts.ArtifactError, OSError) as exc:
            raise ReplayError(f"{who}replay folder {folder}: {exc}") from None
        if run:
            raise ReplayError(f"{who}replay folder {folder}: {name} {run}")
        if kind is not None and kind != artifacts.kind_of_name(name):
            raise ReplayError(
                f"{who}replay folder {folder}: {name} holds a {kind!r} artifact, not the "
                f"{artifacts.kind_of_name(name)!r} its name says"
            )
    return digests


def check_recorded(folder: str | Path, *, study: str = "") -> list[str]:
    """Verify every artifact of a recorded folder (bytes, kind) and that they come from one run (the
    lineage between them, the code that made them); return their names."""
    folder = Path(folder)
    who = f"study {study!r}: " if study else ""
    names = recorded_names(folder)
    digests = _kinds_and_hashes(folder, names, who)
    mixed = manifest_conflicts(folder, digests) + identity_conflicts(folder, names)
    mixed += code_conflicts(folder, names)
    for name in names:
        for inp, recorded in artifacts.read_provenance(folder / name).get("inputs", {}).items():
            source = _recorded_as(inp, folder, set(names))
            if source is not None and digests[source] != recorded:
                mixed.append(
                    f"{name} was made from a {source} with blake3 {recorded[:16]}, the folder's has {digests[source][:16]}"
                )
            mixed += _kept_source_conflicts(folder, name, inp, recorded, who)
    if mixed:
        raise ReplayError(
            f"{who}replay folder {folder} mixes artifacts of different runs: "
            + "; ".join(mixed)
            + ". Replay a folder recorded by one study (tools/import_reference.py writes one)."
        )
    return names


def _kept_source_conflicts(folder: Path, name: str, inp: str, recorded: str, who: str) -> list[str]:
    """The folder's kept copy of source ``inp`` (if any) against the BLAKE3 artifact ``name`` recorded."""
    kept = folder / SOURCES / inp
    if not (is_source(inp) and kept.is_file()):
        return []
    try:
        digest = artifacts.verify(kept)
    except artifacts.ArtifactError as exc:
        raise ReplayError(f"{who}replay folder {folder}: {exc}") from None
    if digest != recorded:
        return [
            f"{name} was made from {inp} with blake3 {recorded[:16]}, the folder's kept copy has {digest[:16]}"
        ]
    return []


def check_imported(folder: str | Path, study_dir: str | Path, *, study: str = "") -> None:
    """The artifacts a replay already imported into `study_dir` (results/<study>/) are the recorded
    folder's, byte for byte: one copied in from another run (a generation-1 calibration in a
    generation-2 replay) is refused before the plan rebuilds anything from it, naming it and both
    BLAKE3s. Compared by their sidecars (a file that no longer matches its own fails its read)."""
    folder, study_dir = Path(folder), Path(study_dir)
    wrong = []
    for name in recorded_names(folder):
        here = study_dir / name
        if not artifacts.sidecar(here).is_file():
            continue  # not imported yet (or deleted): the replay rule imports it
        try:
            mine, recorded = artifacts.recorded_hash(here), artifacts.recorded_hash(folder / name)
        except artifacts.ArtifactError as exc:
            raise ReplayError(f"study {study!r}: {exc}") from None
        if mine != recorded:
            wrong.append(f"{here} has BLAKE3 {mine[:16]}, the recorded {folder / name} {recorded[:16]}")
    if wrong:
        raise ReplayError(
            f"study {study!r} replays {folder}, but its folder holds artifacts of another run: "
            + "; ".join(wrong)
            + ". Delete them (and their sidecars) and rerun: the replay imports the recorded ones"
        )


#: What a private copy of the project leaves out: outputs, caches, VCS and wheelhouse folders.
NOT_COPIED = {
    "results",
    ".snakemake",
    ".git",
    ".whl",
    ".gl",
    "__pycache__",
    ".hypothesis",
    ".pytest_cache",
    ".ruff_cache",
    "build",
    "tests",
    "BENCHMARKS.md",
}


def copy_project(dest: str | Path, src: str | Path = PROJECT_ROOT) -> Path:
    """Copy the project's sources (not results, caches or git) to `dest`, to run a study there."""

    def ignore(folder, names):
        return [n for n in names if n in NOT_COPIED or n.endswith(".egg-info")]

    shutil.copytree(src, dest, ignore=ignore, symlinks=True)
    return Path(dest)


def import_artifact(recorded: str | Path, dest: str | Path, name: str | None = None) -> str:
    """Copy `recorded` (and its hash sidecar) to `dest`, byte for byte; fail on a hash mismatch.
    With ``name`` (its path in the recorded folder, e.g. portfolio/run-1.parquet), also the folder's
    kept copies of the sources it names as lineage inputs (:data:`SOURCES`), into dest's study folder."""
    digest = artifacts.copy_verified(recorded, dest)
    if name is not None:
        depth = len(Path(name).parts)
        folder, study_dir = Path(recorded).parents[depth - 1], Path(dest).parents[depth - 1]
        for inp in artifacts.read_provenance(dest).get("inputs", {}):
            if is_source(inp) and (folder / SOURCES / inp).is_file():
                artifacts.copy_verified(folder / SOURCES / inp, study_dir / SOURCES / inp)
    return digest
