"""Attention's correctness gate: every candidate on every distinct shape of the trace, against
float64 (its tolerances, seeds, verdicts and the gate itself: headroom.measure.correctness).

One check = (candidate, shape_key): the shape's random inputs (never zeros), drawn once per shape
from its own seed and shared by every candidate's check, as a kernel family's gate does
(headroom.families.check), each candidate given its own copy; the candidate run twice into
poisoned output buffers -- NaN first, then a finite sentinel no valid output can hold -- and
compared with the shape's float64 answer, `kernels.reference_attention`, computed once per shape
(and per layout, padded or ragged) rather than once per check:
    rel_err = ||out - ref|| / ||ref||,  max_abs_err = max |out - ref|   (float64)
    nan_count = NaN elements after the NaN-poisoned run
    unwritten_count = elements still equal to the sentinel after the second run
A check passes when it ran, nothing is NaN or unwritten, rel_err <= tolerance,
max_abs_err <= abs_tolerance (per dtype, config `correctness.tolerances`) and its copy of the
inputs is unchanged after both calls (a call that writes q, k or v would corrupt every timed call
after it, where input sets are reused).

A backend or tile that cannot run a shape is not a wrong answer: a native SDPA backend with no
kernel for it ("No available kernel", "No viable backend") or a tile that needs more resources
than the GPU has (Triton's OutOfResources) is recorded with status 'unsupported' and its reason,
is excluded from timing, and the study goes on whatever `on_correctness_failure` says. Status
'failed' (a wrong answer, NaNs, unwritten elements) and 'error' (any other compile or launch
failure of a candidate) are failures.

Long caches and ragged decodes: the reference is kernels.reference_attention_chunked (float64 in
key chunks, never the whole score matrix) when the plain reference would hold more than
PLAIN_REFERENCE_MAX_ELEMENTS float64 values or the row carries kv_lens; the plain reference
otherwise (the two agree to float64 rounding).
A decode row with kv_lens is checked in the padded layout (inputs.input_sets): candidates that
read the lengths (varlen, native; runner.takes_lengths) against the ragged reference, the
others against the padded problem they solve; on rows without kv_lens the varlen family runs (and
is checked as) generation 2's q_fused plan of its tile. Rows sharing a shape_key are checked with the first row's kv_lens.

headroom.measure.correctness.admitted() is how later stages drop failing and unsupported candidates.

`kernels` is imported inside the functions, never at module import: scripts import this module
before `run_stage` has set TRITON_INTERPRET, and Triton fixes the mode when kernels import.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from typing import Any

import pandas as pd

from headroom.core import contracts, defaults
from headroom.core.progress import Progress
from headroom.measure.correctness import input_seed, problems

COLUMNS = list(contracts.CORRECTNESS.names)
#: One row per distinct shape: the trace's shape columns (shape_key first).
SHAPE_COLUMNS = ["shape_key", *(c for c in contracts.TRACE_COLUMNS if c not in ("invocation", "shape_key"))]
# |out| <= max |v| for softmax-weighted averages of N(0, 1) values: a few units. An element still
# holding this after the run was never written.
SENTINEL = 1024.0
FAULT_INJECTION_NOTE = (
    "correctness.inject_fault names a candidate whose output this stage corrupts on purpose "
    "(tests prove the gate with it); it must be null in a real study"
)


# Messages of torch SDPA when the forced backend has no kernel for the inputs (torch < 2.5 said
# "No available kernel", later versions "No viable backend").
NATIVE_UNSUPPORTED = ("no available kernel", "no viable backend")
# A native backend that PyTorch's own compiler stack cannot build for this device or shape
# (FlexAttention through torch.compile): the backend cannot run here, which is not a wrong answer.
NATIVE_COMPILE_ERRORS = ("BackendCompilerFailed", "InductorError", "Unsupported", "NotImplementedError")


def unsupported_reason(exc: BaseException, *, native: bool) -> str | None:
    """Why `exc` means the candidate cannot run this shape (not a wrong answer), or None."""
    text = str(exc).strip()
    first = text.splitlines()[0][:300] if text else ""
    if native and any(m in text.lower() for m in NATIVE_UNSUPPORTED):
        return f"backend has no kernel for this shape ({type(exc).__name__}: {first})"
    if native and type(exc).__name__ in NATIVE_COMPILE_ERRORS:
        return f"backend cannot be compiled for this device or shape ({type(exc).__name__}: {first})"
    if type(exc).__name__ == "OutOfResources":
        return f"tile needs more resources than the device has ({type(exc).__name__}: {first})"
    return None


def shapes(trace: pd.DataFrame) -> pd.DataFrame:
    """One row per distinct shape_key of the trace (its first invocation's fields, kv_lens too
    where the trace has them), sorted."""
    missing = [c for c in SHAPE_COLUMNS if c not in trace.columns]
    if missing:
        raise ValueError(f"trace lacks columns {missing} needed for correctness checks")
    if trace.empty:
        raise ValueError("trace is empty: no shape to check")
    columns = SHAPE_COLUMNS + (["kv_lens"] if "kv_lens" in trace.columns else [])
    first = trace.drop_duplicates("shape_key", keep="first")[columns]
    return first.sort_values("shape_key").reset_index(drop=True)


def rotate_k_for(phase: str, q_len: int = 1, kv_len: int = 1) -> bool:
    """headroom.families.attention.inputs.rotate_k for a (phase, q_len, kv_len): a prefill from an
    empty cache rotates its new keys; a chunk over a cache and a decode read rotated keys."""
    if phase not in ("prefill", "decode"):
        raise ValueError(f"phase must be 'prefill' or 'decode', got {phase!r}")
    from types import SimpleNamespace

    from headroom.families.attention.inputs import rotate_k

    return rotate_k(SimpleNamespace(phase=phase, q_len=q_len, kv_len=kv_len))


def default_make_fn(cand: Any, cos, sin, rotate_k: bool, kv_lens=None) -> Callable:
    """fn(q, k, v, out=None) for a candidate row: the runner every stage uses."""
    from headroom.families.attention.runner import runner

    return runner(cand, cos, sin, rotate_k, kv_lens)


def corrupting(fn: Callable) -> Callable:
    """A deliberately broken version of fn: the last query row of every head is shifted."""

    def broken(q, k, v, out=None):
        res = fn(q, k, v, out=out)
        res[:, :, -1, :] += 1.0
        return res

    return broken


def _torch_device(device: str) -> str:
    if device not in ("cuda", "interpret"):
        raise ValueError(f"device must be 'cuda' or 'interpret', got {device!r}")
    return "cuda" if device == "cuda" else "cpu"


def check_inputs(shape: Any, seed: int, tdev: str, rope_base: float):
    """A check's random q, k, v (drawn from `seed` in that order) and the rotary tables cos, sin."""
    import torch

    from headroom.families.attention.runner import tables as candidate_tables

    dtype = getattr(torch, str(shape.dtype))
    gen = torch.Generator(device=tdev).manual_seed(seed)

    def randn(*size):
        return torch.randn(size, generator=gen, device=tdev, dtype=torch.float32).to(dtype)

    b, hq, hkv, sq, skv, d = (
        int(shape.batch),
        int(shape.heads_q),
        int(shape.heads_kv),
        int(shape.q_len),
        int(shape.kv_len),
        int(shape.head_dim),
    )
    q, k, v = randn(b, hq, sq, d), randn(b, hkv, skv, d), randn(b, hkv, skv, d)
    cos, sin = candidate_tables(skv, d, str(shape.dtype), rope_base, tdev)
    return q, k, v, cos, sin


def _not_run(row: dict, exc: Exception, *, native: bool) -> dict:
    """`row` for a check whose callable raised: 'unsupported' with the reason, else an 'error'."""
    why = unsupported_reason(exc, native=native)
    if why is not None:
        row.update(status="unsupported", reason=why)
        return row
    message = str(exc).strip()
    row["reason"] = f"{type(exc).__name__}: {message.splitlines()[0][:300] if message else ''}"
    return row


class ShapeInputs:
    """One distinct shape's check inputs: q, k, v drawn once from `seed`, the rotary tables, and its
    float64 answers, each computed on first use and kept (the padded problem, and the ragged one for
    candidates that read kv_lens)."""

    def __init__(self, shape: Any, seed: int, device: str, rope_base: float):
        self.seed = seed
        self.device = _torch_device(device)
        self.rotate_k = rotate_k_for(shape.phase, int(shape.q_len), int(shape.kv_len))
        self.q, self.k, self.v, self.cos, self.sin = check_inputs(shape, seed, self.device, rope_base)
        self._answers: dict = {}

    def copies(self):
        """A candidate's own q, k, v: equal to the shape's, so that a call writing them is seen."""
        return self.q.clone(), self.k.clone(), self.v.clone()

    def written(self, q, k, v) -> list[str]:
        """The names of the copies a call changed."""
        import torch

        pairs = (("q", q, self.q), ("k", k, self.k), ("v", v, self.v))
        return [name for name, got, drawn in pairs if not torch.equal(got, drawn)]

    def answer(self, kv_lens=None):
        """The float64 answer for these inputs (ragged when kv_lens is given), computed once."""
        key = None if kv_lens is None else tuple(int(n) for n in kv_lens.tolist())
        if key not in self._answers:
            self._answers[key] = reference(
                self.q, self.k, self.v, self.cos, self.sin, rotate_k=self.rotate_k, kv_lens=kv_lens
            )
        return self._answers[key]


def check_one(
    fn: Callable,
    shape: Any,
    *,
    seed: int,
    device: str,
    tol: tuple[float, float],
    rope_base: float,
    native: bool = False,
    kv_lens=None,
) -> dict[str, Any]:
    """Run one check on inputs of its own (see the module docstring); returns the measured columns.
    `native`: fn is a native backend, whose "no kernel for this shape" error makes the check
    'unsupported'. kv_lens: the (B,) lengths fn answers for (a ragged decode), None for the padded
    problem."""
    inputs = ShapeInputs(shape, seed, device, rope_base)
    return judge(fn, inputs, tol=tol, native=native, kv_lens=kv_lens)


def judge(
    fn: Callable, inputs: ShapeInputs, *, tol: tuple[float, float], native: bool = False, kv_lens=None
) -> dict[str, Any]:
    """One candidate's check on a shape's shared inputs: its measured columns."""
    import torch

    row = dict(
        rel_err=math.nan, max_abs_err=math.nan, nan_count=-1, unwritten_count=-1, status="error", reason=""
    )
    q, k, v = inputs.copies()
    try:
        out, nan_count, unwritten = _run_poisoned(fn, q, k, v, inputs.device)
    except Exception as exc:  # cannot run this shape: unsupported; any other failure: an error
        return _not_run(row, exc, native=native)
    ref = inputs.answer(kv_lens)
    diff = out.to(torch.float64) - ref
    rel, max_abs = float(diff.norm() / ref.norm()), float(diff.abs().max())
    found = problems(rel, max_abs, nan_count, unwritten, tol)
    written = inputs.written(q, k, v)
    if written:
        found.append(f"the call wrote its inputs ({', '.join(written)})")
    row.update(
        rel_err=rel,
        max_abs_err=max_abs,
        nan_count=nan_count,
        unwritten_count=unwritten,
        status="failed" if found else "passed",
        reason="; ".join(found),
    )
    return row


#: the most float64 elements the plain reference may hold (2 GiB): its scores, B * Hq * Sq * Skv,
#: and K and V repeated per query head, 2 * B * Hq * Skv * D. Past it the chunked reference runs (a
#: 2048-query chunk over 131,072 keys with 32 heads would need 69 GB of scores alone)
PLAIN_REFERENCE_MAX_ELEMENTS = 2**28


def reference(q, k, v, cos, sin, *, rotate_k: bool, kv_lens=None):
    """The float64 answer of a check: chunked for ragged rows and past PLAIN_REFERENCE_MAX_ELEMENTS
    (long caches), the plain reference otherwise (same values to float64 rounding)."""
    from kernels import reference_attention, reference_attention_chunked

    batch, heads_q, q_len, head_dim = q.shape
    plain = batch * heads_q * k.shape[2] * (q_len + 2 * head_dim)
    if kv_lens is None and plain <= PLAIN_REFERENCE_MAX_ELEMENTS:
        return reference_attention(q, k, v, cos, sin, rotate_k=rotate_k)
    return reference_attention_chunked(q, k, v, cos, sin, rotate_k=rotate_k, kv_lens=kv_lens)


def _run_poisoned(fn: Callable, q, k, v, tdev: str):
    """Run fn into a NaN-filled output, then into a SENTINEL-filled one: (out, NaNs, unwritten)."""
    import torch

    out = fn(q, k, v, out=torch.full_like(q, float("nan")))
    if tdev == "cuda":
        torch.cuda.synchronize()
    if out.shape != q.shape:
        raise ValueError(f"output shape {tuple(out.shape)} != {tuple(q.shape)}")
    nan_count = int(out.isnan().sum())
    second = fn(q, k, v, out=torch.full_like(q, SENTINEL))
    if tdev == "cuda":
        torch.cuda.synchronize()
    return out, nan_count, int((second == SENTINEL).sum())


def _check_candidates(candidates: pd.DataFrame, inject_fault: str | None, log: logging.Logger) -> None:
    for col in ("candidate", "tile", "fused"):
        if col not in candidates.columns:
            raise ValueError(f"candidates lacks column {col!r}")
    if candidates.empty:
        raise ValueError("candidates is empty: nothing to check")
    if inject_fault is not None and inject_fault not in set(candidates["candidate"]):
        raise ValueError(f"config key 'correctness.inject_fault': {inject_fault!r} is not a candidate id")
    if inject_fault is not None:
        log.warning("FAULT INJECTION: %s; corrupting %s", FAULT_INJECTION_NOTE, inject_fault)


def _row(cand: Any, shape: Any, result: dict, tol: tuple[float, float], *, rotate_k: bool, seed: int) -> dict:
    return {
        "candidate": cand.candidate,
        "shape_key": shape.shape_key,
        **result,
        "passed": result["status"] == "passed",
        "tolerance": tol[0],
        "abs_tolerance": tol[1],
        "tile": int(cand.tile),
        "fused": bool(cand.fused),
        "phase": shape.phase,
        "batch": int(shape.batch),
        "q_len": int(shape.q_len),
        "kv_len": int(shape.kv_len),
        "heads_q": int(shape.heads_q),
        "heads_kv": int(shape.heads_kv),
        "head_dim": int(shape.head_dim),
        "dtype": str(shape.dtype),
        "rotate_k": rotate_k,
        "input_seed": seed,
    }


def _log_result(log: logging.Logger, cand: Any, shape: Any, result: dict) -> None:
    log.log(
        {"passed": logging.INFO, "unsupported": logging.WARNING}.get(result["status"], logging.ERROR),
        "%s %s %s rel_err=%.2e max_abs_err=%.2e %s",
        result["status"].upper(),
        cand.candidate,
        shape.shape_key,
        result["rel_err"],
        result["max_abs_err"],
        result["reason"],
    )


def _tolerance(tolerances_by_dtype: Mapping[str, tuple[float, float]], dtype: str, shape_key: str):
    if dtype not in tolerances_by_dtype:
        raise ValueError(
            f"config key 'correctness.tolerances' has no entry for dtype {dtype!r} (shape {shape_key})"
        )
    return tolerances_by_dtype[dtype]


def check(
    candidates: pd.DataFrame,
    shape_rows: pd.DataFrame,
    *,
    device: str,
    tolerances_by_dtype: Mapping[str, tuple[float, float]],
    seed: int = 0,
    rope_base: float | None = None,
    make_fn: Callable = default_make_fn,
    inject_fault: str | None = None,
    log: logging.Logger | None = None,
) -> pd.DataFrame:
    """Every candidate x every shape it applies to (see the module docstring) as a DataFrame with
    COLUMNS.

    make_fn(cand, cos, sin, rotate_k) -> fn(q, k, v, out=None) builds a candidate's callable
    (default: headroom.families.attention.runner.runner, what every stage runs); tests pass a broken
    one. On rows with kv_lens it is called with kv_lens= too (the (B,) int32 lengths).
    inject_fault: a candidate id whose output is corrupted (FAULT_INJECTION_NOTE).
    ValueError when a candidate applies to no shape (the varlen family on a trace without kv_lens).
    """
    rope_base = defaults.value("partition", "rope_base") if rope_base is None else rope_base
    import torch

    from headroom.families.attention.inputs import kv_lens
    from headroom.families.attention.runner import is_varlen

    log = log or logging.getLogger("headroom.families.attention.correctness")
    _check_candidates(candidates, inject_fault, log)
    tdev = _torch_device(device)
    shape_list = list(shape_rows.itertuples(index=False))
    for cand in candidates.itertuples(index=False):
        if is_varlen(cand) and not any(kv_lens(shape) is not None for shape in shape_list):
            raise ValueError(
                f"candidate {cand.candidate}: the trace has no decode row with kv_lens, so the varlen "
                "decode would never run (it would time generation 2's q_fused plan twice): drop "
                "varlen_decode from the study or use a trace with kv_summary: per_sequence"
            )
    rows = []
    progress = Progress(log, "correctness", len(shape_list) * len(candidates), "checks")
    for shape in shape_list:
        tol = _tolerance(tolerances_by_dtype, str(shape.dtype), shape.shape_key)
        inputs = ShapeInputs(shape, shape_seed(seed, shape.shape_key), device, rope_base)
        for cand in candidates.itertuples(index=False):
            faulty = cand.candidate == inject_fault
            result = _check_pair(cand, shape, inputs, tol, device=device, make_fn=make_fn, faulty=faulty)
            rows.append(result)
            _log_result(log, cand, shape, result)
            progress.step()
        del inputs
        if tdev == "cuda":
            torch.cuda.empty_cache()
    return _frame(rows)


#: seconds a compile-ahead child may run before it is killed (its candidate then compiles in the stage)
COMPILE_AHEAD_TIMEOUT_S = 900


def compile_ahead(
    trace: pd.DataFrame,
    candidates: pd.DataFrame,
    *,
    workers: int,
    rope_base: float,
    log: logging.Logger | None = None,
) -> list[str]:
    """On CUDA, before the checks: compile every candidate that compiles (ours, in Triton, and
    FlexAttention, through Inductor) on every distinct trace shape in ``workers`` children side by
    side that share this process's caches (:func:`headroom.families.attention.cold_compile.warm`),
    so the checks load those kernels instead of compiling them one candidate at a time. The checks
    themselves do not change. Returns the candidates sent ahead; none when ``workers`` is 0."""
    from headroom.families.attention import cold_compile
    from headroom.families.attention.runner import is_native

    log = log or logging.getLogger("headroom.families.attention.correctness")
    if type(workers) is not int or workers < 0:
        raise ValueError(f"config key 'correctness.compile_workers' must be an int >= 0, got {workers!r}")
    cands = [
        c
        for c in candidates.sort_values("candidate").itertuples(index=False)
        if not is_native(c) or str(c.backend) == "flex"
    ]
    if workers == 0 or not cands:
        return []
    cold_compile.warm(
        cold_compile.trace_shapes(trace),
        cands,
        rope_base,
        workers=workers,
        timeout_s=COMPILE_AHEAD_TIMEOUT_S,
        log=log,
    )
    return [c.candidate for c in cands]


def shape_seed(seed: int, shape_key: str) -> int:
    """The seed of a shape's inputs: the one a kernel family's gate draws for it (headroom.families.check)."""
    from headroom.families.attention.family import NAME

    return input_seed(seed, NAME, shape_key)


def _check_pair(cand, shape, inputs: ShapeInputs, tol, *, device, make_fn, faulty: bool) -> dict:
    """One (candidate, shape) check as its correctness row."""
    from headroom.families.attention.inputs import kv_lens_tensor
    from headroom.families.attention.runner import is_native, takes_lengths

    lens = kv_lens_tensor(shape, device) if takes_lengths(cand) else None
    fn = _candidate_fn(make_fn, cand, inputs.cos, inputs.sin, inputs.rotate_k, lens, faulty=faulty)
    result = judge(fn, inputs, tol=tol, native=is_native(cand), kv_lens=lens)
    return _row(cand, shape, result, tol, rotate_k=inputs.rotate_k, seed=inputs.seed)


def _candidate_fn(
    make_fn: Callable, cand: Any, cos, sin, rotate_k: bool, kv_lens, *, faulty: bool
) -> Callable:
    """The candidate's callable; one that cannot even be built fails its checks; `faulty`: corrupted."""
    try:
        if kv_lens is None:
            fn = make_fn(cand, cos, sin, rotate_k)
        else:
            fn = make_fn(cand, cos, sin, rotate_k, kv_lens=kv_lens)
    except Exception as exc:  # a candidate that cannot even be built fails its checks
        fn = _raiser(exc)
    if faulty:
        fn = corrupting(fn)
    return fn


def _frame(rows: list[dict]) -> pd.DataFrame:
    """The checks' rows as a DataFrame with COLUMNS and their integer and boolean types."""
    df = pd.DataFrame(rows, columns=COLUMNS)
    return df.astype(
        {
            "nan_count": "int64",
            "unwritten_count": "int64",
            "passed": "bool",
            "tile": "int64",
            "batch": "int64",
            "q_len": "int64",
            "kv_len": "int64",
            "input_seed": "int64",
        }
    )


def _raiser(exc: Exception) -> Callable:
    def fn(q, k, v, out=None):
        raise exc

    return fn
