"""Generation-1 launchers of causal GQA attention, as the first studies recorded them: the eager
call (fused=True/False) and its launches as data (attention_specs, which plans.py replays).

Kernels: _attention.py (prefill, split-KV decode, reduction), _rope.py (RoPE): frozen copies.
The host helpers shared with generation 2 (kernels/launch.py, mode.py, split.py, tile.py) choose
no kernel code; tools/bit_identity.py checks that generation 1 still launches the recorded
kernels, tiles and grids.
"""

from __future__ import annotations

import torch
import triton

from .. import mode, split
from ..launch import Launches, LaunchSpec, Slot, attention_scale, named_strides
from ._attention import decode_kernel, prefill_kernel, reduce_kernel
from .rope import rope


def run(q, k, v, cos, sin, out, tile, *, fused: bool, rotate_k: bool, path=None) -> torch.Tensor:
    """attention(..., fused=...) after its checks: the standalone RoPE kernel into new buffers
    first (fused False), then prefill or split-KV decode; returns out. path: None picks decode
    for Sq == 1, prefill otherwise; tests force 'prefill' or 'decode' to cover both kernels on
    any 1 <= Sq <= Skv."""
    if fused:
        return launch(q, k, v, cos, sin, out, tile, rotate_q=True, rotate_k=rotate_k, path=path)
    q = rope(q, cos, sin, k.shape[2] - q.shape[2])  # (B, Hq, Sq, D), rotated at Skv - Sq + i
    if rotate_k:
        k = rope(k, cos, sin, 0)  # (B, Hkv, Skv, D)
    return launch(q, k, v, None, None, out, tile, rotate_q=False, rotate_k=False, path=path)


def launch(q, k, v, cos, sin, out, tile, *, rotate_q, rotate_k, path=None):
    """Launch the prefill or decode kernels (see run for path); cos None: nothing rotates."""
    tensors = {"q": q, "k": k, "v": v, "cos": cos, "sin": sin, "out": out}
    launches = attention_specs(
        tensors,
        tile,
        rotate_q=rotate_q,
        rotate_k=rotate_k,
        path=path,
        cos=None if cos is None else "cos",
        sin=None if cos is None else "sin",
    )
    tensors.update(launches.scratch)
    for spec in launches.specs:
        spec.launch(tensors)
    return out


def attention_specs(
    tensors: dict,
    tile,
    *,
    rotate_q: bool,
    rotate_k: bool,
    path: str | None = None,
    q: str = "q",
    k: str = "k",
    v: str = "v",
    out: str = "out",
    cos: str | None = "cos",
    sin: str | None = "sin",
) -> Launches:
    """Generation 1's attention launches for the example tensors, as data.

    tensors: name -> tensor; q (B, Hq, Sq, D), k, v (B, Hkv, Skv, D), out (B, Hq, Sq, D), cos, sin
    (max_pos, D // 2) name the slots the launches read (cos None: nothing rotates, the tables are
    never read). path: 'prefill' | 'decode' | None (decode for Sq == 1)."""
    if path is None:
        path = "decode" if tensors[q].shape[2] == 1 else "prefill"
    common = _common_args(tensors, q, k, v, out, cos, sin)
    options = dict(num_warps=tile.num_warps, num_stages=tile.num_stages)
    if path == "prefill":
        return _prefill_specs(tensors, tile, common, options, rotate_q, rotate_k, q, k)
    return _decode_specs(tensors, tile, common, options, rotate_q, rotate_k, q, k, out)


def _common_args(tensors, q, k, v, out, cos, sin) -> dict:
    if cos is None:
        cos = sin = q
        stride_tab = 0
    else:
        stride_tab = tensors[cos].stride(0)
    return dict(
        q_ptr=Slot(q),
        k_ptr=Slot(k),
        v_ptr=Slot(v),
        out_ptr=Slot(out),
        cos_ptr=Slot(cos),
        sin_ptr=Slot(sin),
        **named_strides("q", tensors[q]),
        **named_strides("k", tensors[k]),
        **named_strides("v", tensors[v]),
        **named_strides("o", tensors[out]),
        stride_tab=stride_tab,
    )


def _prefill_specs(tensors, tile, common, options, rotate_q, rotate_k, q, k) -> Launches:
    batch, heads_q, q_len, head_dim = tensors[q].shape
    heads_kv, kv_len = tensors[k].shape[1], tensors[k].shape[2]
    grid = (batch * heads_q, triton.cdiv(q_len, tile.block_m), 1)
    args = dict(
        common,
        Hq=heads_q,
        group=heads_q // heads_kv,
        Sq=q_len,
        Skv=kv_len,
        qk_scale=attention_scale(head_dim),
        HEAD_DIM=head_dim,
        BLOCK_M=tile.block_m,
        BLOCK_N=tile.block_n,
        ROTATE_Q=rotate_q,
        ROTATE_K=rotate_k,
    )
    return Launches((LaunchSpec(prefill_kernel, grid, args, options),), {})


def _decode_specs(tensors, tile, common, options, rotate_q, rotate_k, q, k, out) -> Launches:
    qt, ot = tensors[q], tensors[out]
    batch, heads_q, q_len, head_dim = qt.shape
    heads_kv, kv_len = tensors[k].shape[1], tensors[k].shape[2]
    group = heads_q // heads_kv
    rows = group * q_len
    block_m = split.decode_block_m(tile.block_m, rows)
    row_blocks = triton.cdiv(rows, block_m)
    num_splits, split_len = mode.decode_split_plan(
        batch * heads_kv * row_blocks, kv_len, mode.sm_count(qt.device)
    )
    scratch = {}
    if num_splits > 1:
        partial_rows = batch * heads_kv * num_splits * rows
        scratch = {
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
        counter_ptr=None,
        Hkv=heads_kv,
        group=group,
        Sq=q_len,
        Skv=kv_len,
        split_len=split_len,
        qk_scale=attention_scale(head_dim),
        HEAD_DIM=head_dim,
        BLOCK_M=block_m,
        BLOCK_N=tile.block_n,
        ROTATE_Q=rotate_q,
        ROTATE_K=rotate_k,
        SPLIT=num_splits > 1,
        REDUCE_IN_KERNEL=False,
    )
    specs = [LaunchSpec(decode_kernel, (row_blocks, batch * heads_kv, num_splits), args, options)]
    if num_splits > 1:
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
    return Launches(tuple(specs), scratch, num_splits=num_splits)
