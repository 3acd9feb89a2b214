"""One way to run a candidate, for every stage: the correctness gate, the portfolio runs, the
lifecycle costs and the graph sweep execute exactly the same code for the same candidate row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headroom.measure.candidates import NATIVE_BACKENDS


def is_native(cand: Any) -> bool:
    return str(getattr(cand, "backend", "triton") or "triton") != "triton"


def _sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend

    return {
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }[name]


def _native_fn(backend: str, cos, sin, rotate_k: bool) -> Callable:
    """RoPE by our standalone kernel (q at positions Skv-Sq+i, k at j when rotate_k), then SDPA
    with one backend forced and the causal mask aligned bottom-right like our kernels."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    from kernels import rope

    if not backend.startswith("sdpa-") or backend[5:] not in NATIVE_BACKENDS:
        raise ValueError(f"backend {backend!r} is not a native candidate backend")
    which = _sdpa_backend(backend[5:])

    def fn(q, k, v, out=None):
        res = _sdpa(q, k, v)
        return res if out is None else out.copy_(res)

    def _sdpa(q, k, v):
        sq, skv = q.shape[2], k.shape[2]
        qr = rope(q, cos, sin, skv - sq)
        kr = rope(k, cos, sin, 0) if rotate_k else k
        with sdpa_kernel(which):
            if sq == skv:
                return F.scaled_dot_product_attention(qr, kr, v, is_causal=sq > 1, enable_gqa=True)
            if sq == 1:  # bottom-right causal: the one new query sees every cached key
                return F.scaled_dot_product_attention(qr, kr, v, enable_gqa=True)
            return F.scaled_dot_product_attention(
                qr, kr, v, attn_mask=causal_lower_right(sq, skv), enable_gqa=True
            )

    return fn


def runner(cand: Any, cos, sin, rotate_k: bool) -> Callable:
    """fn(q, k, v, out=None) -> out for one candidate row (a namedtuple/Series with the COLUMNS).
    out: an optional output buffer (the correctness gate passes poisoned ones)."""
    if is_native(cand):
        return _native_fn(str(cand.backend), cos, sin, rotate_k)
    from kernels import Tile, attention

    tile = Tile(int(cand.block_m), int(cand.block_n), int(cand.num_warps), int(cand.num_stages))
    fused = bool(cand.fused)

    def fn(q, k, v, out=None):
        return attention(q, k, v, cos, sin, tile=tile, fused=fused, rotate_k=rotate_k, out=out)

    return fn


def tables(max_pos: int, head_dim: int, dtype: str, base: float, device: str):
    """cos/sin tables for every stage, in the data's dtype as serving stacks keep them (HF, vLLM
    cast their caches to the model dtype). The choice matters: the fused kernel loads table tiles
    beside q/k tiles, and float32 tables made fused prefill 8-55% slower on the H200 (BENCHMARKS.md)."""
    import torch

    from kernels import rope_tables

    return rope_tables(
        int(max_pos), int(head_dim), base=float(base), dtype=getattr(torch, str(dtype)), device=device
    )
