"""Plan/run: check and prepare once, launch many times (the shape of FlashInfer's wrappers).

    p = kernels.plan(q, k, v, cos, sin, tile=tile, rope="q_fused", rotate_k=True)  # once per batch
    for layer in layers:
        out = p.run(q, k, v, cos, sin, out=out)                                    # once per layer

plan() takes everything fixed for a batch from example tensors -- shapes, strides, dtype, device,
16-byte alignment, tile, RoPE placement, rotate_k -- checks it once, and holds the grid, the
split plan, scratch buffers and the launch arguments; on a GPU it also compiles each kernel for
them and keeps the compiled launchers. Plan.run only checks that the call's tensors are
specialised like the examples (ValueError otherwise: a kernel compiled for aligned pointers is
silently wrong on a misaligned one) and launches. The module is not named plan.py so that it
cannot shadow the function kernels.plan.
"""

from __future__ import annotations

import dataclasses

import torch

from . import _mode
from ._launch import CompiledLaunch
from .attention import (
    DEFAULT_VARIANT,
    ROPE_MODES,
    Variant,
    _check_inputs,
    attention_specs,
)
from .rope import check_tables, rope_spec
from .tile import Tile

_INPUTS = ("q", "k", "v", "cos", "sin")


def rope_mode(rope: str | None, fused: bool | None) -> tuple[str, int]:
    """(rope placement, kernel generation) from the two ways of naming a candidate's RoPE:
    fused=True/False (generation 1: the recorded kernels) or rope='unfused'|'fused'|'q_fused'
    (generation 2). Exactly one must be given."""
    if (rope is None) == (fused is None):
        raise ValueError(
            "give exactly one of fused= (bool: generation-1 kernels) or rope= "
            f"(one of {ROPE_MODES}: generation-2 kernels); got fused={fused!r}, rope={rope!r}"
        )
    if fused is not None:
        if type(fused) is not bool:
            raise ValueError(f"fused must be a bool, got {fused!r}")
        return ("fused" if fused else "unfused"), 1
    if rope not in ROPE_MODES:
        raise ValueError(f"rope must be one of {ROPE_MODES}, got {rope!r}")
    return rope, 2


def _signature(t: torch.Tensor) -> tuple:
    """What a compiled launch is specialised on: shape, strides, dtype, device, alignment."""
    return (tuple(t.shape), t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0)


class Plan:
    """Launches of one candidate for tensors specialised like the plan's examples (see plan()).

    Attributes: tile, rope ('unfused'|'fused'|'q_fused'), rotate_k, generation (1 or 2),
    variant (generation-2 switches that took effect, or None), phase ('prefill'|'decode'),
    num_splits (decode split-KV splits, 1 for prefill), launches (kernel launches per run),
    direct (True when run calls compiled launchers directly; False under the interpreter).

    A plan owns scratch buffers (rotated q/k, decode partials): runs on one CUDA stream are
    ordered, but do not run one plan on two streams at once.
    """

    def __init__(
        self,
        *,
        tile,
        rope,
        rotate_k,
        generation,
        variant,
        phase,
        num_splits,
        specs,
        scratch,
        examples,
        out_layout,
    ):
        self.tile = tile
        self.rope = rope
        self.rotate_k = rotate_k
        self.generation = generation
        self.variant = variant
        self.phase = phase
        self.num_splits = num_splits
        self._scratch = scratch
        self._expected = tuple(_signature(examples[name]) for name in _INPUTS)
        self._out_layout = out_layout  # (shape, stride, dtype, device, aligned)
        device = examples["q"].device
        self._launches = tuple(CompiledLaunch(spec, {**examples, **scratch}, device) for spec in specs)
        self.launches = len(self._launches)

    @property
    def direct(self) -> bool:
        """True when every launch goes straight to a compiled launcher (False: Triton's JIT path,
        under the interpreter or where this Triton's internals differ; see fallback_reasons)."""
        return all(launch.direct for launch in self._launches)

    @property
    def fallback_reasons(self) -> list[str]:
        return [
            launch.fallback_reason for launch in self._launches if getattr(launch, "fallback_reason", None)
        ]

    def run(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        out: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Launch the plan on these tensors; returns out (a new buffer when None).

        Every tensor must have the example's shape, strides, dtype and device, and be 16-byte
        aligned where the example was (ValueError naming the argument otherwise; make a new
        plan for other tensors). out may be any buffer with the plan's out layout."""
        expected = self._expected
        for i, t in enumerate((q, k, v, cos, sin)):
            if (
                type(t) is not torch.Tensor
                or t.shape != expected[i][0]
                or t.stride() != expected[i][1]
                or t.dtype != expected[i][2]
                or t.device != expected[i][3]
                or (expected[i][4] and t.data_ptr() % 16)
            ):
                raise ValueError(_mismatch(_INPUTS[i], t, expected[i]))
        shape, stride, dtype, device, aligned = self._out_layout
        if out is None:
            out = torch.empty_strided(shape, stride, dtype=dtype, device=device)
        elif (
            type(out) is not torch.Tensor
            or out.shape != shape
            or out.stride() != stride
            or out.dtype != dtype
            or out.device != device
            or (aligned and out.data_ptr() % 16)
        ):
            raise ValueError(_mismatch("out", out, self._out_layout))
        tensors = {"q": q, "k": k, "v": v, "cos": cos, "sin": sin, "out": out, **self._scratch}
        for launch in self._launches:
            launch(tensors)
        return out

    def __repr__(self) -> str:
        variant = f", variant={self.variant.name}" if self.variant is not None else ""
        return (
            f"Plan({self.phase}, tile={self.tile.name}, rope={self.rope!r}, rotate_k={self.rotate_k}, "
            f"generation={self.generation}{variant}, launches={self.launches}, num_splits={self.num_splits})"
        )


def _mismatch(name: str, t, expected: tuple) -> str:
    shape, stride, dtype, device, aligned = expected
    want = f"shape {shape}, strides {stride}, {dtype} on {device}" + (", 16-byte aligned" if aligned else "")
    if not isinstance(t, torch.Tensor):
        got = type(t).__name__
    else:
        got = (
            f"shape {tuple(t.shape)}, strides {t.stride()}, {t.dtype} on {t.device}"
            f"{', data pointer not 16-byte aligned' if t.data_ptr() % 16 else ''}"
        )
    return (
        f"Plan.run: {name} does not match the plan: expected {want}, got {got}; "
        "make a new plan (kernels.plan) for these tensors"
    )


def plan(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    tile: Tile,
    rotate_k: bool,
    rope: str | None = None,
    fused: bool | None = None,
    out: torch.Tensor | None = None,
    variant: Variant | None = None,
) -> Plan:
    """Check and prepare one candidate's launches for tensors like these (examples; nothing is
    launched on them). Arguments as in kernels.attention:

    q: (B, Hq, Sq, D); k, v: (B, Hkv, Skv, D); cos, sin: (max_pos, D // 2), max_pos >= Skv
    tile: the candidate's launch shape; rotate_k: k un-rotated (True) or a rotated cache (False)
    rope: 'unfused' | 'fused' | 'q_fused' (generation-2 kernels), or
    fused: True | False (generation-1 kernels, as recorded) -- exactly one of the two
    out: an example output buffer whose layout the runs will use (contiguous when None)
    variant: generation-2 kernel switches (DEFAULT_VARIANT when None; rope= only)
    Raises ValueError for invalid inputs; compile errors (e.g. OutOfResources) surface here.
    """
    mode, generation = rope_mode(rope, fused)
    _check_inputs(q, k, v, tile, out)
    if type(rotate_k) is not bool:
        raise ValueError(f"rotate_k must be a bool, got {rotate_k!r}")
    check_tables(cos, sin, q.shape[3], k.shape[2], q.device)
    if generation == 1 and variant is not None:
        raise ValueError("variant= applies to generation-2 kernels (rope=), not fused=")
    if generation == 2:
        variant = DEFAULT_VARIANT if variant is None else variant
        if not isinstance(variant, Variant):
            raise ValueError(f"variant must be a kernels.Variant, got {type(variant).__name__}")
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    examples = {"q": q, "k": k, "v": v, "cos": cos, "sin": sin, "out": out}
    q_len, kv_len = q.shape[2], k.shape[2]
    phase = "decode" if q_len == 1 else "prefill"

    specs, scratch = [], {}

    def rotated(name: str, positions_offset: int) -> str:
        """Add the standalone RoPE launch of examples[name] into a plan-owned buffer."""
        buffer = f"{name}_rotated"
        scratch[buffer] = torch.empty(examples[name].shape, dtype=q.dtype, device=q.device)
        specs.append(rope_spec({**examples, **scratch}, positions_offset, x=name, out=buffer))
        return buffer

    q_arg, k_arg, rotate_q, rotate_k_in_kernel, tables = "q", "k", True, rotate_k, ("cos", "sin")
    if mode == "unfused":
        q_arg, rotate_q, rotate_k_in_kernel, tables = rotated("q", kv_len - q_len), False, False, (None, None)
    if mode in ("unfused", "q_fused") and rotate_k:
        k_arg, rotate_k_in_kernel = rotated("k", 0), False
    attn_specs, attn_scratch = attention_specs(
        {**examples, **scratch},
        tile,
        rotate_q=rotate_q,
        rotate_k=rotate_k_in_kernel,
        variant=variant if generation == 2 else None,
        q=q_arg,
        k=k_arg,
        cos=tables[0],
        sin=tables[1],
    )
    specs += attn_specs
    scratch.update(attn_scratch)
    used_variant = None  # the switches that took effect (TMA needs aligned layouts, packing a group > 1)
    if generation == 2:
        launched = attn_specs[0].args
        if phase == "prefill":
            used_variant = dataclasses.replace(
                variant, tma=launched["TMA"], pack_gqa=launched["GROUP_ROWS"] > 1
            )
        else:
            used_variant = dataclasses.replace(variant, decode_reduce_in_kernel=launched["REDUCE_IN_KERNEL"])
    num_splits = attn_specs[0].grid[2] if phase == "decode" else 1
    _mode.check_mode()
    return Plan(
        tile=tile,
        rope=mode,
        rotate_k=rotate_k,
        generation=generation,
        variant=used_variant,
        phase=phase,
        num_splits=num_splits,
        specs=specs,
        scratch=scratch,
        examples=examples,
        out_layout=_signature(out),
    )


_CACHE_SIZE = 64
_cache: dict[tuple, Plan] = {}


def cached_plan(q, k, v, cos, sin, out, *, tile, rope, rotate_k, variant) -> Plan:
    """The plan attention(rope=...) runs: one per distinct (tensor signatures, candidate), the
    oldest dropped past _CACHE_SIZE entries."""
    key = (
        tile,
        rope,
        rotate_k,
        variant,
        *(_signature(t) if isinstance(t, torch.Tensor) else None for t in (q, k, v, cos, sin, out)),
    )
    found = _cache.get(key)
    if found is None:
        found = plan(q, k, v, cos, sin, tile=tile, rope=rope, rotate_k=rotate_k, out=out, variant=variant)
        if len(_cache) >= _CACHE_SIZE:
            del _cache[next(iter(_cache))]
        _cache[key] = found
    return found
