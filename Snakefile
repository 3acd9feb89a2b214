# headroom: is a shape-adaptive attention kernel portfolio worth building?
# Run: snakemake --cores 1 --resources gpu=1   (profiles/default is applied automatically)
from snakemake.utils import min_version, validate

min_version("9.0")


configfile: "config/config.yaml"


validate(config, "headroom/core/schema.yaml")


include: "rules/common.smk"
include: "rules/setup.smk"
include: "rules/trace.smk"
include: "rules/correctness.smk"
include: "rules/measure.smk"
include: "rules/replay.smk"
include: "rules/analysis.smk"
include: "rules/catalog.smk"
include: "rules/bench.smk"


rule all:
    default_target: True
    input:
        "results/catalog.duckdb",
        "results/report/index.html",
        "results/report/report.md",
