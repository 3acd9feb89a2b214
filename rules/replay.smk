# Replay: take recorded measurement artifacts (hashes verified) instead of measuring, so the
# analysis stages run on a machine without a GPU.
MEASURED = [
    "environment",
    "trace",
    "candidates",
    "correctness",
    "lifecycle",
    "graph_sweep",
    "calibration",
]

if REPLAY:

    rule replay:
        input:
            recorded=f"{REPLAY}/{{artifact}}.parquet",
            code=src("headroom/core/replay.py", "scripts/replay.py"),
        output:
            artifact=f"{R}/{{artifact}}.parquet",
        log:
            f"{R}/logs/replay/{{artifact}}.log",
        wildcard_constraints:
            artifact="|".join(MEASURED) + r"|portfolio/run-\d+|portfolio/run-\d+-samples",
        conda:
            "../envs/analysis.yaml"
        script:
            "../scripts/replay.py"

    for _name in MEASURED:
        artifact(f"{R}/{_name}.parquet")
    artifact(f"{R}/portfolio/run-{{run}}.parquet", run=RUNS)
    artifact(f"{R}/portfolio/run-{{run}}-samples.parquet", run=RUNS)
