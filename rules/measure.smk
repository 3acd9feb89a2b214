# Measurements on the GPU: the portfolio (one fresh process per run), lifecycle costs, the CUDA
# Graph working-set sweep and the machine calibration. On the interpreter they run with the smoke
# overlay (eager host-clock timings) or write `skipped` rows; they never fake a GPU number.
rule portfolio:
    input:
        family=family_sources,
        trace=f"{S}/trace.parquet",
        candidates=f"{S}/candidates.parquet",
        correctness=f"{S}/correctness.parquet",
        code=src("scripts/portfolio.py"),
    output:
        **artifact(portfolio=f"{S}/portfolio/run-{{run}}.parquet"),
        **artifact(portfolio_samples=f"{S}/portfolio/run-{{run}}-samples.parquet"),
    log:
        f"{S}/logs/portfolio/run-{{run}}.log",
    benchmark:
        f"{S}/benchmarks/portfolio/run-{{run}}.tsv"
    wildcard_constraints:
        study=one_of(MEASURED_STUDIES),
    conda:
        "../envs/gpu.yaml"
    threads: 1
    resources:
        **GPU_RESOURCES,
        mem_mb=4000,
        runtime=30,
    params:
        family=family_param,
        device=device,
        # `runs` is left out: adding a run must not rerun the runs already measured.
        portfolio=lambda wildcards: {
            k: v for k, v in STUDIES[wildcards.study]["portfolio"].items() if k != "runs"
        },
        rope_base=cfg("partition", "rope_base", default=10000.0),
    script:
        "../scripts/portfolio.py"


rule lifecycle:
    input:
        family=family_sources,
        trace=f"{S}/trace.parquet",
        candidates=f"{S}/candidates.parquet",
        correctness=f"{S}/correctness.parquet",
        code=src("scripts/lifecycle.py"),
    output:
        **artifact(lifecycle=f"{S}/lifecycle.parquet"),
    log:
        f"{S}/logs/lifecycle.log",
    benchmark:
        f"{S}/benchmarks/lifecycle.tsv"
    wildcard_constraints:
        study=one_of(MEASURED_STUDIES),
    conda:
        "../envs/gpu.yaml"
    # four compile workers measure cold compile time; about 3.4 GB resident on the H200
    threads: 4
    resources:
        **GPU_RESOURCES,
        mem_mb=6000,
        runtime=30,
    params:
        family=family_param,
        device=device,
        lifecycle=cfg("lifecycle"),
        # the dispatch timing fits the policies as the policies stage does
        policies=cfg("policies", pick=("train_fraction", "clusters", "seed")),
        rope_base=cfg("partition", "rope_base", default=10000.0),
    script:
        "../scripts/lifecycle.py"


rule graph_sweep:
    input:
        family=family_sources,
        candidates=f"{S}/candidates.parquet",
        correctness=f"{S}/correctness.parquet",
        code=src("scripts/graph_sweep.py"),
    output:
        **artifact(graph_sweep=f"{S}/graph_sweep.parquet"),
    log:
        f"{S}/logs/graph_sweep.log",
    benchmark:
        f"{S}/benchmarks/graph_sweep.tsv"
    wildcard_constraints:
        study=one_of(MEASURED_STUDIES),
    conda:
        "../envs/gpu.yaml"
    threads: 1
    resources:
        **GPU_RESOURCES,
        mem_mb=4000,
        runtime=30,
    params:
        family=family_param,
        device=device,
        graph_sweep=cfg("graph_sweep"),
        partition=cfg("partition"),
    script:
        "../scripts/graph_sweep.py"


rule calibrate:
    input:
        # read for its identity only: the calibration records the environment it was measured in,
        # so a calibration of another run beside this study's environment is refused
        environment=f"{S}/environment.parquet",
        code=src("scripts/calibrate.py"),
    output:
        **artifact(calibration=f"{S}/calibration.parquet"),
    log:
        f"{S}/logs/calibrate.log",
    benchmark:
        f"{S}/benchmarks/calibrate.tsv"
    wildcard_constraints:
        study=one_of(MEASURED_STUDIES),
    conda:
        "../envs/gpu.yaml"
    threads: 1
    resources:
        **GPU_RESOURCES,
        mem_mb=4000,
        runtime=15,
    params:
        device=device,
        calibrate=cfg("calibrate"),
    script:
        "../scripts/calibrate.py"
