"""The README's install works on stock PyPI: a CPU-only torch comes from PyTorch's own CPU wheel
index (on Linux, PyPI's torch is the CUDA build), and the README says what CI runs instead."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"


def test_readme_installs_a_cpu_torch_from_pytorchs_index():
    readme = (ROOT / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    first = quickstart.split("```bash\n", 1)[1].splitlines()[0]
    assert first.startswith("pip install torch==") and CPU_INDEX in first, first


def test_readme_says_which_torch_install_ci_runs_and_why_it_gets_the_cpu_build():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    torch_step = next(line for line in ci.splitlines() if "pip install" in line and "torch==" in line)
    assert CPU_INDEX not in torch_step  # CI's machine has a local wheel folder instead
    assert "CI (`.ci/run`) runs the plain\n`pip install torch==2.13.0`" in readme
    assert "PIP_FIND_LINKS" in readme and "torch==2.13.0" in torch_step
