"""lifecycle: what owning a dispatching portfolio costs, measured rather than assumed.

- compile: each candidate compiled cold, in a fresh process whose TRITON_CACHE_DIR is a new empty
  directory (:mod:`headroom.measure.cold_compile`: forked from a server that has imported torch,
  triton and the kernels once, so no child pays their import; nothing timed changes, since a
  child always imported them before its first timed step). The child first initializes CUDA and launches
  the empty kernel (Triton's own one-time toolchain work, reported as ``toolchain_s``), then for
  every distinct trace shape makes a first call and a second call of the candidate: when the first
  call added files to the cache, that shape triggered a new specialization, and its compile time is
  first-call minus second-call seconds. ``compile_workers`` children run side by side.
- cache: bytes the candidate's compiled kernels (and their launchers) occupy in that cache dir.
- dispatch: ns per ``lookup(shape)`` of each policy of the registry (``headroom.policies``),
  fitted as the ``policies`` stage fits the policy it scores (on the trace's train part, with
  config ``policies``' train_fraction, clusters and seed), asked for the test part's shapes, net of
  calling a function that does nothing (clipped at 0). So the dispatch cost charged to a policy is
  the cost of the very object that is scored; computed on every call, it is an upper bound, since a
  server that memoizes the answer per exact shape pays the exact-key figure after first sight.
- switch: on a few invocations, per-call time of an A,B,A,B,... sequence minus the mean of A,A,...
  and B,B,... medians, in eager and (with CUDA) graph mode, with ``switch_work_l2`` L2s written
  between any two calls of all three sequences (:func:`work_between`).
- plan: µs to build a generation-2 candidate's plan (kernels.plan: input checks, split plan,
  scratch buffers, compiled launchers) for each distinct trace shape, its kernels already
  compiled: what a serving engine pays once per batch shape and spreads over the layers of a
  forward pass (the analysis charges it per call divided by ``policies.layers_per_forward``).
  The portfolio times Plan.run only. Generation-1 and native candidates have no plan (skipped rows).

Long format, one row per figure; columns:
    kind ('compile' | 'cache' | 'dispatch' | 'switch' | 'plan'), candidate (compile, cache, plan,
    switch: the candidate, or candidate A), candidate_b (switch: candidate B), policy (dispatch), mode
    (switch: eager | graph), invocation (switch; -1 otherwise), shape_key (switch: the invocation's;
    compile: the shapes that triggered specializations, '; '-joined; plan: the shape), value, unit
    ('s' compile, 'bytes' cache, 'ns' dispatch, 'us' switch and plan), compile_s (compile and cache rows: the candidate's
    total cold compile seconds), cache_bytes (compile and cache rows: its cache bytes),
    specializations (compile: kernels compiled), specialization_s ('; '-joined seconds, same order
    as shape_key), toolchain_s (compile), first_call_s (compile: summed first calls), alternating_us,
    same_us, penalty_pct, work_bytes (switch: bytes written between two calls), raw_ns, baseline_ns (dispatch), n (calls or lookups behind the
    figure), compile_workers, status ('ok' | 'skipped' | 'failed'), reason, device.
Exactly one compile and one cache row per candidate, so ``candidate, compile_s, cache_bytes`` of
either kind is the per-candidate table of the lifecycle contract (docs/architecture.md).
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

from headroom import policies
from headroom.core import contracts, defaults
from headroom.core import settings as stage_settings
from headroom.core.progress import Progress
from headroom.measure import inputs, portfolio, timing
from headroom.policies.fit import Train
from headroom.policies.shapes import ATTENTION, Keying

PROJECT_ROOT = Path(__file__).resolve().parents[2]
KINDS = ("compile", "cache", "dispatch", "switch", "plan")
DISPATCH_POLICIES = tuple(policies.REGISTRY)  # every policy the analysis scores, oracle aside
COLUMNS = list(contracts.LIFECYCLE.names)


def settings(section: dict[str, Any] | None) -> dict[str, Any]:
    cfg = stage_settings.checked("lifecycle", section, defaults.int_minimums("lifecycle"))
    work = cfg["switch_work_l2"]
    if isinstance(work, bool) or not isinstance(work, int | float) or not 0 <= work <= 16:
        raise ValueError(f"lifecycle.switch_work_l2 must be a number in [0, 16], got {work!r}")
    return cfg


def _row(kind: str, **fields: Any) -> dict[str, Any]:
    row = dict.fromkeys(COLUMNS)
    row.update(
        kind=kind,
        candidate="",
        candidate_b="",
        policy="",
        mode="",
        invocation=-1,
        shape_key="",
        status="ok",
        reason="",
    )
    row.update(fields)
    return row


# -- dispatch -------------------------------------------------------------------------------------


def fitted_policies(
    trace: pd.DataFrame, candidates: list[str], *, train_fraction: float, clusters: int, seed: int,
    keying: Keying = ATTENTION,
) -> dict[str, Any]:  # fmt: skip
    """Every registry policy, fitted as the ``policies`` stage fits the one it scores: on the trace's
    train part (its first floor(n * train_fraction) invocations), with the same k-means settings.

    No latencies exist when this stage runs (it runs beside the portfolio), so the train matrix holds
    seeded synthetic latencies: what a lookup costs depends on its mechanism, the keys seen in train
    and the centroids fitted on the train shapes, not on which candidate a key maps to."""
    if not candidates:
        raise ValueError("candidates must not be empty")
    if not 0.0 < float(train_fraction) < 1.0:
        raise ValueError(f"policies.train_fraction must be in (0, 1), got {train_fraction!r}")
    ordered = trace.sort_values("invocation").reset_index(drop=True)
    n_train = max(1, math.floor(len(ordered) * float(train_fraction)))
    rng = np.random.default_rng(seed)
    us = rng.lognormal(0.0, 0.1, size=(n_train, len(candidates)))
    train = Train(ordered.iloc[:n_train], us, tuple(candidates), clusters=clusters, seed=seed)
    fitted = {}
    for name in DISPATCH_POLICIES:
        policy = policies.make(name, keying)
        if name == "random":
            policy.seed = seed
        fitted[name] = policy.fit(train)
    return fitted


def lookup_shapes(trace: pd.DataFrame, train_fraction: float) -> list[dict]:
    """The test part's shapes in trace order (what the scored policies are asked), as lookup() takes them."""
    ordered = trace.sort_values("invocation").reset_index(drop=True)
    n_train = max(1, math.floor(len(ordered) * float(train_fraction)))
    rows = ordered.iloc[n_train:] if n_train < len(ordered) else ordered
    return rows.to_dict("records")


def _loop_ns(fn: Callable, keys: list) -> int:
    t0 = time.perf_counter_ns()
    for key in keys:
        fn(key)
    return time.perf_counter_ns() - t0


def dispatch_rows(
    trace: pd.DataFrame, candidates: list[str], cfg: dict[str, Any], device: str, fit: dict[str, Any],
    keying: Keying = ATTENTION,
) -> list[dict]:  # fmt: skip
    """ns per lookup of each fitted policy (median of ``dispatch_repeats`` loops of ``dispatch_lookups``
    over the test part's shapes); ``fit``: train_fraction, clusters and seed of config ``policies``;
    ``keying``: the family's keys (headroom.policies.shapes)."""
    fitted = fitted_policies(
        trace, candidates, train_fraction=fit["train_fraction"], clusters=fit["clusters"], seed=fit["seed"],
        keying=keying,
    )  # fmt: skip
    fns = {name: policy.lookup for name, policy in fitted.items()}
    shapes = lookup_shapes(trace, fit["train_fraction"])
    n = cfg["dispatch_lookups"]
    keys = (shapes * math.ceil(n / len(shapes)))[:n]
    nothing = lambda s: s  # noqa: E731
    rows = []
    for policy in DISPATCH_POLICIES:
        fn = fns[policy]
        raw, base = [], []
        for _ in range(cfg["dispatch_repeats"]):  # interleaved, so drift hits both alike
            base.append(_loop_ns(nothing, keys) / n)
            raw.append(_loop_ns(fn, keys) / n)
        raw_ns, base_ns = float(np.median(raw)), float(np.median(base))
        rows.append(
            _row(
                "dispatch",
                policy=policy,
                value=max(0.0, raw_ns - base_ns),
                unit="ns",
                raw_ns=raw_ns,
                baseline_ns=base_ns,
                n=n * cfg["dispatch_repeats"],
                device=device,
            )
        )
    return rows


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


def switch_draw(trace: pd.DataFrame, pairs: list[tuple[Any, Any]], cfg: dict[str, Any]) -> list[tuple]:
    """(trace row, *pair) on ``switch_invocations`` evenly spaced invocations, ``switch_pairs`` of the
    ``pairs`` drawn on each (seeded by ``cfg['seed']``); [] when either count is 0 or no pair exists."""
    ordered = list(trace.sort_values("invocation").itertuples(index=False))
    if not pairs or cfg["switch_invocations"] == 0 or cfg["switch_pairs"] == 0:
        return []
    picks = np.unique(
        np.linspace(0, len(ordered) - 1, min(cfg["switch_invocations"], len(ordered))).round().astype(int)
    )
    rng = np.random.default_rng(cfg["seed"])
    plan = []
    for p in picks:
        for j in rng.choice(len(pairs), min(cfg["switch_pairs"], len(pairs)), replace=False):
            plan.append((ordered[p], *pairs[j]))
    return plan


def _alternating(fa: Callable, fb: Callable) -> Callable:
    state = [0]

    def fn(*args):
        state[0] ^= 1
        return (fa if state[0] else fb)(*args)

    return fn


def work_between(nbytes: int, device: str) -> Callable[[Callable], Callable]:
    """What runs between two attention calls while a switch is timed: a write of ``nbytes`` (the
    rest of a layer's traffic, which leaves the L2 holding none of the previous call's data), inside
    every timed call of all three sequences so that it cancels in their difference. 0: back to back."""
    if nbytes <= 0:
        return lambda f: f
    write = timing.buffer_write(nbytes, device)

    def wrap(f: Callable) -> Callable:
        def fn(*args):
            write()
            return f(*args)

        return fn

    wrap.buffer = write.buffer  # what it writes (tests look)
    return wrap


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
    """One row per (generation-2 candidate, distinct trace shape): the median µs of building its
    plan warm (one build first compiles what the shape needs). Other candidates: one skipped row.
    One shape's inputs at a time: a long-context trace's do not fit in memory together (the Mooncake
    study's 30 decode shapes hold 5 GB each)."""
    import torch

    from headroom.measure.candidates import placement
    from headroom.measure.runner import build_plan, is_native
    from headroom.measure.runner import tables as candidate_tables

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
    ours = [c for c in ordered if not (is_native(c) or placement(c)[1] == 1)]
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


def _spec(cand: Any, shapes: list[dict], rope_base: float) -> dict[str, Any]:
    return {
        "candidate": {k: (v.item() if hasattr(v, "item") else v) for k, v in cand._asdict().items()},
        "shapes": shapes,
        "rope_base": rope_base,
    }


def _compile_one(
    cand: Any, shapes: list[dict], rope_base: float, timeout_s: int, *, server: Any, log=None
) -> dict:
    """Run :func:`headroom.measure.cold_compile.compile_child` for one candidate in a fresh process
    with an empty cache dir: forked by ``server`` (a :class:`cold_compile.Server`, no import time),
    or, should that child fail other than by its timeout, started from scratch (``_spawned``)."""
    spec = _spec(cand, shapes, rope_base)
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
    """compile_child in a freshly started interpreter (``python -m headroom.measure.cold_compile``)."""
    with tempfile.TemporaryDirectory(prefix="headroom-triton-cold-") as cache:
        env = {**os.environ, "TRITON_CACHE_DIR": cache}
        if interpret:
            env["TRITON_INTERPRET"] = "1"
        else:
            env.pop("TRITON_INTERPRET", None)
        env["PYTHONPATH"] = os.pathsep.join([str(PROJECT_ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "headroom.measure.cold_compile"],
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
    first = trace.sort_values("invocation").drop_duplicates("shape_key")
    shapes = first[list(contracts.TRACE_COLUMNS)].to_dict("records")
    shapes = [{k: (v.item() if hasattr(v, "item") else v) for k, v in s.items()} for s in shapes]
    workers = min(cfg["compile_workers"], len(cands))
    progress = Progress(log, "lifecycle cold compile", len(cands), "candidates")

    from headroom.measure import cold_compile  # imports the kernels: only once the stage set the mode

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


def frame(rows: list[dict]) -> pd.DataFrame:
    """Lifecycle rows as the artifact's table (COLUMNS, typed)."""
    out = pd.DataFrame.from_records(rows, columns=COLUMNS)
    for col in (
        "value",
        "compile_s",
        "cache_bytes",
        "toolchain_s",
        "first_call_s",
        "alternating_us",
        "same_us",
        "penalty_pct",
        "raw_ns",
        "baseline_ns",
    ):
        out[col] = out[col].astype("float64")
    for col in ("specializations", "n", "compile_workers"):
        out[col] = out[col].astype("Int64")
    out["invocation"] = out["invocation"].astype("int64")
    for col in ("specialization_s",):
        out[col] = out[col].fillna("").astype(str)
    return out


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
    log = log or logging.getLogger("headroom.measure.lifecycle")
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
        ("dispatch", lambda: dispatch_rows(trace, sorted(candidates["candidate"]), cfg, device, policies)),
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
