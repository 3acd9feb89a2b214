# The correctness gate: every candidate x every distinct trace shape against float64. Candidates
# that fail are dropped by headroom.measure.correctness.admitted() in every later stage, or stop the
# pipeline here when on_correctness_failure is `fail`.
rule correctness:
    input:
        family=family_sources,
        trace=f"{S}/trace.parquet",
        candidates=f"{S}/candidates.parquet",
        code=src("scripts/correctness.py"),
    output:
        **artifact(correctness=f"{S}/correctness.parquet"),
    log:
        f"{S}/logs/correctness.log",
    benchmark:
        f"{S}/benchmarks/correctness.tsv"
    wildcard_constraints:
        study=one_of(MEASURED_STUDIES),
    conda:
        "../envs/gpu.yaml"
    threads: 1
    resources:
        **GPU_RESOURCES,
        # 4 GB, and ~1 GB more for each child compiling ahead of the checks (correctness.compile_workers;
        # four lifecycle compile children held about 3.4 GB resident on the H200)
        mem_mb=lambda wildcards: 4000 + 1000 * STUDIES[wildcards.study]["correctness"]["compile_workers"],
        runtime=30,
    params:
        family=family_param,
        device=device,
        correctness=cfg("correctness"),
        on_correctness_failure=cfg("on_correctness_failure", default="fail"),
        rope_base=cfg("partition", "rope_base", default=10000.0),
    script:
        "../scripts/correctness.py"
