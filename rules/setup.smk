# The machine and the candidate set: everything downstream is measured on and for these.
if not REPLAY:

    rule environment:
        output:
            environment=artifact(f"{R}/environment.parquet"),
        params:
            device=DEVICE,
        log:
            f"{R}/logs/environment.log",
        benchmark:
            f"{R}/benchmarks/environment.tsv"
        resources:
            gpu=1,
        conda:
            "../envs/gpu.yaml"
        input:
            code=src("headroom/measure/environment.py", "scripts/environment.py"),
        script:
            "../scripts/environment.py"

    rule candidates:
        output:
            candidates=artifact(f"{R}/candidates.parquet"),
        params:
            tiles=STUDY["tiles"],
            fusion=STUDY["fusion"],
            native=STUDY.get("native_candidates", []),
        log:
            f"{R}/logs/candidates.log",
        benchmark:
            f"{R}/benchmarks/candidates.tsv"
        conda:
            "../envs/analysis.yaml"
        input:
            code=src("headroom/measure/candidates.py", "scripts/candidates.py"),
        script:
            "../scripts/candidates.py"
