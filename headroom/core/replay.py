"""Bring a recorded measurement artifact into results/ after verifying its recorded BLAKE3."""

from __future__ import annotations

import shutil
from pathlib import Path

from headroom.core import artifacts

PROJECT_ROOT = Path(__file__).resolve().parents[2]

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


def import_artifact(recorded: str | Path, dest: str | Path) -> str:
    """Copy `recorded` (and its hash sidecar) to `dest`, byte for byte; fail on a hash mismatch."""
    digest = artifacts.verify(recorded)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(recorded, tmp)
    if artifacts.hash_file(tmp) != digest:
        tmp.unlink()
        raise artifacts.ArtifactError(f"{recorded}: copy to {dest} changed its bytes")
    shutil.copyfile(artifacts.sidecar(recorded), artifacts.sidecar(dest))
    tmp.replace(dest)
    return digest
