"""Attention's lifecycle stage: the rows of headroom.measure.lifecycle (what every family's lifecycle
stage shares; its docstring lists the columns) for the built-in attention family.

- compile: each candidate compiled cold, in a fresh process whose TRITON_CACHE_DIR is a new empty
  directory (:mod:`headroom.families.attention.cold_compile`: forked from a server that has imported
  torch, triton and the kernels once, so no child pays their import; nothing timed changes, since a
  child always imported them before its first timed step). The child first initializes CUDA and launches
  the empty kernel (Triton's own one-time toolchain work, reported as ``toolchain_s``), then for
  every distinct trace shape makes a first call and a second call of the candidate: when the first
  call added files to the cache, that shape triggered a new specialization, and its compile time is
  first-call minus second-call seconds. ``compile_workers`` children run side by side.
- dispatch: the registry's policies fitted on attention's keys (headroom.families.attention.keying),
  timed by headroom.measure.lifecycle.dispatch_rows.
- switch: pairs of candidates with different tiles (:func:`switch_plan`), timed as
  headroom.measure.lifecycle describes.
- plan: µs to build a generation-2 candidate's plan (kernels.plan: input checks, split plan,
  scratch buffers, compiled launchers), or a FlashInfer candidate's ``plan()``, for each distinct
  trace shape, its kernels already compiled. The portfolio times the run only. Generation-1
  candidates and the other natives have no plan (skipped rows).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headroom.core import defaults
from headroom.core.progress import Progress
from headroom.families.attention import inputs, portfolio
from headroom.families.attention.keying import ATTENTION
from headroom.measure import timing
from headroom.measure.lifecycle import (
    _alternating,
    _row,
    dispatch_rows,
    frame,
    settings,
    switch_draw,
    work_between,
)

PROJECT_ROOT = Path(__file__).resolve().parents[3]


# -- switching ------------------------------------------------------------------------------------


def switch_plan(
    trace: pd.DataFrame, candidates: pd.DataFrame, cfg: dict[str, Any]
) -> list[tuple[Any, Any, Any]]:
    """(trace row, candidate A, candidate B) triples: ``switch_invocations`` evenly spaced
    invocations, ``switch_pairs`` seeded pairs of candidates with different tiles on each."""
    cands = list(candidates.sort_values("candidate").itertuples(index=False))
    return switch_draw(
        trace, [(a, b) for i, a in enumerate(cands) for b in cands[i + 1 :] if a.tile != b.tile], cfg
    )


def switch_rows(trace, candidates, cfg, device, rope_base, l2, log) -> list[dict]:
    plan = switch_plan(trace, candidates, cfg)
    if not plan:
        return []
    reps = cfg["switch_reps"] + cfg["switch_reps"] % 2  # even: as many A as B calls
    graph_calls = cfg["graph_calls"] + cfg["graph_calls"] % 2
    harness = timing.Harness(device, warmup=cfg["warmup_reps"], reps=reps, graph_calls=graph_calls)
    tables = inputs.RopeTables(int(trace["kv_len"].max()), rope_base, device)
    work_bytes = int(cfg["switch_work_l2"] * l2)
    between = work_between(work_bytes, device)
    rows = []
    progress = Progress(log, "lifecycle switch", len(plan), "pairs")
    for inv, a, b in plan:
        cos, sin = tables.get(inv)
        n_sets = timing.buffer_sets(inputs.set_bytes(inv), l2)  # the portfolio's default rotation
        sets = inputs.input_sets(inv, n_sets, device, seed=cfg["seed"] + int(inv.invocation))
        rotate_k, kv_lens = inputs.rotate_k(inv), inputs.kv_lens_tensor(inv, device)
        fa = between(portfolio.candidate_fn(a, cos, sin, rotate_k, kv_lens))
        fb = between(portfolio.candidate_fn(b, cos, sin, rotate_k, kv_lens))
        for mode in harness.modes:
            med_a = float(np.median(harness.time(mode, fa, sets).samples_us))
            med_b = float(np.median(harness.time(mode, fb, sets).samples_us))
            alt = harness.time(mode, _alternating(fa, fb), sets)
            med_alt = float(np.median(alt.samples_us))
            same = 0.5 * (med_a + med_b)
            rows.append(
                _row(
                    "switch",
                    candidate=a.candidate,
                    candidate_b=b.candidate,
                    mode=mode,
                    invocation=int(inv.invocation),
                    shape_key=inv.shape_key,
                    value=med_alt - same,
                    unit="us",
                    alternating_us=med_alt,
                    same_us=same,
                    penalty_pct=100.0 * (med_alt - same) / same,
                    work_bytes=work_bytes,
                    n=3 * alt.timed_calls,
                    device=device,
                )
            )
        log.info(
            "switch %s <-> %s on invocation %d: %s",
            a.candidate,
            b.candidate,
            inv.invocation,
            ", ".join(f"{r['mode']} {r['value']:+.3f} us" for r in rows[-len(harness.modes) :]),
        )
        progress.step()
    return rows


# -- plan build -----------------------------------------------------------------------------------


def _median_build_us(build: Callable, reps: int, sync: Callable) -> float:
    samples = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter_ns()
        build()
        samples.append((time.perf_counter_ns() - t0) / 1e3)
    return float(np.median(samples))


def plan_rows(trace, candidates, cfg, device, rope_base, log) -> list[dict]:
    """One row per (candidate with a plan: generations 2 and 3, FlashInfer; distinct trace shape):
    the median µs of building its plan warm (one build first compiles what the shape needs). Other candidates: one skipped row.
    One shape's inputs at a time: a long-context trace's do not fit in memory together (the Mooncake
    study's 30 decode shapes hold 5 GB each)."""
    import torch

    from headroom.families.attention.runner import build_plan, has_plan, is_native
    from headroom.families.attention.runner import tables as candidate_tables

    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    shapes = list(trace.sort_values("invocation").drop_duplicates("shape_key").itertuples(index=False))
    cos, sin = candidate_tables(
        int(trace["kv_len"].max()),
        int(shapes[0].head_dim),
        str(shapes[0].dtype),
        rope_base,
        "cuda" if device == "cuda" else "cpu",
    )
    ordered = list(candidates.sort_values("candidate").itertuples(index=False))
    ours = [c for c in ordered if has_plan(c)]
    built = {c.candidate: [] for c in ours}
    for inv in shapes:
        q, k, v = inputs.input_sets(inv, 1, device, seed=0)[0]
        lens = inputs.kv_lens_tensor(inv, device)
        for cand in ours:
            build = functools.partial(build_plan, cand, cos, sin, inputs.rotate_k(inv), q, k, v, kv_lens=lens)
            build()  # compiles the kernels this shape needs: the figure is the warm build
            built[cand.candidate].append((inv.shape_key, _median_build_us(build, cfg["plan_reps"], sync)))
            del build  # it holds the inputs too
        del q, k, v, lens
        if device == "cuda":
            torch.cuda.empty_cache()
    rows = []
    for cand in ordered:
        common = {"candidate": cand.candidate, "unit": "us", "device": device}
        if cand.candidate not in built:
            reason = "native candidate: no plan of ours" if is_native(cand) else "generation 1: no plan"
            rows.append(_row("plan", value=math.nan, status="skipped", reason=reason, **common))
            continue
        for key, us in built[cand.candidate]:
            rows.append(_row("plan", value=us, n=cfg["plan_reps"], shape_key=key, **common))
        log.info(
            "plan build %s: median %.1f us over %d shapes",
            cand.candidate,
            np.median([us for _, us in built[cand.candidate]]),
            len(shapes),
        )
    return rows


# -- cold compile ---------------------------------------------------------------------------------


def _compile_one(
    cand: Any, shapes: list[dict], rope_base: float, timeout_s: int, *, server: Any, log=None
) -> dict:
    """Run :func:`headroom.families.attention.cold_compile.compile_child` for one candidate in a fresh
    process with an empty cache dir: forked by ``server`` (a :class:`cold_compile.Server`, no import
    time), or, should that child fail other than by its timeout, started from scratch (``_spawned``)."""
    from headroom.families.attention.cold_compile import spec as child_spec

    spec = child_spec(cand, shapes, rope_base)
    with tempfile.TemporaryDirectory(prefix="headroom-triton-cold-") as cache:
        result = server.compile(spec, cache, timeout_s=timeout_s)
    if "error" not in result or result.get("timed_out"):
        return result
    (log or logging.getLogger(__name__)).warning(
        "cold compile of %s in a forked child failed (%s); again in a freshly started process",
        spec["candidate"]["candidate"],
        result["error"][-300:],
    )
    return _spawned(spec, timeout_s, interpret=server.interpret)


def _spawned(spec: dict[str, Any], timeout_s: int, *, interpret: bool) -> dict:
    """compile_child in a freshly started interpreter
    (``python -m headroom.families.attention.cold_compile``)."""
    with tempfile.TemporaryDirectory(prefix="headroom-triton-cold-") as cache:
        env = {**os.environ, "TRITON_CACHE_DIR": cache}
        if interpret:
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)
        env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "headroom.families.attention.cold_compile"],
                input=json.dumps(spec),
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                cwd=PROJECT_ROOT,
            )
        except subprocess.TimeoutExpired:
            return {"error": f"cold-compile child timed out after {timeout_s} s"}
    if proc.returncode != 0:
        return {"error": f"cold-compile child exited {proc.returncode}: {proc.stderr.strip()[-800:]}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compile_rows(trace, candidates, cfg, device, rope_base, log) -> list[dict]:
    """One compile row and one cache row per candidate (skipped without CUDA: the interpreter
    compiles nothing and caches nothing)."""
    cands = list(candidates.sort_values("candidate").itertuples(index=False))
    if device != "cuda":
        reason = "no CUDA device: the Triton interpreter compiles nothing and writes no cache"
        return [
            _row(
                kind,
                candidate=c.candidate,
                value=math.nan,
                unit=unit,
                status="skipped",
                reason=reason,
                device=device,
            )
            for c in cands
            for kind, unit in _COMPILE_KINDS
        ]
    # imports the kernels: only once the stage set the mode
    from headroom.families.attention import cold_compile

    shapes = cold_compile.trace_shapes(trace)
    workers = min(cfg["compile_workers"], len(cands))
    progress = Progress(log, "lifecycle cold compile", len(cands), "candidates")

    with cold_compile.Server(interpret=False, project_root=PROJECT_ROOT) as server:

        def compile_one(cand: Any) -> dict[str, Any]:
            result = _compile_one(cand, shapes, rope_base, cfg["compile_timeout_s"], server=server, log=log)
            progress.step()
            return result

        with ThreadPoolExecutor(max_workers=workers) as pool:
            results = list(pool.map(compile_one, cands))
    rows = []
    for cand, res in zip(cands, results, strict=True):
        rows += _compile_result_rows(cand, res, workers, device, log)
    return rows


_COMPILE_KINDS = (("compile", "s"), ("cache", "bytes"))


def _compile_result_rows(cand: Any, res: dict[str, Any], workers: int, device: str, log) -> list[dict]:
    """The compile row and the cache row of one candidate's cold compile (or two failed rows)."""
    common = {"candidate": cand.candidate, "compile_workers": workers, "device": device}
    if "error" in res:
        log.error("cold compile of %s failed: %s", cand.candidate, res["error"])
        return [
            _row(kind, value=math.nan, unit=unit, status="failed", reason=res["error"], **common)
            for kind, unit in _COMPILE_KINDS
        ]
    compiled = [s for s in res["shapes"] if s["new_bytes"] > 0]
    spec_s = [max(0.0, s["first_s"] - s["second_s"]) for s in compiled]
    total = float(sum(spec_s))
    detail = {"compile_s": total, "cache_bytes": int(res["cache_bytes"]), "n": len(res["shapes"]), **common}
    log.info(
        "cold compile %s: %d specializations, %.2f s, %d cache bytes (toolchain %.2f s)",
        cand.candidate,
        len(compiled),
        total,
        res["cache_bytes"],
        res["toolchain_s"],
    )
    compile_row = _row(
        "compile",
        value=total,
        unit="s",
        specializations=len(compiled),
        shape_key="; ".join(s["shape_key"] for s in compiled),
        specialization_s="; ".join(f"{x:.4f}" for x in spec_s),
        toolchain_s=res["toolchain_s"],
        first_call_s=float(sum(s["first_s"] for s in res["shapes"])),
        **detail,
    )
    return [compile_row, _row("cache", value=float(res["cache_bytes"]), unit="bytes", **detail)]


# -- the stage ------------------------------------------------------------------------------------


def run(
    trace: pd.DataFrame,
    candidates: pd.DataFrame,
    section: dict[str, Any],
    *,
    device: str,
    policies: dict[str, Any],
    rope_base: float | None = None,
    log: logging.Logger | None = None,
) -> pd.DataFrame:
    """All lifecycle rows for the admitted ``candidates`` on ``trace`` (see the module docstring);
    ``policies``: train_fraction, clusters and seed of config ``policies`` (the dispatch fits)."""
    rope_base = defaults.value("partition", "rope_base") if rope_base is None else rope_base
    log = log or logging.getLogger("headroom.families.attention.lifecycle")
    cfg = settings(section)
    if device not in ("cuda", "interpret"):
        raise ValueError(f"device must be 'cuda' or 'interpret', got {device!r}")
    inputs.check_trace(trace)
    if candidates.empty:
        raise ValueError("no admitted candidates: every candidate failed correctness")
    missing = sorted({"train_fraction", "clusters", "seed"} - set(policies))
    if missing:
        raise ValueError(
            f"policies: missing key(s) {missing}; the dispatch timing fits as the policies stage does"
        )
    rows: list[dict] = []
    for name, step in (
        ("compile", lambda: compile_rows(trace, candidates, cfg, device, rope_base, log)),
        (
            "dispatch",
            lambda: dispatch_rows(trace, sorted(candidates["candidate"]), cfg, device, policies, ATTENTION),
        ),
        ("switch", lambda: switch_rows(trace, candidates, cfg, device, rope_base, timing.l2_bytes(), log)),
        ("plan", lambda: plan_rows(trace, candidates, cfg, device, rope_base, log)),
    ):
        t0 = time.perf_counter()
        rows.extend(step())
        log.info("lifecycle %s: %.2f s wall", name, time.perf_counter() - t0)
    out = frame(rows)
    for row in out[out["kind"] == "dispatch"].itertuples(index=False):
        log.info("dispatch %-12s %8.1f ns per lookup", row.policy, row.value)
    return out
