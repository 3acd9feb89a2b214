"""The source files a rule runs, derived from its script's imports, and the ones a job really loaded.

Snakemake tracks only the script file of a `script:` rule, not the modules it imports, so each rule
declares its source closure as inputs (rules/common.smk `src()`): an edit to any module it runs then
reruns it. The closure is computed here from the import statements (`ast`, every `import` anywhere in
a file, function bodies included) within the project's packages, so it cannot drift from the code.
`loaded_modules()` is the check: each job records the project modules it actually imported
(headroom/core/stage.py), and a test asserts they are all among its rule's declared inputs.
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: The packages whose modules are code inputs; anything else (torch, pandas, ...) is an environment.
PACKAGES = ("headroom", "kernels")


def _module_file(module: str, root: Path) -> Path | None:
    """headroom.core.stage -> headroom/core/stage.py (or .../__init__.py); None outside the project."""
    if module.split(".")[0] not in PACKAGES:
        return None
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _package_inits(module: str, root: Path) -> list[Path]:
    """Importing a.b.c runs a/__init__.py and a/b/__init__.py first."""
    parts = module.split(".")
    return [
        root.joinpath(*parts[:i], "__init__.py")
        for i in range(1, len(parts))
        if root.joinpath(*parts[:i], "__init__.py").is_file()
    ]


def _imported_modules(path: Path, root: Path) -> frozenset[str]:
    """Dotted names a file imports (absolute and relative), including `from pkg import module`:
    parsed once per file version (a workflow's rules share most of their modules; parsing each
    file anew for every rule's closure was half of planning a DAG)."""
    st = path.stat()
    return _parsed_imports(path, root, st.st_mtime_ns, st.st_size)


@cache
def _parsed_imports(path: Path, root: Path, mtime_ns: int, size: int) -> frozenset[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    # the package a relative import is anchored at: headroom/core/x.py and headroom/core/__init__.py
    # are both in headroom.core
    package = ".".join(path.relative_to(root).parts[:-1]) if path.is_relative_to(root) else None
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                if not package:
                    continue
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
    return frozenset(m for m in out if m)


@cache
def closure(script: str, root: Path = PROJECT_ROOT) -> tuple[str, ...]:
    """The project source files `script` runs: itself and every headroom/ or kernels/ module it
    imports, directly or through another, with the package __init__.py files on the way; sorted,
    relative to `root`."""
    start = root / script
    if not start.is_file():
        raise FileNotFoundError(f"{script}: no such source file under {root}")
    seen: set[Path] = set()
    todo = [start]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        if path.suffix != ".py":
            continue
        for module in _imported_modules(path, root):
            found = _module_file(module, root)
            if found is not None:
                todo.append(found)
                todo.extend(_package_inits(module, root))
    return tuple(sorted(p.relative_to(root).as_posix() for p in seen))


def loaded_modules(root: Path = PROJECT_ROOT) -> list[str]:
    """Source files of the project's modules loaded in this process now, relative to `root` (a
    module of these packages loaded from elsewhere is given by its absolute path, so a check fails)."""
    out = set()
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] not in PACKAGES:
            continue
        file = getattr(module, "__file__", None)
        if not file:
            continue
        path = Path(file).resolve()
        out.add(path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path))
    return sorted(out)
