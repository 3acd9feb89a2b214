# The machine and the candidate set: everything downstream is measured on and for these.
rule environment:
    input:
        code=src("scripts/environment.py"),
    output:
        **artifact(environment=f"{S}/environment.parquet"),
    log:
        f"{S}/logs/environment.log",
    benchmark:
        f"{S}/benchmarks/environment.tsv"
    wildcard_constraints:
        study=one_of(MEASURED_STUDIES),
    conda:
        "../envs/gpu.yaml"
    threads: 1
    resources:
        **GPU_RESOURCES,
        mem_mb=2000,
        runtime=10,
    params:
        device=device,
        flashinfer=flashinfer_warm,
    script:
        "../scripts/environment.py"


rule candidates:
    input:
        family=family_sources,
        code=src("scripts/candidates.py"),
    output:
        **artifact(candidates=f"{S}/candidates.parquet"),
    log:
        f"{S}/logs/candidates.log",
    benchmark:
        f"{S}/benchmarks/candidates.tsv"
    wildcard_constraints:
        study=one_of(MEASURED_STUDIES),
    # a kernel family is imported here (its candidates): the environment with torch and Triton
    conda:
        "../envs/gpu.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime=5,
    params:
        tiles=cfg("tiles"),
        rope=cfg("rope"),
        generation=cfg("generation"),
        native=cfg("native_candidates", default=[]),
        varlen=cfg("varlen_decode", default=False),
        family=family_param,
    script:
        "../scripts/candidates.py"
