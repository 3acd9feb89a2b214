"""The house's floors (docs/architecture.md): core and kernels import nothing above themselves,
and the library, the rule scripts and the benchmark reach the kernels only through their public
API (a tool that compares the kernels' own modules, such as a bit-identity check, may look inside)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ABOVE_CORE = (
    "headroom.trace",
    "headroom.measure",
    "headroom.analysis",
    "headroom.decide",
    "headroom.report",
    "headroom.policies",
    "headroom.families",
)
#: the arrows that still run up (docs/architecture.md names them); strict, so one that goes must leave here too
KNOWN_UP = {}


def imports(path: Path, *, names: bool = True) -> set[str]:
    """Every module a file imports, at the top or inside a function; names: also `module.name` of
    each `from module import name` (`from headroom import trace` reaches headroom.trace)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out |= {node.module} | ({f"{node.module}.{a.name}" for a in node.names} if names else set())
    return out


def upward(path: Path) -> set[str]:
    return {m for m in imports(path) if m.startswith(ABOVE_CORE)}


def test_core_imports_nothing_above_itself_but_the_named_arrows():
    found = {}
    for path in sorted((ROOT / "headroom" / "core").glob("*.py")):
        up = upward(path)
        if up:
            found[str(path.relative_to(ROOT))] = up
    assert set(found) == set(KNOWN_UP), found
    for name, modules in KNOWN_UP.items():
        assert {m for m in found[name] if any(m.startswith(k) for k in modules)} == found[name], name


def test_the_scan_sees_a_lazy_import(tmp_path):
    module = tmp_path / "cli.py"
    module.write_text("def verb():\n    from headroom.trace import invocations\n    return invocations\n")
    assert upward(module) == {"headroom.trace", "headroom.trace.invocations"}


def test_kernels_import_no_headroom_and_the_library_and_bench_only_kernels_public_names():
    for path in (ROOT / "kernels").rglob("*.py"):
        assert not any(m.startswith("headroom") for m in imports(path)), path
    for path in [
        ROOT / "tools" / "bench.py",
        *(ROOT / "scripts").glob("*.py"),
        *(ROOT / "headroom").rglob("*.py"),
    ]:
        private = {m for m in imports(path, names=False) if m.startswith("kernels.")}
        assert not private, (
            f"{path.relative_to(ROOT)} imports {sorted(private)}: use kernels/__init__.py's names"
        )


def test_core_modules_import_each_other_in_no_circle():
    """catalog spans the study folders that integrity passes, verify checks the catalog: each
    floor imports only those below it (a lazy import counts, as it does for the floors above)."""
    core = {p.stem: p for p in (ROOT / "headroom" / "core").glob("*.py") if p.stem != "__init__"}
    graph = {
        # a module's import of itself (cli runs its imported copy under `python -m`) is no circle
        name: ({m.split(".")[2] for m in imports(path) if m.startswith("headroom.core.")} & set(core))
        - {name}
        for name, path in core.items()
    }

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph[start])

    assert not [name for name in sorted(core) if reaches(name, name, {name})]
