"""Host side of the variable-length decode (generation 3): checks, the launches as data, and a
plan/run pair shaped like kernels.plan.

    p = plan_decode_varlen(q, k, v, cos, sin, kv_lens, tile=tile)   # checks, compiles, scratch
    out = p.run(q, k, v, cos, sin, kv_lens, out=out)                 # layouts checked, launches

Layout: q (B, Hq, 1, D), un-rotated, one new token per sequence; k, v (B, Hkv, capacity, D), a
padded cache of ROTATED keys (rotated when written, as a serving engine's cache is); kv_lens
(B,) int32 on q's device, 1 <= kv_lens[b] <= capacity: sequence b's valid keys are
[0, kv_lens[b]) and its query sits at position kv_lens[b] - 1 (RoPE there, every key visible).
Keys at or past kv_lens[b] are never read, so the padding may hold anything.

Split-KV with a merge (two launches), not one program per (sequence, head group): a 126k-token
sequence beside 63 short ones would otherwise leave the GPU waiting on one program. The split
plan is generation 2's (kernels.decode_split_plan) over the capacity, so it depends on the
shape and SM count only and kv_lens can change between runs without a new plan (the grid
never depends on the lengths); programs past a sequence's length load and store nothing. One
split (short caches): the decode kernel writes the output itself, one launch.

kv_lens values are checked on the host when the plan is made (one device-to-host copy);
Plan.run checks the kv_lens tensor's layout only, as FlashInfer's run does.
"""

from __future__ import annotations

import math

import torch
import triton

from . import mode as _mode
from .decode import decode_block_m
from .jit.decode_varlen import varlen_decode_kernel, varlen_merge_kernel
from .launch import CompiledLaunch, LaunchSpec, Slot
from .launch import mismatch as _mismatch
from .launch import signature as _signature
from .mode import check_tables, decode_split_plan
from .tile import Tile

#: the generation of this family: recorded with its candidates (generation 2 stays bit-identical)
GENERATION = 3
LOG2E = 1.4426950408889634
_INPUTS = ("q", "k", "v", "cos", "sin", "kv_lens")


def check_inputs(q, k, v, kv_lens, tile, out) -> None:
    """ValueError naming what is wrong with a varlen decode's arguments (see the module docstring)."""
    for name, t in (("q", q), ("k", k), ("v", v), ("kv_lens", kv_lens)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if q.dim() != 4 or k.dim() != 4 or k.shape != v.shape:
        raise ValueError(f"q and k, v must be 4-D with k.shape == v.shape, got {tuple(q.shape)}, "
                         f"{tuple(k.shape)}, {tuple(v.shape)}")  # fmt: skip
    batch, heads_q, q_len, head_dim = q.shape
    if q_len != 1:
        raise ValueError(f"the varlen decode takes one query per sequence (Sq == 1), got Sq={q_len}")
    _mode.check_dtype("q", q)
    _mode.check_device("q", q)
    _mode.check_head_dim("q", head_dim)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype or t.device != q.device:
            raise ValueError(f"{name} is {t.dtype} on {t.device}; q is {q.dtype} on {q.device}")
    if k.shape[0] != batch or k.shape[3] != head_dim or k.shape[1] < 1 or heads_q % k.shape[1]:
        raise ValueError(
            f"k {tuple(k.shape)} does not fit q {tuple(q.shape)}: same B and D, Hq a multiple of Hkv"
        )
    if kv_lens.shape != (batch,) or kv_lens.dtype != torch.int32 or kv_lens.device != q.device:
        raise ValueError(
            f"kv_lens must be ({batch},) int32 on {q.device}, got {tuple(kv_lens.shape)} "
            f"{kv_lens.dtype} on {kv_lens.device}"
        )
    if not isinstance(tile, Tile):
        raise ValueError(f"tile must be a kernels.Tile, got {type(tile).__name__}")
    if out is not None:
        _mode.check_out(out, q.shape, q.dtype, q.device)


def check_lengths(kv_lens: torch.Tensor, capacity: int) -> None:
    """ValueError unless 1 <= kv_lens[b] <= capacity for every b (reads kv_lens on the host)."""
    lens = kv_lens.cpu()
    bad = torch.nonzero((lens < 1) | (lens > capacity)).flatten().tolist()
    if bad:
        raise ValueError(
            f"kv_lens[{bad[0]}] = {int(lens[bad[0]])} is outside 1..{capacity} (the cache's capacity)"
        )


def varlen_specs(tensors: dict, tile: Tile) -> tuple[list[LaunchSpec], dict]:
    """The launches for example tensors named q, k, v, cos, sin, kv_lens, out, as data: the decode
    kernel, then the merge when there is more than one split. Returns (specs, scratch buffers)."""
    q, k, out = tensors["q"], tensors["k"], tensors["out"]
    batch, heads_q, _, head_dim = q.shape
    heads_kv, capacity = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    block_m = decode_block_m(tile, group)
    row_blocks = triton.cdiv(group, block_m)
    num_splits, split_len = decode_split_plan(
        batch * heads_kv * row_blocks, capacity, _mode.sm_count(q.device)
    )
    split = num_splits > 1
    scratch = {}
    if split:
        rows = batch * heads_kv * num_splits * group
        scratch = {
            "part_o": torch.empty((rows, head_dim), dtype=torch.float32, device=q.device),
            "part_lse": torch.empty((rows,), dtype=torch.float32, device=q.device),
        }
    part_o, part_lse = (Slot("part_o"), Slot("part_lse")) if split else (Slot("out"), Slot("out"))
    o_strides = dict(stride_ob=out.stride(0), stride_oh=out.stride(1), stride_od=out.stride(3))
    args = dict(
        q_ptr=Slot("q"), k_ptr=Slot("k"), v_ptr=Slot("v"), out_ptr=Slot("out"),
        part_o_ptr=part_o, part_lse_ptr=part_lse, cos_ptr=Slot("cos"), sin_ptr=Slot("sin"),
        kv_lens_ptr=Slot("kv_lens"),
        q_strides=(q.stride(0), q.stride(1), q.stride(3)), k_strides=tensors["k"].stride(),
        v_strides=tensors["v"].stride(), o_strides=(out.stride(0), out.stride(1), out.stride(3)),
        stride_tab=tensors["cos"].stride(0),
        Hkv=heads_kv, group=group, split_len=split_len, qk_scale=LOG2E / math.sqrt(head_dim),
        HEAD_DIM=head_dim, BLOCK_M=block_m, BLOCK_N=tile.block_n, ROTATE_Q=True, SPLIT=split,
    )  # fmt: skip
    options = dict(num_warps=tile.num_warps, num_stages=tile.num_stages)
    specs = [LaunchSpec(varlen_decode_kernel, (row_blocks, batch * heads_kv, num_splits), args, options)]
    if split:
        merge = dict(
            part_o_ptr=part_o, part_lse_ptr=part_lse, out_ptr=Slot("out"), kv_lens_ptr=Slot("kv_lens"),
            **o_strides, Hkv=heads_kv, group=group, num_splits=num_splits, split_len=split_len,
            HEAD_DIM=head_dim, BLOCK_S=max(2, triton.next_power_of_2(num_splits)),
        )  # fmt: skip
        specs.append(LaunchSpec(varlen_merge_kernel, (batch * heads_kv * group, 1, 1), merge, {}))
    return specs, scratch


class VarlenPlan:
    """The launches of one varlen decode candidate for tensors laid out like the plan's examples.

    Attributes: tile, generation (3), phase ('decode'), num_splits, launches (1 or 2), direct
    (compiled launchers called directly; False under the interpreter). Owns scratch buffers
    (split partials): do not run one plan on two streams at once."""

    generation = GENERATION
    phase = "decode"

    def __init__(self, tile: Tile, examples: dict):
        self.tile = tile
        specs, self._scratch = varlen_specs(examples, tile)
        self.num_splits = specs[0].grid[2]
        self._expected = tuple(_signature(examples[n]) for n in _INPUTS)
        self._out_layout = _signature(examples["out"])
        device = examples["q"].device
        self._launches = tuple(CompiledLaunch(s, {**examples, **self._scratch}, device) for s in specs)
        self.launches = len(self._launches)
        self.direct = all(launch.direct for launch in self._launches)

    def run(self, q, k, v, cos, sin, kv_lens, out=None) -> torch.Tensor:
        """Launch on these tensors (ValueError naming one whose layout differs from the plan's);
        kv_lens values are the caller's to keep in 1..capacity. Returns out (new when None)."""
        given = (q, k, v, cos, sin, kv_lens)
        for name, t, want in zip(_INPUTS, given, self._expected, strict=True):
            if (
                type(t) is not torch.Tensor
                or _signature(t)[:4] != want[:4]
                or (want[4] and t.data_ptr() % 16)
            ):
                raise ValueError(_mismatch(name, t, want))
        shape, stride, dtype, device, aligned = self._out_layout
        if out is None:
            out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
        elif (
            type(out) is not torch.Tensor
            or _signature(out)[:4] != self._out_layout[:4]
            or (aligned and out.data_ptr() % 16)
        ):
            raise ValueError(_mismatch("out", out, self._out_layout))
        tensors = dict(zip(_INPUTS, given, strict=True), out=out, **self._scratch)
        for launch in self._launches:
            launch(tensors)
        return out

    def __repr__(self) -> str:
        return f"VarlenPlan(decode, tile={self.tile.name}, launches={self.launches}, num_splits={self.num_splits})"


def plan_decode_varlen(q, k, v, cos, sin, kv_lens, *, tile: Tile, out=None) -> VarlenPlan:
    """Check and prepare a varlen decode for tensors like these (nothing launched on them); see
    the module docstring for the layout. Raises ValueError for invalid inputs."""
    check_inputs(q, k, v, kv_lens, tile, out)
    check_tables(cos, sin, q.shape[3], k.shape[2], q.device)
    check_lengths(kv_lens, k.shape[2])
    _mode.check_mode()
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    return VarlenPlan(tile, {"q": q, "k": k, "v": v, "cos": cos, "sin": sin, "kv_lens": kv_lens, "out": out})


def decode_varlen(q, k, v, cos, sin, kv_lens, *, tile: Tile, out=None) -> torch.Tensor:
    """The varlen decode in one call (a new plan each call: for tests and one-off use; runners
    keep the plan). Returns out, (B, Hq, 1, D) of q's dtype."""
    return plan_decode_varlen(q, k, v, cos, sin, kv_lens, tile=tile, out=out).run(
        q, k, v, cos, sin, kv_lens, out
    )
