"""Helpers for end-to-end tests: a temporary copy of the project and Snakemake run from it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from headroom.core.replay import copy_project  # noqa: F401  (re-exported for the tests)

ROOT = Path(__file__).resolve().parent.parent
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
#: Jobs a test's run takes at once: every core, at most 2 (CI's machine). Without a GPU (no
#: nvidia-smi, as tests/conftest.py decides the interpreter) a study runs on the interpreter and its
#: "GPU" jobs hold no device, so they share the cores too; with one, GPU jobs keep `gpu=1`, one at a
#: time as the README runs them, so timings stay uncontended.
CORES = min(2, os.cpu_count() or 1)
GPU_SLOTS = 1 if shutil.which("nvidia-smi") else CORES


def clone_run(src: Path, dest: Path) -> Path:
    """Copy an already-run project (results and Snakemake's metadata included, mtimes kept)."""
    shutil.copytree(src, dest, symlinks=True, copy_function=shutil.copy2)
    return dest


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.pop("TRITON_INTERPRET", None)  # the pipeline decides the device itself
    e["PYTHONUNBUFFERED"] = "1"
    return e


def snakemake(
    project: Path, *args: str, check: bool = True, timeout: int = 1200
) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        # targets first: `--resources` takes every following word up to the next option
        [*SNAKEMAKE, *args, "--cores", str(CORES), "--resources", f"gpu={GPU_SLOTS}"],
        cwd=project,
        env=env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
        )
    return proc


def headroom(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "headroom.core.cli", *args],
        cwd=project,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


def planned_rules(project: Path, *args: str) -> dict[str, int]:
    """Rules a dry run would execute, with job counts, read from Snakemake's 'Job stats' table.
    An empty dict means nothing to be done."""
    proc = snakemake(project, "--dry-run", *args)
    out = proc.stdout + proc.stderr
    if "Nothing to be done" in out:
        return {}
    m = re.search(r"Job stats:\n(.*?)\n\s*total\s+\d+", out, re.S)
    if not m:
        raise AssertionError(f"no job stats in dry-run output:\n{out[-4000:]}")
    jobs = {}
    for line in m.group(1).splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            jobs[parts[0]] = int(parts[1])
    return jobs


class Named(list):
    """Just enough of Snakemake's named file lists for headroom.core.stage."""

    def __init__(self, **named):
        super().__init__(f for v in named.values() for f in ([v] if isinstance(v, str) else v))
        self._named = named
        for key, value in named.items():
            setattr(self, key, value)

    def get(self, key, default=None):
        return self._named.get(key, default)
