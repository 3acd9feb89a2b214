"""lifecycle: what owning a dispatching portfolio costs, measured rather than assumed; here what
every family's lifecycle stage shares (its settings and rows, the dispatch cost of the fitted
policies, the switching penalty's draw and timing). The built-in attention family's stage is
headroom.families.attention.lifecycle (its cold compile, switch pairs and plan builds); a kernel
family's, headroom.measure.family_runs.lifecycle.

- compile: each candidate compiled cold, in a fresh process whose TRITON_CACHE_DIR is a new empty
  directory: the seconds its first calls spent compiling, apart from Triton's own one-time
  toolchain work (``toolchain_s``). ``compile_workers`` children run side by side.
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
- plan: µs to build a candidate's plan for each distinct trace shape, its kernels already
  compiled: what a serving engine pays once per batch shape and spreads over the layers of a
  forward pass (the analysis charges it per call divided by ``policies.layers_per_forward``).

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

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd

from headroom import policies
from headroom.core import contracts, defaults
from headroom.core import settings as stage_settings
from headroom.measure import timing
from headroom.policies.fit import Train
from headroom.policies.shapes import Keying

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
    keying: Keying,
) -> dict[str, Any]:  # fmt: skip
    """Every registry policy (and the family's config table where ``keying`` has one), fitted as the
    ``policies`` stage fits the one it scores: on the trace's train part (its first floor(n *
    train_fraction) invocations), with the same k-means settings, on the family's keys (``keying``).

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
    for name in (*DISPATCH_POLICIES, *policies.table_policies(keying)):
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
    keying: Keying,
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
    for policy, fn in fns.items():
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

    return _keeps_prepare(fn, fa, fb)


def _keeps_prepare(fn: Callable, *inner: Callable) -> Callable:
    """fn with the inner callables' untimed ``prepare`` (timing.Harness.time), if any has one."""
    prepares = [f.prepare for f in inner if hasattr(f, "prepare")]
    if prepares:
        fn.prepare = lambda sets: [p(sets) for p in prepares]
    return fn


def work_between(nbytes: int, device: str) -> Callable[[Callable], Callable]:
    """What runs between two kernel calls while a switch is timed: a write of ``nbytes`` (the
    rest of a layer's traffic, which leaves the L2 holding none of the previous call's data), inside
    every timed call of all three sequences so that it cancels in their difference. 0: back to back."""
    if nbytes <= 0:
        return lambda f: f
    write = timing.buffer_write(nbytes, device)

    def wrap(f: Callable) -> Callable:
        def fn(*args):
            write()
            return f(*args)

        return _keeps_prepare(fn, f)

    wrap.buffer = write.buffer  # what it writes (tests look)
    return wrap


# -- the stage's table ----------------------------------------------------------------------------


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
