"""A family checked against its own float64 reference on the shapes a study's trace gives it: the
correctness gate of a study, runnable on its own (`headroom family check`), on the GPU or the CPU
interpreter.

Per distinct shape: one input set (seeded by the shape), one reference; per candidate: `supports`
(False: `unsupported`), `prepare`, then the prepared function called twice on the same inputs, each
output compared with the reference as the attention gate compares (rel_err = ||out - ref|| /
||ref||, max_abs_err; NaNs fail) at the family's tolerance for the output's dtype. The second call
catches a function that is not repeatable (an accumulating kernel whose buffer is not reset), which
the timing loops and graph replay call again and again.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np
import pandas as pd

from headroom.families.contract import Candidate, FamilyError, call, check_candidates, check_tolerance, label
from headroom.families.expand import distinct_shapes
from headroom.measure.correctness import input_seed, problems

COLUMNS = (
    "candidate", "shape_key", "calls", "status", "rel_err", "max_abs_err", "nan_count", "dtype",
    "tolerance", "abs_tolerance", "reason", "seconds",
)  # fmt: skip
STATUSES = ("passed", "failed", "unsupported", "error")
#: Exceptions that say a candidate cannot run a shape (Triton: a config needs more shared memory or
#: registers than the GPU has), recorded `unsupported` as the autotuner skips such configs.
UNSUPPORTED_ERRORS = ("OutOfResources",)


def arrays(x: Any, what: str) -> list[Any]:
    """An output or a reference (a tensor, an array, a number, or a tuple/list of them) as float64
    arrays: a torch tensor stays a tensor on its device (a GPU's output is compared there, not
    copied to the host), anything else becomes a numpy array."""
    if isinstance(x, tuple | list):
        return [a for item in x for a in arrays(item, what)]
    if hasattr(x, "detach"):  # a torch tensor
        return [x.detach().double()]
    if isinstance(x, np.ndarray | int | float | np.number):
        return [np.asarray(x, dtype=np.float64)]
    raise FamilyError(
        f"{what} is a {type(x).__name__}: a tensor, an array, a number or a list of them is expected"
    )


def dtype_of(x: Any) -> str:
    first = x[0] if isinstance(x, tuple | list) and x else x
    return str(getattr(first, "dtype", "float64")).removeprefix("torch.")


def _host(a: Any) -> np.ndarray:
    return a.cpu().numpy() if hasattr(a, "cpu") else a


def _errors(got: Any, ref: Any) -> tuple[int, float, float, float]:
    """(NaN count, sum of squared errors, max |error|, sum of squared reference) of one output
    against its reference, a NaN element an infinite error; on the output's device when both are
    tensors on one device, else on the host."""
    if hasattr(got, "detach") and hasattr(ref, "detach") and got.device == ref.device:  # torch, one device
        import torch

        diff = torch.nan_to_num(got - ref, nan=math.inf).abs()
        stats = (torch.isnan(got).sum(), diff.square().sum(), diff.max() if diff.numel() else diff.sum(),
                 ref.square().sum())  # fmt: skip
        nan, sq, mx, ref_sq = (float(v) for v in torch.stack([v.double() for v in stats]).tolist())
        return int(nan), sq, mx, ref_sq
    got, ref = _host(got), _host(ref)
    diff = np.abs(np.nan_to_num(got - ref, nan=np.inf))
    return (
        int(np.isnan(got).sum()),
        float(np.square(diff).sum()),
        float(diff.max(initial=0.0)),
        float(np.square(ref).sum()),
    )


def compare(out: Any, ref: list[Any], tol: tuple[float, float], who: str) -> dict[str, Any]:
    got = arrays(out, f"{who}'s output")
    if len(got) != len(ref) or any(tuple(g.shape) != tuple(r.shape) for g, r in zip(got, ref, strict=True)):
        shapes = [tuple(g.shape) for g in got], [tuple(r.shape) for r in ref]
        return {"status": "failed", "reason": f"output shapes {shapes[0]} != reference {shapes[1]}"}
    parts = [_errors(g, r) for g, r in zip(got, ref, strict=True)]
    nan = sum(p[0] for p in parts)
    max_abs = max((p[2] for p in parts), default=0.0)
    norm = math.sqrt(sum(p[3] for p in parts))
    rel = math.sqrt(sum(p[1] for p in parts)) / norm if norm > 0 else max_abs
    found = problems(rel, max_abs, nan, 0, tol)
    return {"status": "failed" if found else "passed", "reason": "; ".join(found), "rel_err": rel,
            "max_abs_err": max_abs, "nan_count": nan}  # fmt: skip


def family_device(device: str) -> str:
    """The device a family is given: "cuda", or "cpu" for anything else (the interpreter)."""
    return "cuda" if device == "cuda" else "cpu"


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _unsupported(family: Any, cand: Candidate, exc: BaseException) -> str | None:
    """Why ``exc`` means ``cand`` cannot run the shape (recorded `unsupported`, not an error), or None:
    the family's optional ``unsupported(candidate, exc)`` (attention: a native backend with no kernel
    for the shape), else Triton's UNSUPPORTED_ERRORS."""
    hook = getattr(family, "unsupported", None)
    if callable(hook):
        why = hook(cand, exc)
        if why is not None:
            return str(why)
    return _raised(exc) if type(exc).__name__ in UNSUPPORTED_ERRORS else None


def _raised(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc)[:300]}"


def check_one(
    family: Any, cand: Candidate, shape: dict, inputs: Any, ref: list, device: str
) -> dict[str, Any]:
    """One candidate on one shape (module docstring): the COLUMNS it measures."""
    row: dict[str, Any] = {"status": "error", "reason": "", "rel_err": math.nan, "max_abs_err": math.nan,
                           "nan_count": -1, "dtype": "", "tolerance": math.nan, "abs_tolerance": math.nan}  # fmt: skip
    t0 = time.perf_counter()
    try:
        supported = call(family, "supports", cand, shape)
        if not isinstance(supported, bool):
            raise FamilyError(f"{label(family)}: supports() must return True or False, got {supported!r}")
        if not supported:
            return {**row, "status": "unsupported", "reason": "supports() is False", "seconds": 0.0}
        fn = call(family, "prepare", cand, shape, inputs)
        if not callable(fn):
            raise FamilyError(f"{label(family)}: prepare() must return fn(inputs), got {fn!r:.80}")
        outs = []
        for _ in range(2):
            outs.append(fn(inputs))
            _sync(device)
        dtype = dtype_of(outs[0])
        tol = check_tolerance(family, dtype, call(family, "tolerance", dtype))
        first = compare(outs[0], ref, tol, cand.id)
        second = compare(outs[1], ref, tol, cand.id)
        if first["status"] == "passed" and second["status"] != "passed":
            second["reason"] = f"not repeatable: a second call on the same inputs: {second['reason']}"
        worst = first if first["status"] != "passed" else second
        row.update(worst, dtype=dtype, tolerance=tol[0], abs_tolerance=tol[1])
    except Exception as exc:  # a candidate that raises is an error of that candidate, not of the check
        why = _unsupported(family, cand, exc)
        row.update(
            status="error" if why is None else "unsupported",
            reason=why or _raised(exc),
        )
    row["seconds"] = time.perf_counter() - t0
    return row


def check(
    family: Any, invocations: pd.DataFrame, *, device: str, seed: int = 0, max_shapes: int | None = None
) -> pd.DataFrame:
    """Every candidate on every distinct shape of the invocations (the `max_shapes` most called when
    given): COLUMNS. The family's own failures (inputs, reference) raise FamilyError."""
    import json

    device = family_device(device)
    cands = check_candidates(family, call(family, "candidates"))
    shapes = distinct_shapes(invocations).sort_values("calls", ascending=False, kind="stable")
    if max_shapes is not None:
        shapes = shapes.head(max_shapes)
    rows = []
    for s in shapes.itertuples(index=False):
        shape = json.loads(s.shape)
        inputs = call(family, "inputs", shape, seed=input_seed(seed, family.name, s.shape_key), device=device)
        ref = arrays(call(family, "reference", shape, inputs), f"{label(family)}: reference({s.shape_key})")
        for cand in cands:
            rows.append({"candidate": cand.id, "shape_key": s.shape_key, "calls": int(s.calls),
                         **check_one(family, cand, shape, inputs, ref, device)})  # fmt: skip
    return pd.DataFrame(rows, columns=list(COLUMNS))


def summary(results: pd.DataFrame) -> pd.DataFrame:
    """Per candidate: shapes passed / failed / unsupported / error."""
    table = results.pivot_table(
        index="candidate", columns="status", values="shape_key", aggfunc="count", fill_value=0
    )
    table = table.reindex(columns=list(STATUSES), fill_value=0)
    order = list(dict.fromkeys(results["candidate"]))
    return table.reindex(order).reset_index()


def gate_table(results: pd.DataFrame) -> pd.DataFrame:
    """The correctness artifact's table of a family's check (the contract's columns beside COLUMNS):
    ``passed`` for a passing check; an unsupported shape is recorded `unsupported` (not passed,
    excluded from timing as attention's are); ``unwritten_count`` is -1: a family's output is
    allocated by its own ``inputs`` (poison it there: an unwritten NaN counts in nan_count)."""
    out = results.copy()
    out["passed"] = out["status"] == "passed"
    out["unwritten_count"] = -1
    return out
