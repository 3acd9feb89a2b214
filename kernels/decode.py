"""Launcher of the generation-2 split-KV decode (kernels/jit/decode.py): the decode launch and,
when its splits are merged outside it, the reduction launch, as data."""

from __future__ import annotations

import torch
import triton

from . import mode, schedule, split
from .jit.decode import decode_kernel, reduce_kernel
from .launch import SLOTS, Launches, LaunchSpec, Slot, attention_args, named_strides
from .schedule import Variant
from .tile import Tile


def decode_block_m(tile: Tile, rows: int) -> int:
    """Decode packs group * Sq rows along M; a tile's block_m is capped at that count rounded up
    to a power of two (at least 16, the smallest tl.dot M) so no program computes empty rows."""
    return split.decode_block_m(tile.block_m, rows)


def decode_launches(
    tensors: dict, tile: Tile, variant: Variant, *, rotate_q: bool, rotate_k: bool, slots: dict = SLOTS
) -> Launches:
    """The decode launches for the example tensors, slots as in prefill_launches: the
    group * Sq query rows of each KV head packed along M, keys split by mode.decode_split_plan;
    the splits merged in the kernel (schedule.reduce_in_kernel) or by a reduction launch.
    Launches.scratch holds the partials (and arrival counters) the launches share."""
    qt, ot = tensors[slots["q"]], tensors[slots["out"]]
    batch, heads_q, q_len, head_dim = qt.shape
    heads_kv, kv_len = tensors[slots["k"]].shape[1], tensors[slots["k"]].shape[2]
    group = heads_q // heads_kv
    rows = group * q_len  # packed query rows per KV head
    block_m = decode_block_m(tile, rows)
    row_blocks = triton.cdiv(rows, block_m)
    num_splits, split_len = mode.decode_split_plan(
        batch * heads_kv * row_blocks, kv_len, mode.sm_count(qt.device)
    )
    in_kernel = schedule.reduce_in_kernel(num_splits, variant)
    scratch = _scratch(batch * heads_kv, row_blocks, num_splits, rows, head_dim, in_kernel, qt.device)
    part_o, part_lse = (Slot("part_o"), Slot("part_lse")) if num_splits > 1 else (Slot(slots["out"]),) * 2
    args = dict(
        attention_args(tensors, **slots),
        part_o_ptr=part_o,  # Slot(out) when SPLIT is False: never read or written
        part_lse_ptr=part_lse,
        counter_ptr=Slot("counters") if in_kernel else None,
        split_len=split_len,
        BLOCK_M=block_m,
        BLOCK_N=tile.block_n,
        ROTATE_Q=rotate_q,
        ROTATE_K=rotate_k,
        SPLIT=num_splits > 1,
        REDUCE_IN_KERNEL=in_kernel,
    )
    options = dict(num_warps=tile.num_warps, num_stages=tile.num_stages)
    specs = [LaunchSpec(decode_kernel, (row_blocks, batch * heads_kv, num_splits), args, options)]
    if schedule.separate_reduce(num_splits, in_kernel):
        args = dict(
            part_o_ptr=part_o,
            part_lse_ptr=part_lse,
            out_ptr=Slot(slots["out"]),
            **named_strides("o", ot),
            Hkv=heads_kv,
            group=group,
            Sq=q_len,
            num_splits=num_splits,
            HEAD_DIM=head_dim,
            BLOCK_S=max(2, triton.next_power_of_2(num_splits)),
        )
        specs.append(LaunchSpec(reduce_kernel, (batch * heads_kv * rows, 1, 1), args, {}))
    return Launches(tuple(specs), scratch, num_splits=num_splits, reduce_in_kernel=in_kernel)


def _scratch(heads: int, row_blocks: int, num_splits: int, rows: int, head_dim: int, in_kernel: bool, device):
    """The buffers split decode shares between its programs: partial outputs (heads * splits *
    rows, D) and base-2 log-sum-exps (heads * splits * rows,), float32; with the in-kernel merge,
    one int32 arrival counter per (batch, KV head, row block), zero between launches."""
    scratch = {}
    if in_kernel:
        scratch["counters"] = torch.zeros((heads * row_blocks,), dtype=torch.int32, device=device)
    if num_splits > 1:
        partial_rows = heads * num_splits * rows
        scratch["part_o"] = torch.empty((partial_rows, head_dim), dtype=torch.float32, device=device)
        scratch["part_lse"] = torch.empty((partial_rows,), dtype=torch.float32, device=device)
    return scratch
