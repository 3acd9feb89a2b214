"""What main retired stays one command away: every retired folder's recorded commit is in main's
history and holds it, and restoring one brings back files whose hashes verify."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import restore_reference  # noqa: E402

TABLE = pd.read_csv(ROOT / "data/reference/retired.tsv", sep="\t", dtype=str)
MIB = 1024 * 1024
MAX_TREE_MIB = 23  # with the ~26 MB wheelhouse, one transfer to the GPU host stays under 48 MiB


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def _in_git() -> bool:
    return shutil.which("git") is not None and _git("rev-parse", "--git-dir").returncode == 0


def test_the_tracked_tree_fits_one_transfer_to_an_offline_gpu_host():
    if not _in_git():
        pytest.skip("not a git checkout: the tracked tree is git's list of files")
    files = _git("ls-files", "-s").stdout.splitlines()
    paths = [line.split("\t", 1)[1] for line in files if not line.startswith("160000")]  # submodules aside
    total = sum((ROOT / p).stat().st_size for p in paths if (ROOT / p).is_file())
    assert total <= MAX_TREE_MIB * MIB, (
        f"tracked tree {total / MIB:.1f} MiB > {MAX_TREE_MIB} MiB: retire a reference"
    )


@pytest.mark.parametrize("name", list(TABLE["name"]))
def test_each_retired_folder_is_in_mains_history(name):
    if not _in_git():
        pytest.skip("not a git checkout")
    row = TABLE.set_index("name").loc[name]
    if _git("cat-file", "-e", row["commit"]).returncode != 0:
        pytest.skip(f"commit {row['commit'][:12]} is not in this clone (shallow?)")
    assert _git("merge-base", "--is-ancestor", row["commit"], "HEAD").returncode == 0
    assert _git("cat-file", "-e", f"{row['commit']}:{row['path']}").returncode == 0
    held = _git("ls-tree", "-r", "--name-only", row["commit"], row["path"]).stdout.split()
    assert any(not (ROOT / f).exists() for f in held)  # retired: what the commit held is gone from main


def test_a_restored_reference_verifies(tmp_path):
    if not _in_git() or _git("cat-file", "-e", TABLE["commit"].iloc[0]).returncode != 0:
        pytest.skip("not a full git checkout")
    from headroom.core import artifacts
    from headroom.core.layout import discover

    written = restore_reference.restore("default", ROOT, tmp_path)
    folder = tmp_path / "data/reference/h200/default"
    assert written and (folder / "README.md").is_file()
    found = discover(folder)
    assert len(found) >= 13
    for path in found:
        artifacts.verify(path)
    assert restore_reference.restore("default", ROOT, tmp_path) == []  # never overwrites
    with pytest.raises(SystemExit, match="no retired entry 'nope'"):
        restore_reference.restore("nope", ROOT, tmp_path)
