"""The conda environments parse, and each names every third-party package its rules' code imports."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import yaml

from tests.pipeline import ROOT

# import name -> conda-forge package name
CONDA_NAME = {
    "torch": "pytorch-gpu",
    "yaml": "pyyaml",
    "sklearn": "scikit-learn",
    "duckdb": "python-duckdb",
    "pynvml": "nvidia-ml-py",
    "matplotlib": "matplotlib-base",
    "PIL": "pillow",
    "flashinfer": "flashinfer-python",  # from PyPI, the env's pip section
}
# pytorch-gpu brings triton's runtime only with its own pin; we name triton explicitly anyway.
LOCAL = {"headroom", "kernels", "snakemake"}  # snakemake runs the rules; it is not a rule dependency
# kernels/__init__.py imports its torch/triton API only when both are installed; without them it
# imports these pure-Python modules alone (tests/analysis/test_roofline.py runs the roofline with
# torch and triton blocked). `from kernels import split, schedule` therefore needs only their files.
KERNELS_PURE = {"split", "schedule"}


def _env(name):
    data = yaml.safe_load((ROOT / "envs" / name).read_text())
    deps = set()
    for d in data["dependencies"]:
        if isinstance(d, dict) and set(d) == {"pip"}:  # PyPI packages, pinned with ==
            for req in d["pip"]:
                pkg, _, version = req.partition("==")
                assert version, f"envs/{name}: pip {pkg} is not pinned"
                deps.add(pkg)
            continue
        assert isinstance(d, str), f"envs/{name}: unexpected entry {d!r}"
        pkg, _, version = d.partition("=")
        assert version, f"envs/{name}: {pkg} is not pinned"
        deps.add(pkg)
    assert "conda-forge" in data["channels"]
    return deps


def _module_file(mod: str) -> Path | None:
    parts = mod.split(".")
    if parts[0] not in ("headroom", "kernels"):
        return None
    p = ROOT.joinpath(*parts)
    if p.with_suffix(".py").exists():
        return p.with_suffix(".py")
    if (p / "__init__.py").exists():
        return p / "__init__.py"
    return None


def third_party_imports(script: Path) -> set[str]:
    """Top-level third-party modules imported (anywhere, lazily too) by `script` and by every
    headroom/kernels module it reaches."""
    seen, todo, found = set(), [script], set()
    stdlib = set(sys.stdlib_module_names)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative import inside a package
                    base = path.parent
                    for _ in range(node.level - 1):
                        base = base.parent
                    rel = ".".join(base.relative_to(ROOT).parts)
                    names = [f"{rel}.{node.module}" if node.module else rel]
                    names += [f"{names[0]}.{a.name}" for a in node.names]
                elif node.module == "kernels" and {a.name for a in node.names} <= KERNELS_PURE:
                    names = [f"kernels.{a.name}" for a in node.names]  # not kernels/__init__.py's API
                else:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                top = name.split(".")[0]
                f = _module_file(name)
                if f:
                    todo.append(f)
                elif top not in stdlib and top not in LOCAL and top != "__future__":
                    found.add(top)
    return found


def _rules():
    """(rule name, conda env file, script path) for every rule in rules/*.smk."""
    out = []
    for smk in sorted((ROOT / "rules").glob("*.smk")):
        text = smk.read_text()
        for block in re.split(r"\n\s*rule\s+", text)[1:]:
            name = block.split(":", 1)[0].strip()
            script = re.search(r'script:\s*\n\s*"\.\./(scripts/[^"]+)"', block) or re.search(
                r'shell:\s*\n\s*"[^"]*?python3? ((?:scripts|tools)/\w+\.py)', block
            )
            conda = re.search(r'conda:\s*\n\s*"\.\./envs/([^"]+)"', block)
            if script:
                assert conda, f"{smk.name}: rule {name} has no conda: environment"
                out.append((name, conda.group(1), ROOT / script.group(1)))
    return out


def test_envs_parse_and_are_pinned():
    assert _env("gpu.yaml") and _env("analysis.yaml")


def test_every_rule_has_an_env_and_its_env_names_every_import():
    rules = _rules()
    assert len(rules) >= 10, rules
    for name, env, script in rules:
        deps = _env(env)
        missing = {CONDA_NAME.get(m, m) for m in third_party_imports(script)} - deps
        assert not missing, f"rule {name} ({script.name}) imports {sorted(missing)} not named in envs/{env}"


def test_the_torch_free_kernels_modules_need_no_torch():
    found = third_party_imports(ROOT / "scripts/roofline.py")
    assert not {"torch", "triton"} & found, found
    assert (ROOT / "kernels/split.py").read_text().count("import torch") == 0


def test_checker_sees_lazy_imports():
    # kernels are imported lazily inside functions; the checker must still find torch and triton
    found = third_party_imports(ROOT / "scripts/correctness.py")
    assert {"torch", "triton"} <= found


def test_gpu_rules_use_gpu_env():
    gpu_rules = {
        "environment",
        "correctness",
        "portfolio",
        "lifecycle",
        "graph_sweep",
        "calibrate",
        "kernel_bench",
        "trace",  # they import a study's kernel family (its torch and Triton)
        "candidates",
    }
    found = {name: e for name, e, _ in _rules() if name in gpu_rules}
    assert set(found) == gpu_rules, sorted(found)
    assert set(found.values()) == {"gpu.yaml"}, found
