"""Compile, once per machine, the bytecode of every module the pipeline's processes import: for a host
whose processes cannot write it.

The offline GPU host sets PYTHONDONTWRITEBYTECODE=1, and tools/device_setup.sh points
PYTHONPYCACHEPREFIX at /tmp/pycache. Under a prefix Python reads bytecode only from the prefix, never
from the __pycache__ folders beside the sources, so a module missing there (the standard library's
included) is compiled again in every stage process, and the stages are ~20 processes a study. This
imports what the processes import, the way they import it, and writes each loaded module's bytecode
into the prefix (``PYTHONPYCACHEPREFIX``, or ``--prefix``):

- every module named by an import statement anywhere in ``headroom/``, ``kernels/``, ``scripts/`` and
  ``Snakefile``/``rules/`` (a function's own imports included: ``sklearn.cluster`` is imported only by
  the clustered policy), and the Snakemake modules a ``script:`` job's preamble loads;
- then the source of every module so loaded, standard library and third-party alike.

A module a stage reaches only through another library's own lazy import may still compile in the
stage; ``--check`` lists, for a fresh process importing the same names, the modules whose bytecode is
not in the prefix (none after a run of this tool).

    python3 tools/precompile.py [--root .] [--prefix DIR] [--check]
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import multiprocessing
import os
import py_compile
import sys
import sysconfig
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

#: What a Snakemake `script:` job loads before the script runs (its preamble unpickles the job).
PREAMBLE = ("snakemake", "snakemake.script", "snakemake.io", "snakemake.logging")


def imported_names(root: Path) -> list[str]:
    """Every absolute module name an import statement names in the pipeline's code under ``root``."""
    files = [*root.glob("headroom/**/*.py"), *root.glob("kernels/**/*.py"), *root.glob("scripts/*.py")]
    files += [root / "Snakefile", *root.glob("rules/*.smk")]
    names = set(PREAMBLE)
    for path in files:
        try:
            tree = ast.parse(path.read_text(), str(path))
        except SyntaxError:  # a Snakefile is Python with Snakemake's keywords: its plain imports only
            tree = ast.parse(
                "\n".join(ln for ln in path.read_text().splitlines() if ln.startswith(("import ", "from ")))
            )
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)  # a submodule or a name
    return sorted(names)


def load(names: list[str]) -> list[str]:
    """Import each name that is a module (a name that is not, or does not import here, is passed
    over); the names that failed for another reason than not being a module."""
    failed = []
    for name in names:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError:
            pass  # `from x import y` where y is a function, or an optional package this host lacks
        except Exception as exc:  # a package that cannot import here (no GPU, a missing library)
            failed.append(f"{name}: {type(exc).__name__}")
    return failed


def sources() -> list[str]:
    """The source files to compile: every loaded module's, and every file of each third-party package
    one was loaded from (what a stage reaches through a library's own lazy imports: a matplotlib
    backend, a pandas reader); of the standard library, the loaded modules' only."""
    stdlib = sysconfig.get_paths()["stdlib"]
    out, packages = set(), set()
    for name, module in list(sys.modules.items()):
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if not (origin and origin.endswith(".py") and os.path.isfile(origin)):
            continue
        out.add(origin)
        if not origin.startswith(stdlib + os.sep) or "-packages" in origin:
            top = sys.modules.get(name.split(".")[0])
            packages.update(getattr(top, "__path__", None) or [])
    for folder in packages:
        out.update(str(p) for p in Path(folder).rglob("*.py"))
    return sorted(out)


def missing(files: list[str]) -> list[str]:
    """The files whose bytecode (where this process looks for it: the prefix if one is set) is absent."""
    return [f for f in files if not os.path.exists(importlib.util.cache_from_source(f))]


def _compile(job: tuple[str, str]) -> None:
    py_compile.compile(job[0], cfile=job[1], quiet=2)  # a file that does not compile stays as it is


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=".", help="the repository (headroom/, kernels/, scripts/, rules/)")
    ap.add_argument("--prefix", help="the bytecode prefix (default: PYTHONPYCACHEPREFIX)")
    ap.add_argument(
        "--check", action="store_true", help="compile nothing: list the source files without bytecode"
    )
    args = ap.parse_args(argv)
    if args.prefix:
        sys.pycache_prefix = str(Path(args.prefix).resolve())
    if not sys.pycache_prefix:
        ap.error("no bytecode prefix: set PYTHONPYCACHEPREFIX or pass --prefix")
    root = Path(args.root).resolve()
    sys.path.insert(0, str(root))
    failed = load(imported_names(root))
    files = sources()
    todo = missing(files)
    if args.check:
        print("\n".join(todo))
        print(f"{len(todo)} of {len(files)} source files have no bytecode in {sys.pycache_prefix}")
        return 1 if todo else 0
    # spawned workers, not forked: this process has torch's threads; the bytecode paths are named here
    with ProcessPoolExecutor(mp_context=multiprocessing.get_context("spawn")) as pool:
        list(pool.map(_compile, [(f, importlib.util.cache_from_source(f)) for f in todo], chunksize=64))
    print(
        f"compiled {len(todo)} of {len(files)} source files into {sys.pycache_prefix}"
        + (f"; not importable here: {', '.join(failed)}" if failed else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
