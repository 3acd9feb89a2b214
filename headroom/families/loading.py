"""A family named by `package.module:ATTRIBUTE` (a study's `family:` key), imported from the project
root or an installed package; its source hash enters the identity of what it measures."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import blake3

from headroom.core.contracts import FAMILY_SPEC
from headroom.families.contract import FamilyError, check_family

#: `package.module:ATTRIBUTE`: the form a study's `family:` key takes (headroom/core/config.py checks it there).
SPEC = FAMILY_SPEC


@dataclass(frozen=True)
class Loaded:
    """A family as a study uses it: the object, its spec and the BLAKE3 of its source files."""

    family: Any
    spec: str
    source_blake3: str
    files: tuple[str, ...]

    def identity(self, root: str | os.PathLike = ".") -> dict[str, Any]:
        """What the family's artifacts record of it (their provenance's `extra.family`): name,
        version, spec, the BLAKE3 of its source files and the files (relative to `root` where under
        it), and its declared features ({name: Feature's fields}; provenance is stored with sorted
        keys, so `feature_order` keeps the declared order), and its `config_table` (``ConfigTable.to_record``)
        and `captured_by` (the feature whose capture sizes decide graph or eager) where it has them, so that an analysis of its artifacts needs no import of its code."""
        here = Path(root).resolve()
        files = [Path(f).resolve() for f in self.files]
        features = self.family.features
        table = getattr(self.family, "config_table", None)
        captured = getattr(self.family, "captured_by", None)
        return {
            "name": self.family.name,
            "version": self.family.version,
            "spec": self.spec,
            "source_blake3": self.source_blake3,
            "files": [str(f.relative_to(here)) if f.is_relative_to(here) else str(f) for f in files],
            "features": {name: dataclasses.asdict(f) for name, f in features.items()},
            "feature_order": list(features),
            **({} if table is None else {"config_table": table.to_record()}),
            **({} if captured is None else {"captured_by": captured}),
        }


def source_files(module: Any) -> list[Path]:
    """The files whose bytes are the family's source: a package's .py files (its kernels included),
    else the module's own file."""
    return _source_files_at(Path(inspect.getsourcefile(module) or ""))


def _source_files_at(path: Path) -> list[Path]:
    if path.name == "__init__.py":
        return sorted(p for p in path.parent.rglob("*.py") if "__pycache__" not in p.parts)
    return [path]


def local_source_files(spec: str, root: str | os.PathLike = ".") -> list[Path]:
    """The source files (as `source_files` names them) of the family `spec` names when its module lies
    under `root`, found from the spec alone: nothing is imported, so planning a study never runs the
    family's code. [] for a module that is not under `root` (an installed package: the source BLAKE3
    its artifacts record says what ran) or a spec of the wrong form (the config check names it)."""
    if not isinstance(spec, str) or not SPEC.fullmatch(spec):
        return []
    base = Path(root).joinpath(*spec.split(":")[0].split("."))
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return _source_files_at(path)
    return []


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
