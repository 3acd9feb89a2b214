"""Kernel launches as data, so a launch can be built once and replayed with new tensors.

A LaunchSpec names every argument of one Triton kernel launch; the tensors that change from
call to call are Slot (the call's tensor of that name) or Descriptor (a TMA descriptor over it)
markers. LaunchSpec.launch resolves them and launches through Triton's JIT entry point, which
re-derives the specialisation on every call (the eager path of attention()). CompiledLaunch
compiles the spec once from example tensors and then calls the compiled kernel's launcher
directly: no argument binding, no specialisation, no cache lookup (Plan.run's path). That is
only sound for tensors specialised the same way, which Plan.run checks before it launches.

Launches is what a launcher family (prefill.py, decode.py, rope.py, gen1/) returns: its specs and
scratch buffers, and what it decided (decode splits, in-kernel merge, TMA, GQA packing), so that
plans.py reads those decisions here rather than from kernel argument names or grid layouts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton

from . import mode

try:  # Triton >= 3.3: host-side TMA descriptors
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - the variants that need it report unsupported instead
    TensorDescriptor = None


@dataclass(frozen=True)
class Slot:
    """The call's tensor named `name` ('q', 'k', 'v', 'cos', 'sin' or 'out')."""

    name: str


@dataclass(frozen=True)
class Descriptor:
    """A TMA descriptor over the call's tensor `name`, in blocks of `block_shape`."""

    name: str
    block_shape: tuple[int, ...]


@dataclass(frozen=True)
class Launches:
    """The launches of one launcher family for one call, as data, and what they decided.

    specs: in launch order; scratch: name -> buffer the specs read that the caller does not own
    (decode partials, arrival counters); num_splits: decode's key splits (1: none, and always 1
    for prefill); reduce_in_kernel: the decode kernel merges its splits (no reduction launch);
    tma: prefill loads K/V through TMA descriptors; packed_gqa: one prefill program serves every
    query head of a KV group.
    """

    specs: tuple
    scratch: dict
    num_splits: int = 1
    reduce_in_kernel: bool = False
    tma: bool = False
    packed_gqa: bool = False


#: softmax runs in base 2: exp(x) = exp2(x * LOG2E)
LOG2E = 1.4426950408889634


def attention_scale(head_dim: int) -> float:
    """The attention kernels' qk_scale: 1/sqrt(D) folded into base 2's LOG2E."""
    return LOG2E / math.sqrt(head_dim)


def named_strides(prefix: str, t: torch.Tensor) -> dict:
    """{'stride_<prefix>b': .., 'stride_<prefix>h': .., 'stride_<prefix>s': .., 'stride_<prefix>d': ..}"""
    return {f"stride_{prefix}{axis}": s for axis, s in zip("bhsd", t.stride(), strict=True)}


def signature(t: torch.Tensor) -> tuple:
    """What a compiled launch is specialised on: shape, strides, dtype, device, 16-byte alignment."""
    return (tuple(t.shape), t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0)


def mismatch(name: str, t, expected: tuple) -> str:
    """The ValueError message for a run's tensor `t` whose signature() is not the plan's `expected`."""
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


def resolve(value, tensors: dict):
    kind = type(value)
    if kind is Slot:
        return tensors[value.name]
    if kind is Descriptor:
        t = tensors[value.name]
        return TensorDescriptor(t, list(t.shape), list(t.stride()), list(value.block_shape))
    return value


@dataclass(frozen=True)
class LaunchSpec:
    """One launch: kernel, grid, every kernel parameter by name, and the launch options."""

    kernel: object  # a triton JITFunction (InterpretedFunction under TRITON_INTERPRET=1)
    grid: tuple[int, int, int]
    args: dict
    options: dict  # num_warps / num_stages; empty for Triton's defaults

    def launch(self, tensors: dict) -> None:
        """Launch through Triton's JIT entry point (checks and specialises on every call)."""
        args = {name: resolve(value, tensors) for name, value in self.args.items()}
        self.kernel[self.grid](**args, **self.options)


class CompiledLaunch:
    """A LaunchSpec compiled once for the example tensors and replayed through the compiled
    kernel's own launcher. Under the interpreter (no compiled kernels) it falls back to
    LaunchSpec.launch; `direct` says which path a launch takes."""

    def __init__(self, spec: LaunchSpec, example: dict, device: torch.device):
        self.spec = spec
        names = list(spec.kernel.arg_names)
        if sorted(names) != sorted(spec.args):
            raise ValueError(f"launch of {spec.kernel} misses or adds arguments: {sorted(spec.args)}")
        self._template = [spec.args[n] for n in names]
        self._dynamic = [(i, v) for i, v in enumerate(self._template) if type(v) in (Slot, Descriptor)]
        self.direct = not mode.INTERPRET
        if not self.direct:
            return
        resolved = [resolve(v, example) for v in self._template]
        compiled = spec.kernel.warmup(*resolved, grid=spec.grid, **spec.options)
        self.fallback_reason = None
        try:  # the compiled kernel's internals, as JITFunction.run uses them (Triton 3.4-3.9)
            # loads the module now, so OutOfResources is raised here rather than in a run
            compiled._init_handles()
            self._launcher = compiled.run
            self._function = compiled.function
            self._packed = compiled.packed_metadata
            self._metadata = compiled.launch_metadata
            self._knobs = triton.knobs.runtime
            self._knobs.launch_enter_hook  # noqa: B018  (present in this Triton?)
            self._stream = triton.runtime.driver.active.get_current_stream
        except AttributeError as exc:
            self._fall_back(exc)
        self._device_index = device.index if device.index is not None else torch.cuda.current_device()

    def _fall_back(self, exc: Exception) -> None:
        """This Triton's internals differ from what the direct path expects: use the JIT path."""
        self.direct = False
        self.fallback_reason = f"{type(exc).__name__}: {exc}"

    def __call__(self, tensors: dict) -> None:
        if not self.direct:
            self.spec.launch(tensors)
            return
        args = self._template.copy()
        for i, value in self._dynamic:
            args[i] = resolve(value, tensors)
        grid = self.spec.grid
        stream = self._stream(self._device_index)
        knobs = self._knobs
        try:
            # the call JITFunction.run makes after its cache hit, hooks included (profilers)
            self._launcher(
                grid[0],
                grid[1],
                grid[2],
                stream,
                self._function,
                self._packed,
                self._metadata(grid, stream, *args),
                knobs.launch_enter_hook,
                knobs.launch_exit_hook,
                *args,
            )
        except (TypeError, AttributeError) as exc:
            # the launcher rejected the arguments before enqueuing anything (another Triton's
            # calling convention): relaunch, and launch from now on, through the JIT path
            self._fall_back(exc)
            self.spec.launch(tensors)


#: the slot names an attention launch reads its tensors from, unless a plan renames one (rotated
#: copies 'q_rotated' / 'k_rotated'; cos and sin None when nothing rotates in the kernel)
SLOTS = {"q": "q", "k": "k", "v": "v", "out": "out", "cos": "cos", "sin": "sin"}


def attention_args(tensors: dict, q: str, k: str, v: str, out: str, cos: str | None, sin: str | None) -> dict:
    """The arguments both attention families take: the pointers of q (B, Hq, Sq, D), k, v
    (B, Hkv, Skv, D), out (B, Hq, Sq, D), cos, sin (max_pos, D // 2) by slot name, each 4-D
    tensor's strides as one tuple (q_strides: (b, h, s, d), ...), the problem's sizes (Hkv,
    group = Hq // Hkv, Sq, Skv, HEAD_DIM) and qk_scale; cos None: nothing rotates, so q stands in
    for the never-read table pointers."""
    if cos is None:
        cos = sin = q
        stride_tab = 0
    else:
        stride_tab = tensors[cos].stride(0)
    (_, heads_q, q_len, head_dim), (_, heads_kv, kv_len, _) = tensors[q].shape, tensors[k].shape
    return dict(
        q_ptr=Slot(q),
        k_ptr=Slot(k),
        v_ptr=Slot(v),
        out_ptr=Slot(out),
        cos_ptr=Slot(cos),
        sin_ptr=Slot(sin),
        q_strides=tensors[q].stride(),
        k_strides=tensors[k].stride(),
        v_strides=tensors[v].stride(),
        o_strides=tensors[out].stride(),
        stride_tab=stride_tab,
        Hkv=heads_kv,
        group=heads_q // heads_kv,
        Sq=q_len,
        Skv=kv_len,
        qk_scale=attention_scale(head_dim),
        HEAD_DIM=head_dim,
    )
