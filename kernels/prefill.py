"""Launcher of the generation-2 prefill kernel (kernels/jit/prefill.py): its launch as data."""

from __future__ import annotations

import torch
import triton

from .jit.prefill import prefill2_kernel
from .launch import SLOTS, Descriptor, Launches, LaunchSpec, attention_args
from .schedule import Variant
from .tile import Tile


def prefill_launches(
    tensors: dict, tile: Tile, variant: Variant, *, rotate_q: bool, rotate_k: bool, slots: dict = SLOTS
) -> Launches:
    """One prefill launch for the example tensors; slots names the tensors the launch reads (see
    launch.SLOTS): q (B, Hq, Sq, D), k, v (B, Hkv, Skv, D), out (B, Hq, Sq, D), cos, sin
    (max_pos, D // 2) (cos None: nothing rotates).

    variant's switches take effect where they can: TMA needs un-rotated k (pointer loads when the
    kernel rotates K) and TMA-able k and v layouts; GQA packing a group > 1 that fits block_m.
    Launches.tma / packed_gqa say what took effect."""
    qt, kt = tensors[slots["q"]], tensors[slots["k"]]
    batch, heads_q, q_len, head_dim = qt.shape
    heads_kv = kt.shape[1]
    group = heads_q // heads_kv
    group_rows = triton.next_power_of_2(group) if variant.pack_gqa and group > 1 else 1
    if group_rows > tile.block_m:
        group_rows = 1  # the tile cannot hold one position of every head: no packing
    tma = variant.tma and not rotate_k and tma_ok(kt) and tma_ok(tensors[slots["v"]])
    block = (1, 1, tile.block_n, head_dim)  # one K/V tile of one (batch, KV head)
    positions = tile.block_m // group_rows  # query positions per program
    grid = (batch * (heads_kv if group_rows > 1 else heads_q), triton.cdiv(q_len, positions), 1)
    args = dict(
        attention_args(tensors, **slots),
        k_desc=Descriptor(slots["k"], block) if tma else None,
        v_desc=Descriptor(slots["v"], block) if tma else None,
        Hq=heads_q,
        BLOCK_M=tile.block_m,
        BLOCK_N=tile.block_n,
        GROUP_ROWS=group_rows,
        ROTATE_Q=rotate_q,
        ROTATE_K=rotate_k,
        TMA=tma,
        WARP_SPECIALIZE=variant.warp_specialize,
    )
    options = dict(num_warps=tile.num_warps, num_stages=tile.num_stages)
    spec = LaunchSpec(prefill2_kernel, grid, args, options)
    return Launches((spec,), {}, tma=tma, packed_gqa=group_rows > 1)


def tma_ok(t: torch.Tensor) -> bool:
    """A TMA descriptor needs a unit last stride and 16-byte aligned base and strides."""
    size = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(s * size % 16 == 0 for s in t.stride()[:-1])
