# Measurements on the GPU: the portfolio (one fresh process per run), lifecycle costs, the CUDA
# Graph working-set sweep and the machine calibration. On the interpreter they run with the smoke
# overlay (eager host-clock timings) or write `skipped` rows; they never fake a GPU number.
MEASURE_CODE = [
    "headroom/measure/timing.py",
    "headroom/core/settings.py",
    "headroom/measure/noise.py",
    "headroom/measure/portfolio.py",
    "headroom/measure/correctness.py",
    "headroom/measure/candidates.py",
    "headroom/measure/runner.py",
]

if not REPLAY:

    rule portfolio:
        input:
            trace=f"{R}/trace.parquet",
            candidates=f"{R}/candidates.parquet",
            correctness=f"{R}/correctness.parquet",
            code=src(*MEASURE_CODE, "scripts/portfolio.py", *KERNEL_CODE),
        output:
            portfolio=artifact(f"{R}/portfolio/run-{{run}}.parquet", run=RUNS),
            portfolio_samples=artifact(f"{R}/portfolio/run-{{run}}-samples.parquet", run=RUNS),
        log:
            f"{R}/logs/portfolio/run-{{run}}.log",
        benchmark:
            f"{R}/benchmarks/portfolio/run-{{run}}.tsv"
        wildcard_constraints:
            run=r"\d+",
        conda:
            "../envs/gpu.yaml"
        resources:
            gpu=1,
        params:
            device=DEVICE,
            # `runs` is left out: adding a run must not rerun the runs already measured.
            portfolio={k: v for k, v in STUDY["portfolio"].items() if k != "runs"},
            rope_base=STUDY["partition"].get("rope_base", 10000.0),
        script:
            "../scripts/portfolio.py"

    rule lifecycle:
        input:
            trace=f"{R}/trace.parquet",
            candidates=f"{R}/candidates.parquet",
            correctness=f"{R}/correctness.parquet",
            code=src(
                *MEASURE_CODE,
                "headroom/analysis/registry.py",
                "headroom/measure/lifecycle.py",
                "scripts/lifecycle.py",
                *KERNEL_CODE,
            ),
        output:
            lifecycle=artifact(f"{R}/lifecycle.parquet"),
        log:
            f"{R}/logs/lifecycle.log",
        benchmark:
            f"{R}/benchmarks/lifecycle.tsv"
        conda:
            "../envs/gpu.yaml"
        resources:
            gpu=1,
        params:
            device=DEVICE,
            lifecycle=STUDY["lifecycle"],
            # the dispatch timing fits the policies as the policies stage does
            policies={k: STUDY["policies"][k] for k in ("train_fraction", "clusters", "seed")},
            rope_base=STUDY["partition"].get("rope_base", 10000.0),
        script:
            "../scripts/lifecycle.py"

    rule graph_sweep:
        input:
            candidates=f"{R}/candidates.parquet",
            correctness=f"{R}/correctness.parquet",
            code=src(
                *MEASURE_CODE,
                "headroom/measure/graph_sweep.py",
                "headroom/trace/invocations.py",
                "scripts/graph_sweep.py",
                *KERNEL_CODE,
            ),
        output:
            graph_sweep=artifact(f"{R}/graph_sweep.parquet"),
        log:
            f"{R}/logs/graph_sweep.log",
        benchmark:
            f"{R}/benchmarks/graph_sweep.tsv"
        conda:
            "../envs/gpu.yaml"
        resources:
            gpu=1,
        params:
            device=DEVICE,
            graph_sweep=STUDY["graph_sweep"],
            partition=STUDY["partition"],
        script:
            "../scripts/graph_sweep.py"

    rule calibrate:
        input:
            code=src(
                "headroom/measure/timing.py",
                "headroom/core/settings.py",
                "headroom/measure/portfolio.py",
                "headroom/measure/candidates.py",
                "headroom/measure/runner.py",
                "headroom/measure/calibrate.py",
                "scripts/calibrate.py",
                *KERNEL_CODE,
            ),
        output:
            calibration=artifact(f"{R}/calibration.parquet"),
        log:
            f"{R}/logs/calibrate.log",
        benchmark:
            f"{R}/benchmarks/calibrate.tsv"
        conda:
            "../envs/gpu.yaml"
        resources:
            gpu=1,
        params:
            device=DEVICE,
            calibrate=STUDY["calibrate"],
        script:
            "../scripts/calibrate.py"
