# The SQL entry point over every study's artifacts: results/catalog.duckdb (tables `artifacts`,
# `lineage`; one view per kind). The study of an artifact is its folder under results/.
rule catalog:
    input:
        artifacts=lambda wildcards: [p for name in STUDIES for p in artifacts_of(name)],
        code=src("scripts/catalog.py"),
    output:
        catalog=f"{R}/catalog.duckdb",
    log:
        f"{R}/logs/catalog.log",
    benchmark:
        f"{R}/benchmarks/catalog.tsv"
    conda:
        "../envs/analysis.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    script:
        "../scripts/catalog.py"


# The cross-study page (verdicts, headline figures and environments side by side) comes from
# headroom/report/studies.py: a local rule here with the studies' decision and environment
# artifacts as inputs and results/studies.html as output, added to `all`, once that module lands.
