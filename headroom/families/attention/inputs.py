"""What attention's measuring stages build their inputs from: a trace's shape rows checked, turned
into (q, k, v) sets of random data and cos/sin tables (the portfolio, lifecycle, graph sweep,
correctness gate, cold-compile server and plan cost model read them here)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from headroom.core import contracts

PHASES = ("prefill", "decode")
DTYPES = ("float16", "bfloat16", "float32")


def check_trace(trace: pd.DataFrame) -> None:
    """ValueError naming the first invalid row: phases, dtypes, sizes >= 1, a prefill with
    1 <= q_len <= kv_len (q_len < kv_len: a chunk over a cache, bottom-right aligned), a decode with
    q_len == 1, and, where the optional `kv_lens` column holds a list, a decode row's per-sequence
    lengths (see :func:`kv_lens`)."""
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
        if min(row.batch, row.q_len, row.kv_len, row.heads_q, row.heads_kv, row.head_dim) < 1:
            raise ValueError(f"{where}: batch, q_len, kv_len, heads and head_dim must be >= 1")
        if row.phase == "prefill" and row.q_len > row.kv_len:
            raise ValueError(f"{where}: a prefill needs q_len <= kv_len, got {row.q_len} and {row.kv_len}")
        if row.phase == "decode" and row.q_len != 1:
            raise ValueError(f"{where}: a decode needs q_len == 1, got {row.q_len}")
        _check_kv_lens(row, where)


def kv_lens(row: Any) -> list[int] | None:
    """The per-sequence kv lengths of a trace row (the trace column `kv_lens`: a list on decode
    rows of serving traces), or None for rows and traces without them."""
    value = getattr(row, "kv_lens", None)
    if value is None or (not hasattr(value, "__len__") and pd.isna(value)):
        return None
    return [int(n) for n in value]


def _check_kv_lens(row: Any, where: str) -> None:
    lens = kv_lens(row)
    if lens is None:
        return
    if row.phase != "decode":
        raise ValueError(f"{where}: kv_lens belong to decode rows, not to a {row.phase}")
    if len(lens) != row.batch:
        raise ValueError(f"{where}: kv_lens holds {len(lens)} lengths for a batch of {row.batch}")
    if min(lens) < 1 or max(lens) != row.kv_len:
        raise ValueError(
            f"{where}: kv_lens must be >= 1 with max(kv_lens) == kv_len ({row.kv_len}), "
            f"got min {min(lens)}, max {max(lens)}"
        )


def rotate_k(row: Any) -> bool:
    """Whether a row's keys enter attention un-rotated. A prefill from an empty cache (q_len ==
    kv_len) rotates its new keys (in the kernel or by the standalone RoPE kernel, as the placement
    says); a chunk over a cache (q_len < kv_len) and a decode read a cache of keys rotated when
    they were written, so nothing re-rotates them: there `fused` and `q_fused` both mean q
    rotated in the attention kernel (one launch), `unfused` the standalone kernel on q only."""
    return row.phase == "prefill" and row.q_len == row.kv_len


def kv_lens_tensor(row: Any, device: str):
    """The row's kv_lens as the (B,) int32 tensor the varlen kernels read, on the run's device
    (CUDA for 'cuda', else the CPU of the interpreter), or None for rows without them."""
    lens = kv_lens(row)
    if lens is None:
        return None
    import torch

    return torch.tensor(lens, dtype=torch.int32, device="cuda" if device == "cuda" else "cpu")


def set_bytes(row: Any) -> int:
    """Bytes of one input set (q, k, v) of a trace row: the padded cache (B, Hkv, kv_len, D) of a
    row with kv_lens included, which is what the buffers hold (the varlen kernels read only
    sum(kv_lens) of its keys)."""
    elem = 4 if row.dtype == "float32" else 2
    q = row.batch * row.heads_q * row.q_len * row.head_dim
    kv = 2 * row.batch * row.heads_kv * row.kv_len * row.head_dim
    return int((q + kv) * elem)


def input_sets(row: Any, n_sets: int, device: str, seed: int) -> list[tuple]:
    """``n_sets`` independent (q, k, v) sets of standard-normal data for one trace row.

    q (B, Hq, Sq, D), k/v (B, Hkv, Skv, D) in the row's dtype; on CUDA when device == 'cuda', on
    the CPU (interpreter) otherwise. A decode row with kv_lens gets the padded layout: a cache of
    capacity Skv = max(kv_lens) for every sequence, random data in the padding too (the varlen
    candidates never read it; the others attend over it, see headroom.families.attention.runner); the
    lengths come from :func:`kv_lens_tensor`, once per row (serving metadata, not data)."""
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


class RopeTables:
    """cos/sin tables per head_dim, built once per run on first use."""

    def __init__(self, max_pos: int, rope_base: float, device: str):
        self.max_pos, self.rope_base = max_pos, rope_base
        self.tdev = "cuda" if device == "cuda" else "cpu"
        self._tables: dict[int, tuple] = {}

    def get(self, inv: Any) -> tuple:
        from headroom.families.attention.runner import tables as candidate_tables

        if inv.head_dim not in self._tables:
            self._tables[inv.head_dim] = candidate_tables(
                self.max_pos, int(inv.head_dim), str(inv.dtype), self.rope_base, self.tdev
            )
        return self._tables[inv.head_dim]
