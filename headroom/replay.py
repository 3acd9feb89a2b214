"""Bring a recorded measurement artifact into results/ after verifying its recorded BLAKE3."""

from __future__ import annotations

import shutil
from pathlib import Path

from headroom import artifacts


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
