"""Host side of causal GQA attention: input checks, the launches as data (attention_specs), and
the checked convenience calls attention() / attention_unrotated().

The kernels are in _attention.py (generation 1, and the decode kernels of both generations) and
_prefill.py (generation-2 prefill); plans.py replays the same launches with less host work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from . import _mode, split
from ._attention import decode_kernel, prefill_kernel, reduce_kernel
from ._launch import Descriptor, LaunchSpec, Slot
from ._prefill import prefill2_kernel
from .rope import check_tables, named_strides, rope
from .tile import Tile

LOG2E = 1.4426950408889634  # softmax runs in base 2: exp(x) = exp2(x * LOG2E)

# The split-KV plan lives in split.py (torch-free, for the roofline); the interpreter's small test
# shapes use 16-key splits so the split path and its reduction run on CPU.
DECODE_WAVES = split.DECODE_WAVES
MIN_SPLIT_KEYS = 16 if _mode.INTERPRET else split.MIN_SPLIT_KEYS
SPLIT_ALIGN_KEYS = 16 if _mode.INTERPRET else split.SPLIT_ALIGN_KEYS

# RoPE placements (the candidate's `rope`): where q and k are rotated.
#   "unfused": the standalone RoPE kernel writes rotated q (and k when rotate_k), then attention;
#   "fused":   attention rotates q, and k when rotate_k, as tiles load (one launch; k is
#              re-rotated by every query block that visits it);
#   "q_fused": k is rotated once by the standalone kernel (as a KV-cache write does), q inside
#              attention. With rotate_k=False (decode over a rotated cache) it is "fused".
ROPE_MODES = ("unfused", "fused", "q_fused")


@dataclass(frozen=True)
class Variant:
    """Switches of the generation-2 kernels; each measured in BENCHMARKS.md.

    tma: K/V tiles through TMA tensor descriptors (needs unit last stride, 16-byte aligned
        base and strides; otherwise the plan falls back to pointer loads and says so)
    warp_specialize: ask Triton for producer/consumer warp specialisation of the key loops
    pack_gqa: one program serves every query head of a KV group (K/V tile loaded once per group)
    (those three switch the prefill kernel, _prefill.py)
    decode_reduce_in_kernel: split-KV decode merges its splits in the last split program of
        each row block (one launch) instead of a second, reduction launch (_attention.py)
    """

    tma: bool = False
    warp_specialize: bool = False
    pack_gqa: bool = False
    decode_reduce_in_kernel: bool = True

    @property
    def name(self) -> str:
        switches = (("tma", self.tma), ("ws", self.warp_specialize), ("pack", self.pack_gqa))
        parts = [n for n, on in switches if on] + ([] if self.decode_reduce_in_kernel else ["2launch"])
        return "+".join(parts) or "ptr"


#: the variant generation-2 candidates use unless a caller names another, chosen from the H200
#: run in BENCHMARKS.md: TMA loads were fastest or within 2% for the best q_fused candidate on
#: 3 of the 4 prefill shapes; the in-kernel decode merge saves one launch of host time (15 vs
#: 22 us) but its serial merge made graph-replayed decode slower (B1 Skv8192: 18.8 vs 11.4 us)
DEFAULT_VARIANT = Variant(tma=True, decode_reduce_in_kernel=False)


def decode_split_plan(programs: int, kv_len: int, sm_count: int) -> tuple[int, int]:
    """(num_splits, split_len) for a decode launch of `programs` (B * Hkv * row blocks): split.py's
    plan with this mode's split sizes."""
    return split.decode_split_plan(
        programs,
        kv_len,
        sm_count,
        min_split_keys=MIN_SPLIT_KEYS,
        align_keys=SPLIT_ALIGN_KEYS,
        waves=DECODE_WAVES,
    )


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
        raise ValueError(
            f"q and k need at least one batch and head, got q {tuple(q.shape)}, k {tuple(k.shape)}"
        )
    if heads_q % heads_kv:
        raise ValueError(f"q heads ({heads_q}) must be a multiple of k heads ({heads_kv})")
    if q_len < 1:
        raise ValueError(f"q must hold at least one query (Sq >= 1), got Sq={q_len}")
    if kv_len < q_len:
        raise ValueError(f"k holds {kv_len} keys but q has {q_len} queries; causal attention needs Skv >= Sq")
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
         see the comment there), run through a cached kernels.plan (variant: its prefill
         switches, DEFAULT_VARIANT when None)
    out: optional (B, Hq, Sq, D) output buffer (any strides); a new contiguous one otherwise
    dtypes: float16/bfloat16 on CUDA, float16/float32 under TRITON_INTERPRET=1; q, k, v alike.
    Sq == 1 takes the decode path (packed query heads, split-KV), Sq > 1 the prefill path.
    Returns out, of q's dtype.
    """
    from .plans import cached_plan, rope_mode

    mode, generation = rope_mode(rope, fused)
    if generation == 2:
        _check_inputs(q, k, v, tile, out)
        _mode.check_mode()
        planned = cached_plan(
            q, k, v, cos, sin, out, tile=tile, rope=mode, rotate_k=rotate_k, variant=variant
        )
        return planned.run(q, k, v, cos, sin, out)
    if variant is not None:
        raise ValueError("variant= applies to generation-2 kernels (rope=), not fused=")
    _check_inputs(q, k, v, tile, out)
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
    tensors = {"q": q, "k": k, "v": v, "cos": cos, "sin": sin, "out": out}
    specs, scratch = attention_specs(
        tensors,
        tile,
        rotate_q=rotate_q,
        rotate_k=rotate_k,
        path=path,
        cos=None if cos is None else "cos",
        sin=None if cos is None else "sin",
    )
    tensors.update(scratch)
    for spec in specs:
        spec.launch(tensors)
    return out


def attention_specs(
    tensors: dict,
    tile: Tile,
    *,
    rotate_q: bool,
    rotate_k: bool,
    path: str | None = None,
    variant: Variant | None = None,
    q: str = "q",
    k: str = "k",
    v: str = "v",
    out: str = "out",
    cos: str | None = "cos",
    sin: str | None = "sin",
) -> tuple[list[LaunchSpec], dict]:
    """The attention launches for the example tensors, as data.

    tensors: name -> tensor; q, k, v, out, cos, sin name the slots the launches read (cos None:
    nothing rotates, the tables are never read). variant None: generation 1's launches; a
    Variant: generation 2's (the _prefill.py kernel; decode merges its splits in-kernel when
    variant.decode_reduce_in_kernel). Decode (path 'decode', or Sq == 1) runs the split-KV
    kernel of _attention.py in both generations. Returns (specs, scratch): scratch maps the names
    of new buffers the specs read (decode partials) to the buffers.
    """
    qt, kt, vt, ot = tensors[q], tensors[k], tensors[v], tensors[out]
    batch, heads_q, q_len, head_dim = qt.shape
    heads_kv, kv_len = kt.shape[1], kt.shape[2]
    group = heads_q // heads_kv
    qk_scale = LOG2E / math.sqrt(head_dim)
    if cos is None:
        cos = sin = q
        stride_tab = 0
    else:
        stride_tab = tensors[cos].stride(0)
    common = dict(
        q_ptr=Slot(q),
        k_ptr=Slot(k),
        v_ptr=Slot(v),
        out_ptr=Slot(out),
        cos_ptr=Slot(cos),
        sin_ptr=Slot(sin),
        **named_strides("q", qt),
        **named_strides("k", kt),
        **named_strides("v", vt),
        **named_strides("o", ot),
        stride_tab=stride_tab,
    )
    options = dict(num_warps=tile.num_warps, num_stages=tile.num_stages)
    if path is None:
        path = "decode" if q_len == 1 else "prefill"
    if path == "prefill" and variant is None:
        grid = (batch * heads_q, triton.cdiv(q_len, tile.block_m), 1)
        args = dict(
            common,
            Hq=heads_q,
            group=group,
            Sq=q_len,
            Skv=kv_len,
            qk_scale=qk_scale,
            HEAD_DIM=head_dim,
            BLOCK_M=tile.block_m,
            BLOCK_N=tile.block_n,
            ROTATE_Q=rotate_q,
            ROTATE_K=rotate_k,
        )
        return [LaunchSpec(prefill_kernel, grid, args, options)], {}
    if path == "prefill":
        group_rows = triton.next_power_of_2(group) if variant.pack_gqa and group > 1 else 1
        if group_rows > tile.block_m:
            group_rows = 1  # the tile cannot hold one position of every head: no packing
        tma = variant.tma and not rotate_k and _tma_ok(kt) and _tma_ok(vt)
        block = (1, 1, tile.block_n, head_dim)
        positions = tile.block_m // group_rows
        grid = (batch * (heads_kv if group_rows > 1 else heads_q), triton.cdiv(q_len, positions), 1)
        args = dict(
            common,
            k_desc=Descriptor(k, block) if tma else None,
            v_desc=Descriptor(v, block) if tma else None,
            Hq=heads_q,
            Hkv=heads_kv,
            group=group,
            Sq=q_len,
            Skv=kv_len,
            qk_scale=qk_scale,
            HEAD_DIM=head_dim,
            BLOCK_M=tile.block_m,
            BLOCK_N=tile.block_n,
            GROUP_ROWS=group_rows,
            ROTATE_Q=rotate_q,
            ROTATE_K=rotate_k,
            TMA=tma,
            WARP_SPECIALIZE=variant.warp_specialize,
        )
        return [LaunchSpec(prefill2_kernel, grid, args, options)], {}
    rows = group * q_len
    block_m = decode_block_m(tile, rows)
    row_blocks = triton.cdiv(rows, block_m)
    num_splits, split_len = decode_split_plan(
        batch * heads_kv * row_blocks, kv_len, _mode.sm_count(qt.device)
    )
    reduce_in_kernel = num_splits > 1 and variant is not None and variant.decode_reduce_in_kernel
    scratch = {}
    if reduce_in_kernel:
        scratch["counters"] = torch.zeros(
            (batch * heads_kv * row_blocks,), dtype=torch.int32, device=qt.device
        )
    if num_splits > 1:
        partial_rows = batch * heads_kv * num_splits * rows
        scratch |= {
            "part_o": torch.empty((partial_rows, head_dim), dtype=torch.float32, device=qt.device),
            "part_lse": torch.empty((partial_rows,), dtype=torch.float32, device=qt.device),
        }
        part_o, part_lse = Slot("part_o"), Slot("part_lse")
    else:
        part_o = part_lse = Slot(out)  # not read or written when SPLIT is False
    args = dict(
        common,
        part_o_ptr=part_o,
        part_lse_ptr=part_lse,
        counter_ptr=Slot("counters") if reduce_in_kernel else None,
        Hkv=heads_kv,
        group=group,
        Sq=q_len,
        Skv=kv_len,
        split_len=split_len,
        qk_scale=qk_scale,
        HEAD_DIM=head_dim,
        BLOCK_M=block_m,
        BLOCK_N=tile.block_n,
        ROTATE_Q=rotate_q,
        ROTATE_K=rotate_k,
        SPLIT=num_splits > 1,
        REDUCE_IN_KERNEL=reduce_in_kernel,
    )
    specs = [LaunchSpec(decode_kernel, (row_blocks, batch * heads_kv, num_splits), args, options)]
    if num_splits > 1 and not reduce_in_kernel:
        args = dict(
            part_o_ptr=part_o,
            part_lse_ptr=part_lse,
            out_ptr=Slot(out),
            **named_strides("o", ot),
            Hkv=heads_kv,
            group=group,
            Sq=q_len,
            num_splits=num_splits,
            HEAD_DIM=head_dim,
            BLOCK_S=max(2, triton.next_power_of_2(num_splits)),
        )
        specs.append(LaunchSpec(reduce_kernel, (batch * heads_kv * rows, 1, 1), args, {}))
    return specs, scratch


def _tma_ok(t: torch.Tensor) -> bool:
    """A TMA descriptor needs a unit last stride and 16-byte aligned base and strides."""
    size = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(s * size % 16 == 0 for s in t.stride()[:-1])
