# Replay: a study that takes recorded measurement artifacts (hashes and lineage verified when the
# DAG is planned, headroom/core/replay.py) instead of measuring, so the analysis stages run on a
# machine without a GPU.
rule replay:
    input:
        recorded=recorded,
        code=src("scripts/replay.py"),
    output:
        artifact=f"{S}/{{artifact}}.parquet",
        sidecar=f"{S}/{{artifact}}.parquet.blake3",
    log:
        f"{S}/logs/replay/{{artifact}}.log",
    wildcard_constraints:
        study=one_of(REPLAY_STUDIES),
        artifact="|".join(hreplay.MEASURED + hreplay.OPTIONAL)
        + r"|portfolio/run-\d+|portfolio/run-\d+-samples",
    conda:
        "../envs/analysis.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    script:
        "../scripts/replay.py"


for _name in hreplay.MEASURED:
    register(f"{S}/{_name}.parquet")
register(f"{S}/portfolio/run-{{run}}.parquet")
register(f"{S}/portfolio/run-{{run}}-samples.parquet")
