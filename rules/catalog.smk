# The SQL entry point over every artifact: tables `artifacts`, `lineage`, one view per kind.
rule catalog:
    input:
        artifacts=lambda wildcards: sorted(set(ARTIFACTS)),
        code=src("headroom/core/catalog.py", "scripts/catalog.py"),
    output:
        catalog=f"{R}/catalog.duckdb",
    log:
        f"{R}/logs/catalog.log",
    benchmark:
        f"{R}/benchmarks/catalog.tsv"
    conda:
        "../envs/analysis.yaml"
    script:
        "../scripts/catalog.py"
