"""Import the measurement artifacts of a study run on a GPU host as committed reference data.

    python tools/import_reference.py STUDY.tar.gz --study NAME --dest data/reference/h200 \\
        [--log STUDY.log] [--command "the command that ran it"]

STUDY.tar.gz is what tools/reference_study.sh packed (the run's results/<study>/ folder). Only the
measurement artifacts are kept (environment, trace, candidates, correctness, portfolio runs and
their per-call samples, lifecycle, graph_sweep, calibration; a family study's engine steps, which
its trace was made from) with their recorded BLAKE3, each verified first, plus the per-stage wall
times (benchmarks/) and the Snakemake log. The analysis is not kept: `snakemake --cores 1 --config
replay=DEST/NAME` regenerates it on any machine.

The project source files the artifacts name as lineage inputs (a kernel family's module) are kept
too, under sources/ with their BLAKE3, copied from this checkout, which must hold them as measured:
a replay then verifies against them after the files have moved on (headroom.core.replay.SOURCES).
`--keep-sources DEST/NAME` keeps them for a folder imported before.
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from headroom.core import artifacts  # noqa: E402
from headroom.core.replay import (  # noqa: E402
    MANIFEST_HEADER,
    MEASURED,
    OPTIONAL,
    SOURCES,
    import_artifact,
    is_source,
    manifest_row,
)

ROOT = Path(__file__).resolve().parent.parent


def recorded_sources(folder: Path, root: Path = ROOT) -> dict[str, str]:
    """{project source file: BLAKE3} of each source the folder's artifacts name as a lineage input;
    SystemExit naming it when ``root``'s file is not the one recorded (checked before anything is
    written)."""
    wanted: dict[str, str] = {}
    for path in sorted(folder.rglob("*.parquet")):
        for inp, recorded in artifacts.read_provenance(path).get("inputs", {}).items():
            if is_source(inp):
                wanted.setdefault(inp, recorded)
    for inp, recorded in sorted(wanted.items()):
        here = root / inp
        now = artifacts.hash_file(here) if here.is_file() else "absent"
        if now != recorded:
            raise SystemExit(
                f"import_reference: {inp} here has BLAKE3 {now[:16]}, the study recorded {recorded[:16]}: "
                "import from a checkout of the commit that measured it"
            )
    return wanted


def keep_sources(folder: Path, root: Path = ROOT, sources: dict[str, str] | None = None) -> list[str]:
    """Copy into folder/sources/ (with sidecars) each project source file the folder's artifacts
    name as a lineage input (``sources``, default :func:`recorded_sources`), from ``root``."""
    sources = recorded_sources(folder, root) if sources is None else sources
    for inp in sorted(sources):
        kept = folder / SOURCES / inp
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / inp, kept)
        artifacts.record_hash(kept)
    return sorted(sources)


def optional_inputs(results: Path, names: list[str]) -> list[str]:
    """The OPTIONAL artifacts in ``results`` that a kept artifact (``names``) names as a lineage
    input: a family study's engine steps, its trace's input. An attention study writes steps too,
    from its request log, but nothing measured was made from them: not kept (its replay has none,
    as the attention references recorded before the steps stage existed; `snakemake` on the log
    makes them again)."""
    named = {
        Path(inp).name
        for name in names
        for inp in artifacts.read_provenance(results / name).get("inputs", {})
    }
    return [
        f"{n}.parquet" for n in OPTIONAL if f"{n}.parquet" in named and (results / f"{n}.parquet").is_file()
    ]


def import_study(
    tarball: Path, study: str, dest: Path, log: Path | None, command: str | None, root: Path = ROOT
) -> Path:
    """The study packed in ``tarball`` imported as dest/study; ``root``: the checkout its sources come from."""
    out = dest / study
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(tarball) as tar:
            tar.extractall(tmp, filter="data")
        # results/<study>/ (tools/reference_study.sh), or a whole results/ folder of the flat
        # layout the first reference studies were packed in
        results = Path(tmp) / "results"
        studies = (
            [p for p in results.iterdir() if (p / "trace.parquet").is_file()] if results.is_dir() else []
        )
        if not (results / "trace.parquet").is_file() and len(studies) == 1:
            results = studies[0]
        names = [f"{n}.parquet" for n in MEASURED]
        names += sorted(
            p.relative_to(results).as_posix() for p in (results / "portfolio").glob("run-*.parquet")
        )
        names += optional_inputs(results, names)
        sources = recorded_sources(results, root)  # before anything is written: refused in one line
        if out.exists():
            shutil.rmtree(out)
        rows = []
        for name in names:
            digest = import_artifact(results / name, out / name)  # refuses a changed or unhashed artifact
            rows.append((name, digest, (out / name).stat().st_size))
        if (results / "benchmarks").is_dir():
            shutil.copytree(results / "benchmarks", out / "benchmarks")
        keep_sources(out, root, sources)
        if log:  # compressed (the tracked tree stays one transfer for an offline GPU host), no timestamp
            with open(log, "rb") as src, gzip.GzipFile(out / "snakemake.log.gz", "wb", 9, mtime=0) as dst:
                shutil.copyfileobj(src, dst)
    env = artifacts.read(out / "environment.parquet").iloc[0]
    lines = [
        f"# Reference measurements: study `{study}`",
        "",
        f"Measured on {env['gpu_name']} ({env['sm_count']} SMs, L2 {env['l2_bytes']} bytes, driver {env['driver']},",
        f"CUDA {env['cuda']}), torch {env['torch']}, Triton {env['triton']}, Python {env['python']}.",
        "",
        "Command (repository root on the GPU host, offline wheels installed as docs/airgapped.md says):",
        "",
        f"    {command or '(not recorded)'}",
        "",
        "Replay the analysis on any machine (hashes verified first):",
        "",
        f"    snakemake --cores 1 --config replay={out.as_posix()}",
        "",
        *MANIFEST_HEADER,  # the manifest check_recorded holds a replay folder to
        *[manifest_row(n, d, b) for n, d, b in rows],
        "",
        "`benchmarks/` holds Snakemake's per-stage wall times of the run; `snakemake.log.gz` its log;",
        "`sources/` the project source files the artifacts were made from (a kernel family's module).",
    ]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tarball", type=Path, nargs="?")
    p.add_argument("--study")
    p.add_argument("--dest", type=Path, default=Path("data/reference/h200"))
    p.add_argument("--log", type=Path)
    p.add_argument("--command")
    p.add_argument(
        "--keep-sources", type=Path, metavar="DEST/NAME", help="only keep an imported folder's sources"
    )
    args = p.parse_args(argv)
    if args.keep_sources is not None:
        kept = keep_sources(args.keep_sources)
        print(
            f"kept {len(kept)} source(s) in {args.keep_sources / SOURCES}: {', '.join(kept) or 'none named'}"
        )
        return 0
    if args.tarball is None or args.study is None:
        p.error("a TARBALL and --study NAME are needed (or --keep-sources DEST/NAME)")
    out = import_study(args.tarball, args.study, args.dest, args.log, args.command)
    print(f"imported {args.study} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
