"""Generation-1 launcher of the standalone RoPE kernel (_rope.py), as the unfused candidates of
the first studies launched it."""

from __future__ import annotations

import torch
import triton

from ..launch import LaunchSpec, Slot, named_strides
from ._rope import rope_kernel

# Rows of x per RoPE program: 64 rows x head_dim/2 x 2 halves keeps a program's loads at
# 8-16 KB for head_dim 64-128, enough bytes in flight for a memory-bound copy-like kernel.
_ROPE_BLOCK_S = 64


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions_offset: int) -> torch.Tensor:
    """x (B, H, S, D) rotated at positions positions_offset + s into a new contiguous buffer
    (inputs checked by the caller); one launch."""
    out = torch.empty(x.shape, dtype=x.dtype, device=x.device)  # (B, H, S, D)
    if x.numel() == 0:
        return out
    tensors = {"x": x, "out": out, "cos": cos, "sin": sin}
    rope_spec(tensors, positions_offset).launch(tensors)
    return out


def rope_spec(tensors: dict, positions_offset: int, *, x="x", out="out", cos="cos", sin="sin") -> LaunchSpec:
    """The standalone RoPE launch as data: rotate tensors[x] into tensors[out] at positions
    positions_offset + s; x, out, cos, sin name the slots the launch reads at run time."""
    xt, ot = tensors[x], tensors[out]
    batch, heads, seq, head_dim = xt.shape
    grid = (triton.cdiv(seq, _ROPE_BLOCK_S), batch * heads, 1)
    args = dict(
        x_ptr=Slot(x),
        out_ptr=Slot(out),
        cos_ptr=Slot(cos),
        sin_ptr=Slot(sin),
        **named_strides("x", xt),
        **named_strides("o", ot),
        stride_tab=tensors[cos].stride(0),
        H=heads,
        S=seq,
        positions_offset=positions_offset,
        HALF=head_dim // 2,
        BLOCK_S=_ROPE_BLOCK_S,
    )
    return LaunchSpec(rope_kernel, grid, args, {})
