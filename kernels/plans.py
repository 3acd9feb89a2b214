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

A plan's launches: the standalone RoPE launches its placement needs (schedule.rotation), then one
attention family's launches, picked from FAMILIES by (generation, step): a new family (say a
generation-3 decode) is one launcher returning launch.Launches plus one entry there.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from . import gen1, mode, schedule
from .decode import decode_launches
from .launch import SLOTS, CompiledLaunch, Launches, mismatch, signature
from .prefill import prefill_launches
from .rope import rope_spec
from .schedule import DEFAULT_VARIANT, Variant
from .tile import Tile

_INPUTS = ("q", "k", "v", "cos", "sin")


def _generation_1(tensors, tile, variant, *, path, rotate_q, rotate_k, slots) -> Launches:
    """Generation 1's frozen launches (its variant is None: no switches)."""
    return gen1.attention_specs(tensors, tile, path=path, rotate_q=rotate_q, rotate_k=rotate_k, **slots)


#: (generation, attention step) -> launcher(tensors, tile, variant, *, rotate_q, rotate_k, slots)
#: -> Launches (slots: launch.SLOTS with the plan's renames). Register a new attention family here.
FAMILIES = {
    (1, schedule.PREFILL): functools.partial(_generation_1, path="prefill"),
    (1, schedule.DECODE): functools.partial(_generation_1, path="decode"),
    (2, schedule.PREFILL): prefill_launches,
    (2, schedule.DECODE): decode_launches,
}


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
        self._expected = tuple(signature(examples[name]) for name in _INPUTS)
        self._out_layout = out_layout  # (shape, stride, dtype, device, aligned)
        device = examples["q"].device
        self._launches = tuple(CompiledLaunch(spec, {**examples, **scratch}, device) for spec in specs)
        self.launches = len(self._launches)

    @property
    def specs(self) -> tuple:
        """The LaunchSpecs one run launches, in order (what tools/bit_identity.py compiles)."""
        return tuple(launch.spec for launch in self._launches)

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
                raise ValueError(mismatch(_INPUTS[i], t, expected[i]))
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
            raise ValueError(mismatch("out", out, self._out_layout))
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
    placement, generation = schedule.rope_mode(rope, fused)
    variant = _check_plan_inputs(q, k, v, cos, sin, tile, out, rotate_k, generation, variant)
    if out is None:
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)  # (B, Hq, Sq, D)
    examples = {"q": q, "k": k, "v": v, "cos": cos, "sin": sin, "out": out}
    rotation = schedule.rotation(placement, rotate_k)
    specs, scratch, slots = _standalone_rotations(examples, rotation)
    step = schedule.attention_step(q.shape[2])
    launches = FAMILIES[generation, step](
        {**examples, **scratch},
        tile,
        variant,
        rotate_q=rotation.rotate_q,
        rotate_k=rotation.rotate_k,
        slots=slots,
    )
    scratch.update(launches.scratch)
    mode.check_mode()
    return Plan(
        tile=tile,
        rope=placement,
        rotate_k=rotate_k,
        generation=generation,
        variant=_used_variant(variant, step, launches),
        phase=step,
        num_splits=launches.num_splits,
        specs=[*specs, *launches.specs],
        scratch=scratch,
        examples=examples,
        out_layout=signature(out),
    )


def _standalone_rotations(examples: dict, rotation: schedule.Rotation) -> tuple[list, dict, dict]:
    """The standalone RoPE launches of a placement, each into a plan-owned buffer: (specs,
    scratch, slots), slots naming what the attention launch then reads (launch.SLOTS renamed)."""
    q, k = examples["q"], examples["k"]  # (B, Hq, Sq, D), (B, Hkv, Skv, D)
    specs, scratch, slots = [], {}, dict(SLOTS)
    for name in rotation.standalone:
        slots[name] = f"{name}_rotated"
        scratch[slots[name]] = torch.empty(examples[name].shape, dtype=q.dtype, device=q.device)
        offset = k.shape[2] - q.shape[2] if name == "q" else 0  # q sits at Skv - Sq + i
        specs.append(rope_spec({**examples, **scratch}, offset, x=name, out=slots[name]))
    if not (rotation.rotate_q or rotation.rotate_k):
        slots["cos"] = slots["sin"] = None  # nothing rotates in the attention kernel
    return specs, scratch, slots


def _check_plan_inputs(q, k, v, cos, sin, tile, out, rotate_k, generation, variant) -> Variant | None:
    """ValueError for invalid plan() arguments; the variant the plan runs (None: generation 1)."""
    mode.check_attention_inputs(q, k, v, tile, out)
    if type(rotate_k) is not bool:
        raise ValueError(f"rotate_k must be a bool, got {rotate_k!r}")
    mode.check_tables(cos, sin, q.shape[3], k.shape[2], q.device)
    if generation == 1:
        if variant is not None:
            raise ValueError("variant= applies to generation-2 kernels (rope=), not fused=")
        return None
    variant = DEFAULT_VARIANT if variant is None else variant
    if not isinstance(variant, Variant):
        raise ValueError(f"variant must be a kernels.Variant, got {type(variant).__name__}")
    return variant


def _used_variant(variant: Variant | None, step: str, launches: Launches) -> Variant | None:
    """The switches that took effect (TMA needs aligned layouts, packing a group > 1)."""
    if variant is None:
        return None
    if step == schedule.PREFILL:
        return dataclasses.replace(variant, tma=launches.tma, pack_gqa=launches.packed_gqa)
    return dataclasses.replace(variant, decode_reduce_in_kernel=launches.reduce_in_kernel)


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
        *(signature(t) if isinstance(t, torch.Tensor) else None for t in (q, k, v, cos, sin, out)),
    )
    found = _cache.get(key)
    if found is None:
        found = plan(q, k, v, cos, sin, tile=tile, rope=rope, rotate_k=rotate_k, out=out, variant=variant)
        if len(_cache) >= _CACHE_SIZE:
            del _cache[next(iter(_cache))]
        _cache[key] = found
    return found
