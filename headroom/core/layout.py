"""Where each file of a results folder lies: the catalog, the study folders, their artifacts,
report pages and dispatch tables (rules/common.smk writes them there).

The study of an artifact is the first folder below the results root (results/<study>/...). The
flat layout of before the study matrix (results/trace.parquet, results/portfolio/run-1.parquet)
is one study, `default`. Names starting with a dot (temporary files, hidden folders) are no one's.
"""

from __future__ import annotations

import os
from pathlib import Path

from headroom.core import artifacts

CATALOG_NAME = "catalog.duckdb"
DISPATCH_NAME = "dispatch.json"  # a study's dispatch table (headroom.dispatch loads it)
FLAT_LAYOUT_STUDY = "default"  # the study of a flat results/ folder (no study subfolders)


def hidden(path: Path, root: Path) -> bool:
    """True for a path below `root` with a part starting with a dot (no one's: see above)."""
    return any(part.startswith(".") for part in path.relative_to(root).parts)


def discover(results_dir: str | os.PathLike) -> list[Path]:
    """Every Parquet artifact under `results_dir` (with or without its recorded hash), sorted; a
    FIFO or a device under an artifact's name is listed too, so its readers refuse it."""
    root = Path(results_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*.parquet") if not p.is_dir() and not hidden(p, root))


def hashed_files(results_dir: str | os.PathLike) -> list[Path]:
    """Every file that must carry a recorded BLAKE3: artifacts, report files, the catalog."""
    root = Path(results_dir)
    if not root.is_dir():
        return []
    found = set(discover(root))
    for page in root.rglob("*"):
        if not page.is_dir() and not hidden(page, root) and "report" in page.relative_to(root).parts[:-1]:
            if not page.name.endswith(artifacts.SIDECAR_SUFFIX):
                found.add(page)
    # each study's dispatch table (the recommendation stage's JSON beside its parquet artifact)
    found.update(p for p in root.glob(f"*/{DISPATCH_NAME}") if not hidden(p, root))
    if os.path.lexists(root / CATALOG_NAME):
        found.add(root / CATALOG_NAME)
    return sorted(found)


def is_flat(results_dir: str | os.PathLike) -> bool:
    """True for the layout of before the study matrix: artifacts directly in the results folder."""
    root = Path(results_dir)
    return root.is_dir() and any(p.is_file() for p in root.glob("*.parquet"))


def study_of(path: str | os.PathLike, results_dir: str | os.PathLike, *, flat: bool) -> str:
    """The study an artifact belongs to: the first folder below the results root."""
    root = Path(results_dir).resolve()
    try:
        rel = (Path(path).parent.resolve() / Path(path).name).relative_to(root)  # a link not followed
    except ValueError:
        raise ValueError(f"{path}: an artifact outside the results folder {results_dir}") from None
    if flat or len(rel.parts) < 2:
        return FLAT_LAYOUT_STUDY
    return rel.parts[0]


def studies(results_dir: str | os.PathLike) -> dict[str, Path]:
    """{study: its folder} for every study with an artifact on disk, sorted by name."""
    root = Path(results_dir)
    if is_flat(root):
        return {FLAT_LAYOUT_STUDY: root}
    out = {}
    for path in discover(root):
        name = study_of(path, root, flat=False)
        if name != FLAT_LAYOUT_STUDY or len(path.relative_to(root).parts) > 1:
            out.setdefault(name, root / name)
    return dict(sorted(out.items()))
