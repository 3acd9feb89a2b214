"""Execution mode (GPU or Triton interpreter), what depends on it (supported dtypes, the SM count,
the decode split sizes) and the input checks every launcher runs.

Triton decides interpreter vs compiled per kernel when `@triton.jit` runs, i.e. when the
module holding the kernel is imported: `triton.jit` reads TRITON_INTERPRET then (through
triton.knobs) and returns an InterpretedFunction or a JITFunction for good. Setting the
variable after `import kernels` therefore has no effect on these kernels. INTERPRET records
the choice made at import; check_mode() turns a later change into a clear error instead of a
driver error or a silent GPU launch.
"""

from __future__ import annotations

import os

import torch
import triton

from . import split
from .tile import Tile

INTERPRET: bool = bool(triton.knobs.runtime.interpret)

SUPPORTED_HEAD_DIMS = (32, 64, 128)
# The interpreter's bfloat16 tl.dot is wrong (unsupported upstream); float32 stands in there.
SUPPORTED_DTYPES = (torch.float16, torch.float32) if INTERPRET else (torch.float16, torch.bfloat16)


def interpreted() -> bool:
    """True when the kernels were built for the Triton interpreter (TRITON_INTERPRET=1 at import)."""
    return INTERPRET


def _env_interpret() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in ("1", "true", "on", "yes")


def check_mode() -> None:
    """RuntimeError if TRITON_INTERPRET changed since `kernels` was imported."""
    if _env_interpret() != INTERPRET:
        raise RuntimeError(
            f"TRITON_INTERPRET is now {os.environ.get('TRITON_INTERPRET')!r} but was "
            f"{'set' if INTERPRET else 'unset'} when kernels was imported; Triton fixes the mode "
            "at import, so set TRITON_INTERPRET before the first `import kernels`"
        )


def expected_device_type() -> str:
    return "cpu" if INTERPRET else "cuda"


def check_dtype(name: str, t: torch.Tensor) -> None:
    if t.dtype not in SUPPORTED_DTYPES:
        where = "the Triton interpreter" if INTERPRET else "CUDA"
        names = ", ".join(str(d).replace("torch.", "") for d in SUPPORTED_DTYPES)
        raise ValueError(f"{name} dtype {t.dtype} is not supported on {where}; use one of {names}")


def check_device(name: str, t: torch.Tensor) -> None:
    check_mode()
    if t.device.type != expected_device_type():
        mode = "the Triton interpreter (TRITON_INTERPRET=1)" if INTERPRET else "compiled Triton"
        raise ValueError(f"{name} is on {t.device} but {mode} needs {expected_device_type()} tensors")


def check_head_dim(name: str, head_dim: int) -> None:
    if head_dim not in SUPPORTED_HEAD_DIMS:
        raise ValueError(f"{name} head_dim {head_dim} is not supported; use one of {SUPPORTED_HEAD_DIMS}")


def check_out(out, shape, dtype, device) -> None:
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"out must be a torch.Tensor, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape):
        raise ValueError(f"out must have shape {tuple(shape)}, got {tuple(out.shape)}")
    if out.dtype != dtype:
        raise ValueError(f"out dtype must be {dtype}, got {out.dtype}")
    if out.device != device:
        raise ValueError(f"out is on {out.device}, expected {device}")


_SM_COUNT: dict[int, int] = {}
# Under the interpreter there is no GPU to fill; a small fixed count makes the split-KV path
# (and its reduction) run on the small shapes of the CPU tests.
INTERPRETER_SM_COUNT = 4


def sm_count(device: torch.device) -> int:
    if INTERPRET:
        return INTERPRETER_SM_COUNT
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in _SM_COUNT:
        _SM_COUNT[index] = torch.cuda.get_device_properties(index).multi_processor_count
    return _SM_COUNT[index]


# The split-KV plan lives in split.py (torch-free, for the roofline); the interpreter's small test
# shapes use 16-key splits so the split path and its reduction run on CPU.
DECODE_WAVES = split.DECODE_WAVES
MIN_SPLIT_KEYS = 16 if INTERPRET else split.MIN_SPLIT_KEYS
SPLIT_ALIGN_KEYS = 16 if INTERPRET else split.SPLIT_ALIGN_KEYS


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


def check_attention_inputs(q, k, v, tile, out) -> None:
    """ValueError unless q (B, Hq, Sq, D), k and v (B, Hkv, Skv, D) are causal GQA attention inputs
    of this mode (dtype, device, head_dim; Hq % Hkv == 0, Skv >= Sq >= 1), tile a Tile, and out
    None or a (B, Hq, Sq, D) buffer of q's dtype and device."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name} must be 4-D, got shape {tuple(t.shape)}")
    check_dtype("q", q)
    for name, t in (("k", k), ("v", v)):
        if t.dtype != q.dtype:
            raise ValueError(f"{name} dtype {t.dtype} differs from q dtype {q.dtype}")
    check_device("q", q)
    for name, t in (("k", k), ("v", v)):
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    _check_attention_shapes(q.shape, k.shape, v.shape)
    if not isinstance(tile, Tile):
        raise ValueError(f"tile must be a kernels.Tile, got {type(tile).__name__}")
    if out is not None:
        check_out(out, q.shape, q.dtype, q.device)


def _check_attention_shapes(q_shape, k_shape, v_shape) -> None:
    batch, heads_q, q_len, head_dim = q_shape
    check_head_dim("q", head_dim)
    if k_shape != v_shape:
        raise ValueError(f"k shape {tuple(k_shape)} differs from v shape {tuple(v_shape)}")
    if k_shape[0] != batch:
        raise ValueError(f"k batch {k_shape[0]} differs from q batch {batch}")
    if k_shape[3] != head_dim:
        raise ValueError(f"k head_dim {k_shape[3]} differs from q head_dim {head_dim}")
    heads_kv, kv_len = k_shape[1], k_shape[2]
    if batch < 1 or heads_q < 1 or heads_kv < 1:
        raise ValueError(
            f"q and k need at least one batch and head, got q {tuple(q_shape)}, k {tuple(k_shape)}"
        )
    if heads_q % heads_kv:
        raise ValueError(f"q heads ({heads_q}) must be a multiple of k heads ({heads_kv})")
    if q_len < 1:
        raise ValueError(f"q must hold at least one query (Sq >= 1), got Sq={q_len}")
    if kv_len < q_len:
        raise ValueError(f"k holds {kv_len} keys but q has {q_len} queries; causal attention needs Skv >= Sq")


def check_tables(cos, sin, head_dim: int, positions: int, device: torch.device) -> None:
    """ValueError unless cos/sin are (>= positions, head_dim // 2) tables on `device`."""
    for name, t in (("cos", cos), ("sin", sin)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 2 or t.shape[1] != head_dim // 2:
            raise ValueError(
                f"{name} must have shape (max_pos, head_dim // 2 = {head_dim // 2}), "
                f"got {tuple(t.shape)}; build it with kernels.rope_tables"
            )
        if t.shape[0] < positions:
            raise ValueError(f"{name} covers {t.shape[0]} positions but {positions} are needed")
        if t.dtype not in (torch.float16, torch.bfloat16, torch.float32):
            raise ValueError(f"{name} dtype must be float16, bfloat16 or float32, got {t.dtype}")
        if t.device != device:
            raise ValueError(f"{name} is on {t.device}, expected {device} like the inputs")
        if t.stride(1) != 1:
            raise ValueError(f"{name} must have a contiguous last dimension")
    if cos.stride(0) != sin.stride(0):
        raise ValueError("cos and sin must have the same row stride")
