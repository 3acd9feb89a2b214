# The trace: the time-ordered invocations every candidate is timed on, from the synthetic request
# log or a real one (trace.source); docs/traces.md describes the model.
from headroom.trace.invocations import resolve_source

_TRACE_SOURCE = resolve_source(STUDY["trace"].get("source", "synthetic"))

if not REPLAY:

    rule trace:
        input:
            # The request log is an input, so a changed log reruns the trace (and its BLAKE3 lands
            # in the provenance); the synthetic source has none.
            source=[str(_TRACE_SOURCE)] if _TRACE_SOURCE else [],
            code=src("headroom/trace/invocations.py", "headroom/trace/requests.py", "scripts/trace.py"),
        output:
            trace=artifact(f"{R}/trace.parquet"),
        log:
            f"{R}/logs/trace.log",
        benchmark:
            f"{R}/benchmarks/trace.tsv"
        conda:
            "../envs/analysis.yaml"
        params:
            trace=STUDY["trace"],
            partition={k: STUDY["partition"][k] for k in ("heads_q", "heads_kv", "head_dim", "dtype")},
        script:
            "../scripts/trace.py"
