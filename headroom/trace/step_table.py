"""The serving engine's steps in a study's trace window: what a kernel family turns into its calls
(headroom.families; docs/families.md).

One row per engine step, in time order: its index (0-based, in the window), time, kind, the new
tokens it runs, every decoding sequence's kv_len and every prefill chunk's (q_len, kv_len). Token
counts are rounded up to `trace.round_to` as the attention trace rounds them.

Which invocations of the engine's stream form a step: with chunked prefill
(`trace.batching.max_batched_tokens`) every invocation of one scheduler step (its chunks and its
decode batch) -- a step with a chunk and decodes is `mixed`, one of chunks alone `prefill-only`,
one of decodes alone `decode-only`. Without chunking every prompt is prefilled whole at its arrival:
that prefill is a `prefill-only` step of its own, and each decode tick a `decode-only` step. The
window is the trace's (`trace.window`); the trace's sampler does not apply here: the family's
invocations are sampled after they are expanded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from headroom.trace import invocations
from headroom.trace.requests import NS_PER_S, PREFILL, STEPS

KINDS = ("decode-only", "mixed", "prefill-only")
COLUMNS = ("step", "time_s", "kind", "tokens", "decode_kv_lens", "prefill_chunks")
_MIXED = frozenset(i for i, s in enumerate(STEPS) if s.startswith("mixed"))
#: The steps artifact's Arrow types (the contract in headroom/core/contracts.py, kind `steps`): stated,
#: not inferred, so a window whose steps all lack decodes (or chunks) still has typed lists.
SCHEMA = pa.schema(
    [
        ("step", pa.int64()),
        ("time_s", pa.float64()),
        ("kind", pa.string()),
        ("tokens", pa.int64()),
        ("decode_kv_lens", pa.list_(pa.int64())),
        ("prefill_chunks", pa.list_(pa.list_(pa.int64()))),
    ]
)


def build(
    trace_cfg: dict[str, Any], partition: dict[str, Any], *, base_dir: str | Path = "."
) -> pd.DataFrame:
    """The steps table (COLUMNS) of a `trace:` section; the partition sizes the prefix cache as the
    trace's does. Bad config, a bad log or an empty window raise ValueError, as the trace does."""
    cfg = invocations.settings(trace_cfg)
    part = invocations._partition(partition)
    path, requests, _ = invocations.served_requests(cfg, part, base_dir)
    stream, in_window = invocations._window(requests, cfg, invocations._where(path), kv_lens=True)
    sel = stream.take(in_window)
    step_ns = round(cfg["batching"]["decode_step_s"] * NS_PER_S)
    return _table(sel, step_ns, cfg["round_to"])


def _groups(sel: Any) -> np.ndarray:
    """Each invocation's step number: a new step where the time changes, and, outside mixed steps,
    where the phase changes (an unchunked prefill is its own step, apart from a coinciding tick)."""
    mixed = np.isin(sel.step, list(_MIXED))
    label = np.where(mixed, -1, sel.phase.astype(np.int64))
    new = np.ones(len(sel), dtype=bool)
    new[1:] = (sel.time_ns[1:] != sel.time_ns[:-1]) | (label[1:] != label[:-1])
    return np.cumsum(new) - 1


def _table(sel: Any, step_ns: int, round_to: int) -> pd.DataFrame:
    group = _groups(sel)
    n = int(group[-1]) + 1 if len(group) else 0
    decodes: list[list[int]] = [[] for _ in range(n)]
    chunks: list[list[list[int]]] = [[] for _ in range(n)]
    mixed = np.zeros(n, dtype=bool)
    np.logical_or.at(mixed, group, np.isin(sel.step, list(_MIXED)))
    kv_len = invocations.round_up(sel.kv_max, round_to).astype(np.int64)
    q_len = np.minimum(invocations.round_up(sel.q_len, round_to).astype(np.int64), kv_len)
    for i, g in enumerate(group):
        if sel.phase[i] == PREFILL:
            chunks[g].append([int(q_len[i]), int(kv_len[i])])
        else:
            decodes[g].extend(invocations.round_up(sel.kv_lens(i, step_ns), round_to).tolist())
    first = np.flatnonzero(np.r_[True, group[1:] != group[:-1]]) if n else np.zeros(0, np.int64)
    kind = np.where(mixed, "mixed", np.where([bool(c) for c in chunks], "prefill-only", "decode-only"))
    return pd.DataFrame(
        {
            "step": np.arange(n, dtype=np.int64),
            "time_s": sel.time_ns[first] / NS_PER_S,
            "kind": kind,
            "tokens": np.array(
                [len(d) + sum(q for q, _ in c) for d, c in zip(decodes, chunks, strict=True)], np.int64
            ),
            "decode_kv_lens": pd.Series(decodes, dtype=object),
            "prefill_chunks": pd.Series(chunks, dtype=object),
        },
        columns=list(COLUMNS),
    )


def table(steps: pd.DataFrame) -> pa.Table:
    """The steps table as the `steps` artifact writes it (SCHEMA); `headroom.families.expand.steps_of`
    reads it back, from this table or from the artifact."""
    return pa.Table.from_pandas(
        steps[list(COLUMNS)].reset_index(drop=True), schema=SCHEMA, preserve_index=False
    )
