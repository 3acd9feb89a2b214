"""Import the measurement artifacts of a study run on a GPU host as committed reference data.

    python tools/import_reference.py STUDY.tar.gz --study NAME --dest data/reference/h200 \\
        [--log STUDY.log] [--command "the command that ran it"]

STUDY.tar.gz is what tools/reference_study.sh packed (the run's results/<study>/ folder). Only the
measurement artifacts are kept (environment, trace, candidates, correctness, portfolio runs and
their per-call samples, lifecycle, graph_sweep, calibration) with their recorded BLAKE3, each
verified first, plus the per-stage wall times (benchmarks/) and the Snakemake log. The analysis is
not kept: `snakemake --cores 1 --config replay=DEST/NAME` regenerates it on any machine.
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
from headroom.core.replay import MANIFEST_HEADER, MEASURED, OPTIONAL, import_artifact, manifest_row  # noqa: E402


def import_study(tarball: Path, study: str, dest: Path, log: Path | None, command: str | None) -> Path:
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
        names += [f"{n}.parquet" for n in OPTIONAL if (results / f"{n}.parquet").is_file()]
        names += sorted(
            p.relative_to(results).as_posix() for p in (results / "portfolio").glob("run-*.parquet")
        )
        if out.exists():
            shutil.rmtree(out)
        rows = []
        for name in names:
            digest = import_artifact(results / name, out / name)  # refuses a changed or unhashed artifact
            rows.append((name, digest, (out / name).stat().st_size))
        if (results / "benchmarks").is_dir():
            shutil.copytree(results / "benchmarks", out / "benchmarks")
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
        "`benchmarks/` holds Snakemake's per-stage wall times of the run; `snakemake.log.gz` its log.",
    ]
    (out / "README.md").write_text("\n".join(lines) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tarball", type=Path)
    p.add_argument("--study", required=True)
    p.add_argument("--dest", type=Path, default=Path("data/reference/h200"))
    p.add_argument("--log", type=Path)
    p.add_argument("--command")
    args = p.parse_args(argv)
    out = import_study(args.tarball, args.study, args.dest, args.log, args.command)
    print(f"imported {args.study} into {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
