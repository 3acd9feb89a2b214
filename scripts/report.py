import glob
from pathlib import Path

import pandas as pd

from headroom.core import artifacts
from headroom.core.stage import run_stage

# The report's inputs by name (headroom.report.build.INPUTS); portfolio and samples list one
# artifact per run, every other input is one artifact.
PER_RUN = ("portfolio", "samples")


def _benchmarks(folder: str) -> dict:
    """Snakemake `benchmark:` tables present now (not declared inputs: their times change every run)."""
    out = {}
    for path in sorted(glob.glob(f"{folder}/**/*.tsv", recursive=True)):
        out[str(Path(path).relative_to(folder).with_suffix(""))] = pd.read_csv(path, sep="\t")
    return out


def main(stage):
    from headroom.core import defaults
    from headroom.report import build as report

    declared = [name for name in report.INPUTS if hasattr(stage.smk.input, name)]
    inputs = {name: stage.read_all(name) if name in PER_RUN else stage.read(name) for name in declared}
    missing = {  # e.g. recommendation, until the report rule declares it: the report says so
        name: f"{name} is not an input of the report rule" for name in report.INPUTS if name not in declared
    }
    read = sorted(stage.input_hashes()["inputs"].items())
    out_dir = Path(stage.output_path("html")).parent
    paths = report.build(
        inputs,
        read,
        out_dir,
        title=stage.params["report"].get("title", defaults.value("report", "title")),
        benchmarks=_benchmarks(stage.params["benchmarks"]),
        missing=missing,
        # a kernel family's study: what its trace records of the family (its feature names)
        family=stage.read_provenance("trace").get("extra", {}).get("family") if "trace" in declared else None,
    )
    for path in paths.values():  # `headroom verify` covers the report too
        artifacts.record_hash(path)
    for side in out_dir.rglob("*" + artifacts.SIDECAR_SUFFIX):  # figures this report no longer has
        if not Path(str(side)[: -len(artifacts.SIDECAR_SUFFIX)]).exists():
            side.unlink()
    stage.log.info("report: %s", ", ".join(sorted(map(str, paths.values()))))


run_stage(snakemake, main)
