# The correctness gate: every candidate x every distinct trace shape against float64. Candidates
# that fail are dropped by headroom.measure.correctness.admitted() in every later stage, or stop the
# pipeline here when on_correctness_failure is `fail`.
if not REPLAY:

    rule correctness:
        input:
            trace=f"{R}/trace.parquet",
            candidates=f"{R}/candidates.parquet",
            code=src(
                "headroom/measure/correctness.py",
                "headroom/measure/candidates.py",
                "headroom/measure/runner.py",
                "scripts/correctness.py",
                *KERNEL_CODE,
            ),
        output:
            correctness=artifact(f"{R}/correctness.parquet"),
        log:
            f"{R}/logs/correctness.log",
        benchmark:
            f"{R}/benchmarks/correctness.tsv"
        conda:
            "../envs/gpu.yaml"
        resources:
            gpu=1,
        params:
            device=DEVICE,
            correctness=STUDY["correctness"],
            on_correctness_failure=STUDY.get("on_correctness_failure", "fail"),
            rope_base=STUDY["partition"].get("rope_base", 10000.0),
        script:
            "../scripts/correctness.py"
