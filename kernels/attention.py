"""Host side of causal GQA attention: input checks, the decode split plan, and launches.

The kernels themselves are in _attention.py.
"""

from __future__ import annotations

import math

import torch
import triton

from . import _mode
from ._attention import decode_kernel, prefill_kernel, reduce_kernel
from .rope import check_tables, rope
from .tile import Tile

LOG2E = 1.4426950408889634  # softmax runs in base 2: exp(x) = exp2(x * LOG2E)

# Split-KV for decode, one plan for every candidate (it depends on the shape and the GPU, never
# on the tile). Without splits a decode launch has B * Hkv programs; a memory-bound loop needs
# several resident programs per SM to keep enough loads in flight, so we split the keys until
# there are DECODE_WAVES programs per SM, but never into splits shorter than MIN_SPLIT_KEYS
# (below that the reduction pass costs more than the parallelism gains). Split lengths are
# multiples of SPLIT_ALIGN_KEYS = the largest block_n, so only a sequence's last block is partial.
DECODE_WAVES = 4
MIN_SPLIT_KEYS = 16 if _mode.INTERPRET else 256
SPLIT_ALIGN_KEYS = 16 if _mode.INTERPRET else 256


def decode_split_plan(programs: int, kv_len: int, sm_count: int) -> tuple[int, int]:
    """(num_splits, split_len) for a decode launch of `programs` (B * Hkv * row blocks)."""
    wanted = triton.cdiv(DECODE_WAVES * sm_count, programs)
    most = max(1, kv_len // MIN_SPLIT_KEYS)
    splits = max(1, min(wanted, most))
    split_len = triton.cdiv(triton.cdiv(kv_len, splits), SPLIT_ALIGN_KEYS) * SPLIT_ALIGN_KEYS
    return triton.cdiv(kv_len, split_len), split_len


def decode_block_m(tile: Tile, rows: int) -> int:
    """Decode packs group * Sq rows along M; a tile's block_m is capped at that count rounded up
    to a power of two (at least 16, the smallest tl.dot M) so no program computes empty rows."""
    return min(tile.block_m, max(16, triton.next_power_of_2(rows)))


def _check_inputs(q, k, v, tile, out) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D, got shape {tuple(t.shape)}")
    _mode.check_dtype("q", q)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name} dtype {t.dtype} differs from q dtype {q.dtype}")
    _mode.check_device("q", q)
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    batch, heads_q, q_len, head_dim = q.shape
    _mode.check_head_dim("q", head_dim)
    if k.shape != v.shape:
        raise ValueError(f"k shape {tuple(k.shape)} differs from v shape {tuple(v.shape)}")
    if k.shape[0] != batch:
        raise ValueError(f"k batch {k.shape[0]} differs from q batch {batch}")
    if k.shape[3] != head_dim:
        raise ValueError(f"k head_dim {k.shape[3]} differs from q head_dim {head_dim}")
    heads_kv, kv_len = k.shape[1], k.shape[2]
    if batch < 1 or heads_q < 1 or heads_kv < 1:
        raise ValueError(f"q and k need at least one batch and head, got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    if heads_q % heads_kv:
        raise ValueError(f"q heads ({heads_q}) must be a multiple of k heads ({heads_kv})")
    if q_len < 1:
        raise ValueError(f"q must hold at least one query (Sq >= 1), got Sq={q_len}")
    if kv_len < q_len:
        raise ValueError(f"k holds {kv_len} keys but q has {q_len} queries; causal attention "
                         "needs Skv >= Sq")
    if not isinstance(tile, Tile):
        raise ValueError(f"tile must be a kernels.Tile, got {type(tile).__name__}")
    if out is not None:
        _mode.check_out(out, q.shape, q.dtype, q.device)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    tile: Tile,
    fused: bool,
    rotate_k: bool,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal GQA attention with rotate-half RoPE: softmax(rope(q) rope(k)^T / sqrt(D)) v.

    q:   (B, Hq, Sq, D), un-rotated; query i sits at absolute position Skv - Sq + i
    k, v: (B, Hkv, Skv, D), Hq a multiple of Hkv, Skv >= Sq >= 1; query i sees keys
         j <= i + Skv - Sq (causal, bottom-right aligned)
    cos, sin: (max_pos, D // 2) tables from rope_tables, max_pos >= Skv
    tile: the candidate's launch shape
    fused: True rotates in the attention kernel as tiles load (one launch); False runs the
         standalone RoPE kernel into new buffers first
    rotate_k: True when k is un-rotated (rotated at positions j); False when k is a cache of
         already-rotated keys (decode)
    out: optional (B, Hq, Sq, D) output buffer (any strides); a new contiguous one otherwise
    dtypes: float16/bfloat16 on CUDA, float16/float32 under TRITON_INTERPRET=1; q, k, v alike.
    Sq == 1 takes the decode path (packed query heads, split-KV), Sq > 1 the prefill path.
    Returns out, of q's dtype.
    """
    _check_inputs(q, k, v, tile, out)
    if type(fused) is not bool:
        raise ValueError(f"fused must be a bool, got {fused!r}")
    if type(rotate_k) is not bool:
        raise ValueError(f"rotate_k must be a bool, got {rotate_k!r}")
    check_tables(cos, sin, q.shape[3], k.shape[2], q.device)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    return _run(q, k, v, cos, sin, out, tile, fused=fused, rotate_k=rotate_k)


def _run(q, k, v, cos, sin, out, tile, *, fused, rotate_k, path=None):
    """attention() after its checks. path: None picks decode for Sq == 1, prefill otherwise;
    tests force 'prefill' or 'decode' to cover both kernels on any 1 <= Sq <= Skv."""
    if fused:
        return _launch(q, k, v, cos, sin, out, tile, rotate_q=True, rotate_k=rotate_k, path=path)
    q = rope(q, cos, sin, k.shape[2] - q.shape[2])
    if rotate_k:
        k = rope(k, cos, sin, 0)
    return _launch(q, k, v, None, None, out, tile, rotate_q=False, rotate_k=False, path=path)


def attention_unrotated(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    tile: Tile,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Causal GQA attention of already-rotated q and k (RoPE skipped): the attention launch of
    the unfused path alone. Shapes, dtypes and masking as in attention()."""
    _check_inputs(q, k, v, tile, out)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    # the tables are never read when nothing rotates; q stands in for the pointer argument
    return _launch(q, k, v, None, None, out, tile, rotate_q=False, rotate_k=False)


def _launch(q, k, v, cos, sin, out, tile, *, rotate_q, rotate_k, path=None):
    """Launch the prefill or decode kernels (see _run for path); cos None: nothing rotates."""
    batch, heads_q, q_len, head_dim = q.shape
    heads_kv, kv_len = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    qk_scale = LOG2E / math.sqrt(head_dim)
    if cos is None:
        cos = sin = q
        stride_tab = 0
    else:
        stride_tab = cos.stride(0)
    strides = (*q.stride(), *k.stride(), *v.stride(), *out.stride(), stride_tab)
    if path is None:
        path = "decode" if q_len == 1 else "prefill"
    if path == "prefill":
        grid = (batch * heads_q, triton.cdiv(q_len, tile.block_m))
        prefill_kernel[grid](
            q, k, v, out, cos, sin, *strides,
            heads_q, group, q_len, kv_len, qk_scale,
            HEAD_DIM=head_dim, BLOCK_M=tile.block_m, BLOCK_N=tile.block_n,
            ROTATE_Q=rotate_q, ROTATE_K=rotate_k,
            num_warps=tile.num_warps, num_stages=tile.num_stages,
        )
        return out
    rows = group * q_len
    block_m = decode_block_m(tile, rows)
    row_blocks = triton.cdiv(rows, block_m)
    num_splits, split_len = decode_split_plan(
        batch * heads_kv * row_blocks, kv_len, _mode.sm_count(q.device)
    )
    if num_splits > 1:
        part_o = torch.empty((batch * heads_kv * num_splits * rows, head_dim),
                             dtype=torch.float32, device=q.device)
        part_lse = torch.empty((batch * heads_kv * num_splits * rows,),
                               dtype=torch.float32, device=q.device)
    else:
        part_o = part_lse = out  # not read or written when SPLIT is False
    decode_kernel[(row_blocks, batch * heads_kv, num_splits)](
        q, k, v, out, part_o, part_lse, cos, sin, *strides,
        heads_kv, group, q_len, kv_len, split_len, qk_scale,
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=tile.block_n,
        ROTATE_Q=rotate_q, ROTATE_K=rotate_k, SPLIT=num_splits > 1,
        num_warps=tile.num_warps, num_stages=tile.num_stages,
    )
    if num_splits > 1:
        reduce_kernel[(batch * heads_kv * rows,)](
            part_o, part_lse, out, *out.stride(),
            heads_kv, group, q_len, num_splits,
            HEAD_DIM=head_dim, BLOCK_S=max(2, triton.next_power_of_2(num_splits)),
        )
    return out
