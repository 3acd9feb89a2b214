# The SQL entry point over every study's artifacts: results/catalog.duckdb (tables `artifacts`,
# `lineage` and one table per kind, loaded after their hashes and identities are verified). The study
# of an artifact is its folder under results/; study folders of other runs that verify are loaded too.
rule catalog:
    input:
        artifacts=lambda wildcards: [p for name in STUDIES for p in artifacts_of(name)],
        code=src("scripts/catalog.py"),
    output:
        catalog=f"{R}/catalog.duckdb",
        catalog_blake3=f"{R}/catalog.duckdb.blake3",
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


# The cross-study page: verdicts, headline figures and each study's environment side by side, from
# the catalog (headroom/report/studies.py); `headroom verify` covers it.
rule studies:
    input:
        catalog=f"{R}/catalog.duckdb",
        code=src("scripts/studies.py"),
    output:
        html=f"{R}/report/studies.html",
        md=f"{R}/report/studies.md",
        # sidecars as outputs: a deleted one is written again by a plain run
        html_blake3=f"{R}/report/studies.html.blake3",
        md_blake3=f"{R}/report/studies.md.blake3",
    log:
        f"{R}/logs/studies.log",
    conda:
        "../envs/analysis.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=5,
    script:
        "../scripts/studies.py"
