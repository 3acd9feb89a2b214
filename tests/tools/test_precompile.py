"""tools/precompile.py: on a host whose processes cannot write bytecode (PYTHONDONTWRITEBYTECODE=1, a
PYTHONPYCACHEPREFIX, as on the offline GPU host), one run leaves a stage's imports nothing to compile,
the standard library's and a function's own lazy imports (sklearn.cluster) included."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "precompile.py"
sys.path.insert(0, str(ROOT / "tools"))
import precompile  # noqa: E402

# What the decision and report stages import, as a Snakemake script job does, counting the .py files
# this process compiles (the interpreter's "compile" audit event, which an import without bytecode raises)
STAGE = """
import sys
compiled = []
sys.addaudithook(lambda ev, a: compiled.append(a[1]) if ev == "compile" and str(a[1]).endswith(".py") else None)
import snakemake.script
from headroom.core.stage import run_stage
from headroom.decide import decision, figures, measured, power
from headroom.report import build
import sklearn.cluster  # the clustered policy's k-means imports it when it runs
print(len(compiled), *compiled[:5])
"""


def _env(prefix: Path) -> dict:
    return {
        **os.environ,
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPYCACHEPREFIX": str(prefix),
        "PYTHONPATH": str(ROOT),
    }


def _compiled_by_a_stage(prefix: Path) -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", STAGE], env=_env(prefix), capture_output=True, text=True, check=True, cwd=ROOT
    )
    return out.stdout.split()


def test_after_one_run_a_stage_compiles_nothing(tmp_path):
    prefix = tmp_path / "pycache"
    before = _compiled_by_a_stage(prefix)
    assert int(before[0]) > 100  # an empty prefix: the stage compiles its imports, stdlib included
    run = subprocess.run(
        [sys.executable, str(TOOL), "--root", str(ROOT)], env=_env(prefix), capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("compiled ")
    after = _compiled_by_a_stage(prefix)
    assert after == ["0"], after
    check = subprocess.run(
        [sys.executable, str(TOOL), "--root", str(ROOT), "--check"],
        env=_env(prefix),
        capture_output=True,
        text=True,
    )
    # left: only a file this Python cannot compile (torch's py312_intrinsics.py under Python 3.11)
    assert check.stdout.strip().splitlines()[-1].startswith(("0 of", "1 of")), check.stdout[-400:]


def test_the_imports_it_follows_include_a_functions_own_and_the_script_preamble():
    names = precompile.imported_names(ROOT)
    assert {"sklearn.cluster", "threadpoolctl", "snakemake.script", "headroom.decide.power"} <= set(names)


def test_without_a_prefix_it_says_so(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPYCACHEPREFIX"}
    run = subprocess.run(
        [sys.executable, str(TOOL), "--check"], env=env, capture_output=True, text=True, cwd=tmp_path
    )
    assert run.returncode == 2 and "no bytecode prefix" in run.stderr
