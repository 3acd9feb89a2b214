"""Bring back a reference (or other recorded data) retired from main, from the commit that last held it.

    python3 tools/restore_reference.py default-gen2-6x100      # data/reference/h200/default-gen2-6x100/
    python3 tools/restore_reference.py --list

data/reference/retired.tsv records each retired folder: its name, path, the commit that last held it
(an ancestor of main, so every full clone has it), why it was retired and what supersedes it. The
files come back at their recorded path, byte for byte (their BLAKE3 sidecars verify), and a file
that exists there today is never overwritten. Retired references replay like any other once restored
(`snakemake --config replay=data/reference/h200/NAME`).
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
RETIRED = ROOT / "data" / "reference" / "retired.tsv"


def retired() -> pd.DataFrame:
    return pd.read_csv(RETIRED, sep="\t", dtype=str).set_index("name")


def restore(name: str, root: Path = ROOT, dest: Path | None = None) -> list[Path]:
    """The files of retired ``name`` (from the git history of ``root``) written back under ``dest``
    (default: ``root``) at their recorded path; the ones written."""
    dest_root = root if dest is None else dest
    table = retired()
    if name not in table.index:
        raise SystemExit(f"restore_reference: no retired entry {name!r}; known: {', '.join(table.index)}")
    path, commit = table.loc[name, "path"], table.loc[name, "commit"]
    proc = subprocess.run(["git", "-C", str(root), "archive", commit, path], capture_output=True)
    if proc.returncode != 0:
        raise SystemExit(
            f"restore_reference: git archive {commit[:12]} {path} failed ({proc.stderr.decode().strip()}); "
            "a shallow clone lacks the commit: fetch the full history (git fetch --unshallow)"
        )
    written = []
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        for member in tar.getmembers():
            out = dest_root / member.name
            if not member.isfile() or out.exists():
                continue
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(tar.extractfile(member).read())
            written.append(out)
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", nargs="?")
    ap.add_argument("--list", action="store_true", help="list what is retired and why")
    args = ap.parse_args(argv)
    if args.list or not args.name:
        for name, row in retired().iterrows():
            print(f"{name:<28} {row['path']:<60} {row['why']}; superseded by {row['superseded_by']}")
        return 0
    written = restore(args.name)
    print(f"restored {len(written)} files of {args.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
