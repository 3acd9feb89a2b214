# The machine and the candidate set: everything downstream is measured on and for these.
if not REPLAY:

    rule environment:
        input:
            code=src("headroom/measure/environment.py", "scripts/environment.py"),
        output:
            environment=artifact(f"{R}/environment.parquet"),
        log:
            f"{R}/logs/environment.log",
        benchmark:
            f"{R}/benchmarks/environment.tsv"
        conda:
            "../envs/gpu.yaml"
        resources:
            gpu=1,
        params:
            device=DEVICE,
        script:
            "../scripts/environment.py"

    rule candidates:
        input:
            code=src("headroom/measure/candidates.py", "scripts/candidates.py"),
        output:
            candidates=artifact(f"{R}/candidates.parquet"),
        log:
            f"{R}/logs/candidates.log",
        benchmark:
            f"{R}/benchmarks/candidates.tsv"
        conda:
            "../envs/analysis.yaml"
        params:
            tiles=STUDY["tiles"],
            rope=STUDY["rope"],
            generation=STUDY["generation"],
            native=STUDY.get("native_candidates", []),
        script:
            "../scripts/candidates.py"
