"""Execution mode (GPU or Triton interpreter) and the input checks that depend on it.

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

INTERPRET: bool = bool(triton.knobs.runtime.interpret)

SUPPORTED_HEAD_DIMS = (32, 64, 128)
# The interpreter's bfloat16 tl.dot is wrong (unsupported upstream); float32 stands in there.
SUPPORTED_DTYPES = (torch.float16, torch.float32) if INTERPRET else (torch.float16, torch.bfloat16)


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
