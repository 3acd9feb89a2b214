"""A family named by `package.module:ATTRIBUTE` (a study's `family:` key), imported from the project
root or an installed package; its source hash enters the identity of what it measures."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

from headroom.families.contract import FamilyError, check_family

SPEC = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Loaded:
    """A family as a study uses it: the object, its spec and the BLAKE3 of its source files."""

    family: Any
    spec: str
    source_blake3: str
    files: tuple[str, ...]


def source_files(module: Any) -> list[Path]:
    """The files whose bytes are the family's source: a package's .py files (its kernels included),
    else the module's own file."""
    path = Path(inspect.getsourcefile(module) or "")
    if path.name == "__init__.py":
        return sorted(p for p in path.parent.rglob("*.py") if "__pycache__" not in p.parts)
    return [path]


def source_blake3(files: list[Path]) -> str:
    h = blake3.blake3()
    for p in files:
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def load(spec: str, *, device: str, root: str | os.PathLike = ".") -> Loaded:
    """Import the family `spec` names, for `device` ("cuda" runs kernels on the GPU; anything else
    sets TRITON_INTERPRET=1 before the import, so Triton kernels run on the interpreter)."""
    if not isinstance(spec, str) or not SPEC.fullmatch(spec):
        raise FamilyError(
            f"family {spec!r}: must be `package.module:ATTRIBUTE` (e.g. examples.rmsnorm.family:FAMILY)"
        )
    module_name, attr = spec.split(":")
    if device != "cuda":
        os.environ["TRITON_INTERPRET"] = "1"
    root = str(Path(root).resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise FamilyError(
            f"family {spec!r}: importing {module_name} raised {type(exc).__name__}: {str(exc)[:300]}"
        ) from None
    if not hasattr(module, attr):
        raise FamilyError(f"family {spec!r}: module {module_name} has no attribute {attr!r}")
    family = getattr(module, attr)
    if inspect.isclass(family):
        try:
            family = family()
        except Exception as exc:
            raise FamilyError(
                f"family {spec!r}: {attr}() raised {type(exc).__name__}: {str(exc)[:300]}"
            ) from None
    check_family(family)
    files = source_files(module)
    return Loaded(family, spec, source_blake3(files), tuple(str(p) for p in files))
