"""A wheel built with `pip wheel .` and installed into a fresh virtual environment (base
dependencies only: no torch, triton or snakemake) reads results: `headroom --help`, `--version`,
`query` on a results folder, and validates a config with the schema shipped as package data."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

import headroom
from headroom.core.replay import copy_project

ROOT = Path(__file__).resolve().parents[2]


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/simple/blake3/", timeout=10) as resp:
            return resp.status == 200
    except OSError:
        return False


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)
    assert proc.returncode == 0, f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


# What the installed package must do; run by the venv's own python, far from the checkout.
CHECKS = textwrap.dedent(
    """
    import os, sys, pandas as pd
    from headroom.core import artifacts, catalog, config, layout
    results = sys.argv[1]
    frame = pd.DataFrame({"verdict": ["stop"], "reason": ["all three figures below their thresholds"]})
    artifacts.write(frame, f"{results}/decision.parquet", kind="decision", provenance={"rule": "decision"})
    catalog.build(layout.discover(results), f"{results}/catalog.duckdb", project_root=os.getcwd())
    study = config.load(sys.argv[2])
    config.validate_schema(study)
    config.resolve(study, cuda_available=True)  # schema and semantic checks, as the Snakefile runs them
    study["policies"]["confidence"] = 0.3
    try:
        config.validate_schema(study)
    except config.ConfigError as exc:
        print("refused:", exc)
    heavy = sorted(m for m in ("torch", "triton", "snakemake", "scipy", "sklearn") if m in sys.modules)
    print("heavy modules:", heavy)
    """
)


@pytest.mark.slow
@pytest.mark.skipif(
    not _pypi_reachable(), reason="PyPI is unreachable: a fresh venv cannot get the base deps"
)
def test_wheel_in_a_fresh_venv_reads_results_and_validates_a_config(tmp_path):
    # A copy without build/ or *.egg-info, which a source tree may hold stale from an earlier build.
    source = copy_project(tmp_path / "source")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source)])
    (wheel,) = (tmp_path / "dist").glob("headroom-*.whl")
    _run([sys.executable, "-m", "venv", str(tmp_path / "venv")], env=env)
    bin_dir = tmp_path / "venv" / "bin"
    _run([str(bin_dir / "pip"), "install", "-q", "--disable-pip-version-check", str(wheel)], env=env)
    work = tmp_path / "elsewhere"  # not the checkout: only the installed package can be imported
    (work / "results").mkdir(parents=True)
    cli = [str(bin_dir / "headroom"), "--results", str(work / "results")]

    assert "query" in _run([*cli, "--help"], cwd=work, env=env).stdout
    assert _run([*cli, "--version"], cwd=work, env=env).stdout.strip() == f"headroom {headroom.__version__}"
    checks = _run(
        [str(bin_dir / "python"), "-c", CHECKS, str(work / "results"), str(ROOT / "config" / "config.yaml")],
        cwd=work,
        env=env,
    ).stdout
    assert "config key 'policies.confidence'" in checks and "heavy modules: []" in checks, checks
    out = _run([*cli, "query", "SELECT verdict FROM decision", "--format", "csv"], cwd=work, env=env).stdout
    assert out.split() == ["verdict", "stop"], out
    gate = subprocess.run([*cli, "gate"], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert gate.returncode == 0 and "stop" in gate.stdout, gate.stdout + gate.stderr
    assert _run([*cli, "verify"], cwd=work, env=env).returncode == 0


def _plain(cmd: str) -> str:
    """A command as the README writes it: `python3 -m pip install -q` reads `pip install`."""
    return cmd.replace("python3", "python").replace("python -m pip", "pip").replace(" -q", "")


def test_ci_runs_the_readme_install_and_test_commands():
    readme = (ROOT / "README.md").read_text()
    ci = _plain((ROOT / ".ci" / "run").read_text())
    (test_cmd,) = [line for line in readme.splitlines() if line.endswith("python -m pytest")]
    for step in test_cmd.split(" && "):
        assert step in ci, f".ci/run does not run the README's `{step}`"
    before_tests = ci.split("python -m pytest")[0]
    for tool in ("ruff check .", "ruff format --check .", "snakefmt --check Snakefile rules"):
        assert tool in before_tests, f".ci/run does not run `{tool}` before the tests"
