"""One way to run a candidate, for every stage: the correctness gate, the portfolio runs, the
lifecycle costs and the graph sweep execute exactly the same code for the same candidate row."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from headroom.measure.candidates import SDPA_BACKENDS, placement


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


def _causal_sdpa(backend: str) -> Callable:
    """attend(q, k, v) by PyTorch SDPA with one backend forced, causal mask aligned bottom-right."""
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    which = _sdpa_backend(backend)

    def attend(q, k, v):
        sq, skv = q.shape[2], k.shape[2]
        with sdpa_kernel(which):
            if sq == skv:
                return F.scaled_dot_product_attention(q, k, v, is_causal=sq > 1, enable_gqa=True)
            if sq == 1:  # bottom-right causal: the one new query sees every cached key
                return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            return F.scaled_dot_product_attention(
                q, k, v, attn_mask=causal_lower_right(sq, skv), enable_gqa=True
            )

    return attend


# FlexAttention is compiled once per process with dynamic shapes (a trace holds tens of shapes:
# one graph per shape would pass dynamo's recompile limit of 8 and fall back to eager, silently
# timing the unfused path); its block masks depend on the shape only, so one per (Sq, Skv, device)
# is built at first use and reused, as a serving engine builds it once per batch.
_FLEX_MASKS: dict[tuple, Any] = {}  # (Sq, Skv, device) -> block mask
_FLEX_FNS: dict[bool, Callable] = {}  # on CUDA -> the compiled (True) or eager (False) function


def _causal_flex() -> Callable:
    """attend(q, k, v) by FlexAttention with a bottom-right causal block mask. On CUDA it runs the
    compiled kernel; elsewhere (the interpreter's CPU runs) eager FlexAttention, which is correct
    but materializes the scores: there it is a correctness check, not a timing."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def attend(q, k, v):
        sq, skv = q.shape[2], k.shape[2]
        key = (sq, skv, str(q.device))
        if key not in _FLEX_MASKS:
            offset = skv - sq

            def causal(b, h, q_idx, kv_idx):
                return kv_idx <= q_idx + offset

            _FLEX_MASKS[key] = create_block_mask(causal, None, None, sq, skv, device=q.device)
        if q.is_cuda not in _FLEX_FNS:
            _FLEX_FNS[q.is_cuda] = _compiled_flex(flex_attention) if q.is_cuda else flex_attention
        return _FLEX_FNS[q.is_cuda](q, k, v, block_mask=_FLEX_MASKS[key], enable_gqa=True)

    return attend


def _compiled_flex(flex_attention) -> Callable:
    import torch
    import torch._dynamo

    # Decode (Sq = 1) and prefill specialize apart; raise the limits so no shape falls back to eager.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
    torch._dynamo.config.accumulated_recompile_limit = max(
        torch._dynamo.config.accumulated_recompile_limit, 4096
    )
    return torch.compile(flex_attention, dynamic=True)


def _native_fn(backend: str, cos, sin, rotate_k: bool) -> Callable:
    """RoPE by our standalone kernel (q at positions Skv-Sq+i, k at j when rotate_k), then the native
    attention (an SDPA backend or FlexAttention) with the causal mask aligned bottom-right."""
    from kernels import rope

    if backend == "flex":
        attend = _causal_flex()
    elif backend.startswith("sdpa-") and backend[5:] in SDPA_BACKENDS:
        attend = _causal_sdpa(backend[5:])
    else:
        raise ValueError(f"backend {backend!r} is not a native candidate backend")

    def fn(q, k, v, out=None):
        sq, skv = q.shape[2], k.shape[2]
        qr = rope(q, cos, sin, skv - sq)
        kr = rope(k, cos, sin, 0) if rotate_k else k
        res = attend(qr, kr, v)
        return res if out is None else out.copy_(res)

    return fn


def runner(cand: Any, cos, sin, rotate_k: bool) -> Callable:
    """fn(q, k, v, out=None) -> out for one candidate row (a namedtuple/Series with the COLUMNS).
    out: an optional output buffer (the correctness gate passes poisoned ones).

    Generation 1 calls kernels.attention(fused=...) as the first studies recorded it (inputs
    checked on every call). Generation 2 times what a serving engine runs: a plan made once per
    batch shape (kernels.plan: checks, split plan, scratch, compiled launchers) and Plan.run per
    call; a call whose tensors differ from the plan's (another shape or layout) makes a new plan."""
    if is_native(cand):
        return _native_fn(str(cand.backend), cos, sin, rotate_k)
    from kernels import Tile, attention

    tile = Tile(int(cand.block_m), int(cand.block_n), int(cand.num_warps), int(cand.num_stages))
    rope, generation = placement(cand)
    if generation == 1:
        fused = rope == "fused"

        def fn(q, k, v, out=None):
            return attention(q, k, v, cos, sin, tile=tile, fused=fused, rotate_k=rotate_k, out=out)

        return fn
    return _planned_fn(tile, rope, cos, sin, rotate_k)


def _planned_fn(tile, rope: str, cos, sin, rotate_k: bool) -> Callable:
    from kernels import plan

    current: list = [None]  # the plan of the last shape seen

    def fn(q, k, v, out=None):
        p = current[0]
        if p is not None:
            try:
                return p.run(q, k, v, cos, sin, out=out)
            except ValueError:
                pass  # other tensors than the plan's: plan again (plan() names what is invalid)
        current[0] = p = plan(q, k, v, cos, sin, tile=tile, rope=rope, rotate_k=rotate_k, out=out)
        return p.run(q, k, v, cos, sin, out=out)

    return fn


def build_plan(cand: Any, cos, sin, rotate_k: bool, q, k, v, out=None):
    """The kernels.Plan a generation-2 candidate runs for these tensors (None for generation 1 and
    native candidates, which have no plan): what the lifecycle times as the plan's build cost."""
    if is_native(cand):
        return None
    rope, generation = placement(cand)
    if generation == 1:
        return None
    from kernels import Tile, plan

    tile = Tile(int(cand.block_m), int(cand.block_n), int(cand.num_warps), int(cand.num_stages))
    return plan(q, k, v, cos, sin, tile=tile, rope=rope, rotate_k=rotate_k, out=out)


def tables(max_pos: int, head_dim: int, dtype: str, base: float, device: str):
    """cos/sin tables for every stage, in the data's dtype as serving stacks keep them (HF, vLLM
    cast their caches to the model dtype). The choice matters: the fused kernel loads table tiles
    beside q/k tiles, and float32 tables made fused prefill 8-55% slower on the H200 (BENCHMARKS.md)."""
    import torch

    from kernels import rope_tables

    return rope_tables(
        int(max_pos), int(head_dim), base=float(base), dtype=getattr(torch, str(dtype)), device=device
    )
