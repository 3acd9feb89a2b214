# headroom: is a shape-adaptive attention kernel portfolio worth building?
# Run: snakemake --cores 1 --resources gpu=1   (profiles/default is applied automatically)
#      snakemake ... --config 'studies=[default,azure-conv]'   (several studies, results/<study>/)
import sys

from snakemake.utils import min_version, validate

min_version("9.0")

# `headroom` imports from this checkout, installed or not (rules/common.smk says more).
sys.path.insert(0, workflow.basedir)
from headroom.core.config import ConfigError, check_size, type_cli_values, validate_schema


configfile: "config/config.yaml"


# A nested --config value (decision={max_gap_to_oracle_pct: 2.0}) arrives as strings: typed here
# as the schema types it, in the merged config and in the overrides the studies are planned with.
# headroom's own schema check comes first: YAML aliases expanding past its node limit are refused
# before anything walks them, and an error is one short line (snakemake's validate prints the whole
# config); snakemake's then fills in the schema's defaults.
try:
    check_size(config, "the configuration (config/config.yaml, --configfile, --config)")
    type_cli_values(config)
    type_cli_values(workflow.config_settings.config)
    validate_schema(config)
except ConfigError as exc:
    raise WorkflowError(f"invalid configuration: {exc}")
validate(config, "headroom/core/schema.yaml")


include: "rules/common.smk"


wildcard_constraints:
    study=one_of(STUDIES),
    run=r"\d+",


include: "rules/setup.smk"
include: "rules/trace.smk"
include: "rules/correctness.smk"
include: "rules/measure.smk"
include: "rules/replay.smk"
include: "rules/analysis.smk"
include: "rules/catalog.smk"
include: "rules/bench.smk"


# No GPU, seconds each: they run where Snakemake runs, not as cluster jobs.
localrules:
    all,
    catalog,
    studies,
    replay,


# Every artifact of every study (and its hash sidecar) is a target, not only the catalog and the
# reports: a plain run rebuilds an intermediate artifact that was deleted, even when what was made
# from it still exists.
rule all:
    default_target: True
    input:
        [f"{R}/{name}{ext}" for name in ("catalog.duckdb", "report/studies.html") for ext in ("", ".blake3")],
        f"{R}/report/studies.md.blake3",
        [p + ext for name in STUDIES for p in artifacts_of(name) for ext in ("", ".blake3")],
        expand(
            f"{R}/{{study}}/report/{{page}}{{ext}}",
            study=list(STUDIES),
            page=["index.html", "report.md"],
            ext=["", ".blake3"],
        ),
        expand(f"{R}/{{study}}/dispatch.json{{ext}}", study=list(STUDIES), ext=["", ".blake3"]),
