# The trace: the time-ordered invocations every candidate is timed on, from the synthetic request
# log or a real one (trace.source); docs/traces.md describes the model. The serving engine's steps
# (steps.parquet) are what a kernel family's calls are expanded from (config `family`,
# docs/families.md); the built-in attention family's trace comes from the engine's invocations.


rule steps:
    input:
        source=trace_source,
        code=src("scripts/steps.py"),
    output:
        **measured_artifact(steps=f"{S}/steps.parquet"),
    log:
        f"{S}/logs/steps.log",
    benchmark:
        f"{S}/benchmarks/steps.tsv"
    wildcard_constraints:
        study=one_of(MEASURED_STUDIES),
    conda:
        "../envs/analysis.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        trace=cfg("trace"),
        source_blake3=trace_source_blake3,
        partition=cfg("partition", pick=("heads_q", "heads_kv", "head_dim", "dtype")),
    script:
        "../scripts/steps.py"


rule trace:
    input:
        source=trace_source,
        steps=family_steps,
        family=family_sources,
        code=src("scripts/trace.py"),
    output:
        **artifact(trace=f"{S}/trace.parquet"),
    log:
        f"{S}/logs/trace.log",
    benchmark:
        f"{S}/benchmarks/trace.tsv"
    wildcard_constraints:
        study=one_of(MEASURED_STUDIES),
    # a kernel family is imported here (its shapes and costs): the environment with torch and Triton
    conda:
        "../envs/gpu.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=10,
    params:
        trace=cfg("trace"),
        source_blake3=trace_source_blake3,
        partition=cfg("partition", pick=("heads_q", "heads_kv", "head_dim", "dtype")),
        family=family_param,
    script:
        "../scripts/trace.py"
