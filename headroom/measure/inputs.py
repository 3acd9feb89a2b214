"""What every measuring stage builds its inputs from: a trace's shape rows checked, turned into
(q, k, v) sets of random data and cos/sin tables, and the device named (portfolio, lifecycle,
graph sweep, calibration, the cold-compile server and the cost model read them here)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from headroom.core import contracts

PHASES = ("prefill", "decode")
DTYPES = ("float16", "bfloat16", "float32")


def check_trace(trace: pd.DataFrame) -> None:
    missing = [c for c in contracts.TRACE_COLUMNS if c not in trace.columns]
    if missing:
        raise ValueError(f"trace lacks column(s) {missing}")
    if trace.empty:
        raise ValueError("trace has no invocations")
    for row in trace.itertuples(index=False):
        where = f"trace invocation {row.invocation}"
        if row.phase not in PHASES:
            raise ValueError(f"{where}: phase must be prefill or decode, got {row.phase!r}")
        if row.dtype not in DTYPES:
            raise ValueError(f"{where}: dtype must be one of {DTYPES}, got {row.dtype!r}")
        if row.phase == "prefill" and row.q_len != row.kv_len:
            raise ValueError(f"{where}: a prefill needs q_len == kv_len, got {row.q_len} and {row.kv_len}")
        if row.phase == "decode" and row.q_len != 1:
            raise ValueError(f"{where}: a decode needs q_len == 1, got {row.q_len}")
        if min(row.batch, row.q_len, row.kv_len, row.heads_q, row.heads_kv, row.head_dim) < 1:
            raise ValueError(f"{where}: batch, q_len, kv_len, heads and head_dim must be >= 1")


def set_bytes(row: Any) -> int:
    """Bytes of one input set (q, k, v) of a trace row."""
    elem = 4 if row.dtype == "float32" else 2
    q = row.batch * row.heads_q * row.q_len * row.head_dim
    kv = 2 * row.batch * row.heads_kv * row.kv_len * row.head_dim
    return int((q + kv) * elem)


def input_sets(row: Any, n_sets: int, device: str, seed: int) -> list[tuple]:
    """``n_sets`` independent (q, k, v) sets of standard-normal data for one trace row.

    q (B, Hq, Sq, D), k/v (B, Hkv, Skv, D) in the row's dtype; on CUDA when device == 'cuda', on
    the CPU (interpreter) otherwise."""
    import torch

    dtype = getattr(torch, row.dtype)
    dev = "cuda" if device == "cuda" else "cpu"
    gen = torch.Generator(device=dev).manual_seed(seed)
    q_shape = (row.batch, row.heads_q, row.q_len, row.head_dim)
    kv_shape = (row.batch, row.heads_kv, row.kv_len, row.head_dim)
    return [
        tuple(torch.randn(s, generator=gen, device=dev, dtype=dtype) for s in (q_shape, kv_shape, kv_shape))
        for _ in range(n_sets)
    ]


def device_name(device: str) -> str:
    if device != "cuda":
        return "cpu (triton interpreter)"
    import torch

    return torch.cuda.get_device_name(torch.cuda.current_device())


class RopeTables:
    """cos/sin tables per head_dim, built once per run on first use."""

    def __init__(self, max_pos: int, rope_base: float, device: str):
        self.max_pos, self.rope_base = max_pos, rope_base
        self.tdev = "cuda" if device == "cuda" else "cpu"
        self._tables: dict[int, tuple] = {}

    def get(self, inv: Any) -> tuple:
        from headroom.measure.runner import tables as candidate_tables

        if inv.head_dim not in self._tables:
            self._tables[inv.head_dim] = candidate_tables(
                self.max_pos, int(inv.head_dim), str(inv.dtype), self.rope_base, self.tdev
            )
        return self._tables[inv.head_dim]
