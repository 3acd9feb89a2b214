"""The checked convenience calls of causal GQA attention: attention() and attention_unrotated().

attention(rope=...) runs a cached generation-2 plan (plans.py); attention(fused=...) runs
generation 1's eager launches (gen1/), checking its inputs on every call as recorded.
"""

from __future__ import annotations

import torch

from . import gen1, mode, schedule
from .plans import cached_plan
from .schedule import Variant
from .tile import Tile


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    tile: Tile,
    rotate_k: bool,
    fused: bool | None = None,
    rope: str | None = None,
    variant: Variant | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal GQA attention with rotate-half RoPE: softmax(rope(q) rope(k)^T / sqrt(D)) v.

    q:   (B, Hq, Sq, D), un-rotated; query i sits at absolute position Skv - Sq + i
    k, v: (B, Hkv, Skv, D), Hq a multiple of Hkv, Skv >= Sq >= 1; query i sees keys
         j <= i + Skv - Sq (causal, bottom-right aligned)
    cos, sin: (max_pos, D // 2) tables from rope_tables, max_pos >= Skv
    tile: the candidate's launch shape
    rotate_k: True when k is un-rotated (rotated at positions j); False when k is a cache of
         already-rotated keys (decode)
    Exactly one of:
    fused: generation-1 kernels, exactly as recorded: True rotates in the attention kernel as
         tiles load (one launch); False runs the standalone RoPE kernel into new buffers first
    rope: generation-2 kernels, a RoPE placement of ROPE_MODES ('unfused', 'fused', 'q_fused';
         see kernels/schedule.py), run through a cached kernels.plan (variant: its switches,
         DEFAULT_VARIANT when None)
    out: optional (B, Hq, Sq, D) output buffer (any strides); a new contiguous one otherwise
    dtypes: float16/bfloat16 on CUDA, float16/float32 under TRITON_INTERPRET=1; q, k, v alike.
    Sq == 1 takes the decode path (packed query heads, split-KV), Sq > 1 the prefill path.
    Returns out, of q's dtype.
    """
    placement, generation = schedule.rope_mode(rope, fused)
    if generation == 2:
        mode.check_attention_inputs(q, k, v, tile, out)
        mode.check_mode()
        planned = cached_plan(
            q, k, v, cos, sin, out, tile=tile, rope=placement, rotate_k=rotate_k, variant=variant
        )
        return planned.run(q, k, v, cos, sin, out)
    if variant is not None:
        raise ValueError("variant= applies to generation-2 kernels (rope=), not fused=")
    mode.check_attention_inputs(q, k, v, tile, out)
    if type(rotate_k) is not bool:
        raise ValueError(f"rotate_k must be a bool, got {rotate_k!r}")
    mode.check_tables(cos, sin, q.shape[3], k.shape[2], q.device)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # (B, Hq, Sq, D)
    return gen1.run(q, k, v, cos, sin, out, tile, fused=fused, rotate_k=rotate_k)


def attention_unrotated(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    tile: Tile,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal GQA attention of already-rotated q and k (RoPE skipped): the attention launch of
    generation 1's unfused path alone. Shapes, dtypes and masking as in attention()."""
    mode.check_attention_inputs(q, k, v, tile, out)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # (B, Hq, Sq, D)
    # the tables are never read when nothing rotates
    return gen1.launch(q, k, v, None, None, out, tile, rotate_q=False, rotate_k=False)
