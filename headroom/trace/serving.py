"""What a serving trace holds beyond the phase mix (`headroom trace describe`): the engine steps,
prefill chunks, the prefix cache's hit rate and how ragged the decode batches are.

Two sources: the trace's own rows (its serving columns, headroom.trace.invocations.SERVING_COLUMNS)
and the facts its `trace` stage recorded in the provenance about the whole window before sampling
(`window_facts`: every step and chunk of the window; the prefix cache's hit rate beside an
unbounded cache's, from headroom.trace.invocations).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from headroom.core.format import pct
from headroom.trace.requests import PREFILL, STEPS


def window_facts(stream: Any, in_window: np.ndarray) -> dict[str, Any]:
    """Steps and prefill chunks of the window's invocations (the engine's stream, before sampling):
    invocations per step kind, chunks, requests prefilled in the window and their chunk counts."""
    steps = np.bincount(stream.step[in_window], minlength=len(STEPS))
    prefill = in_window[stream.phase[in_window] == PREFILL]
    per_request = np.unique(stream.request[prefill], return_counts=True)[1]
    over_cache = np.count_nonzero(stream.q_len[prefill] < stream.kv_max[prefill])
    return {
        "steps": {name: int(c) for name, c in zip(STEPS, steps, strict=True)},
        "chunks": int(prefill.size),
        "chunks_over_cache": int(over_cache),
        "requests_prefilled": int(per_request.size),
        "chunks_per_request_max": int(per_request.max()) if per_request.size else 0,
        "requests_chunked": int(np.count_nonzero(per_request > 1)),
    }


def _raggedness(kv_lens: pd.Series) -> dict[str, float] | None:
    """Per decode batch with kv_lens, max / mean kv_len (1: uniform): p50, p90, max over batches."""
    lens = [np.asarray(v) for v in kv_lens if v is not None and len(v)]
    if not lens:
        return None
    ratio = np.array([v.max() / v.mean() for v in lens])
    return {
        "batches": len(lens),
        "p50": float(np.median(ratio)),
        "p90": float(np.quantile(ratio, 0.9)),
        "max": float(ratio.max()),
    }


def describe(df: pd.DataFrame, extra: dict[str, Any] | None) -> dict[str, Any] | None:
    """The serving facts of a trace (None for a trace without serving columns or facts)."""
    extra = extra or {}
    if "step" not in df and "prefix_cache" not in extra:
        return None
    out: dict[str, Any] = {"prefix_cache": extra.get("prefix_cache"), "window": extra.get("serving")}
    if "step" in df:
        prefill = df[df["phase"] == "prefill"]
        out["steps"] = {str(k): int(v) for k, v in df["step"].value_counts().sort_index().items()}
        out["prefills_over_cache"] = int((prefill["q_len"] < prefill["kv_len"]).sum())
        out["prefills"] = len(prefill)
        out["cached_share"] = (
            float(prefill["cached_tokens"].sum() / prefill["kv_len"].sum()) if len(prefill) else 0.0
        )
    if "kv_lens" in df:
        out["raggedness"] = _raggedness(df.loc[df["phase"] == "decode", "kv_lens"])
    return out


def _share(value: float) -> str:
    return pct(100 * value, 1, signed=False)


def text(d: dict[str, Any] | None) -> list[str]:
    """describe() as lines of `headroom trace describe` (none for a trace without serving facts)."""
    if d is None:
        return []
    lines = [""]
    cache = d.get("prefix_cache")
    if cache:
        lines.append(
            f"prefix cache: {cache['capacity_blocks']:,} blocks of {cache['block_tokens']} tokens; hit rate "
            f"{_share(cache['hit_rate'])} of the prompt tokens of the window's {cache['window_requests']:,} "
            f"requests (an unbounded cache: {_share(cache['unbounded_hit_rate'])}; over the whole log "
            f"{_share(cache['log_unbounded_hit_rate'])})"
        )
    if "steps" in d:
        lines.append("trace rows by step: " + ", ".join(f"{k}: {v}" for k, v in d["steps"].items()))
        lines.append(
            f"prefills over a cache (q_len < kv_len): {d['prefills_over_cache']} of {d['prefills']}; "
            f"cached tokens {_share(d['cached_share'])} of their kv_len"
        )
    win = d.get("window")
    if win:
        steps = ", ".join(f"{k}: {v:,}" for k, v in win["steps"].items() if v)
        lines.append(f"window (before sampling and rounding), invocations by step: {steps}")
        lines.append(
            f"window prefill chunks: {win['chunks']:,} for {win['requests_prefilled']:,} requests "
            f"({win['requests_chunked']:,} in more than one chunk, at most {win['chunks_per_request_max']}); "
            f"{win['chunks_over_cache']:,} over a cache"
        )
    rag = d.get("raggedness")
    if rag:
        lines.append(
            f"decode raggedness (max / mean kv_len of a batch) over {rag['batches']} batches: "
            f"p50 {rag['p50']:.2f}, p90 {rag['p90']:.2f}, max {rag['max']:.2f}"
        )
    return lines
