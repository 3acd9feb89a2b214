"""Attention's portfolio run r: every admitted candidate timed on every trace invocation, in one
fresh process (what every family's run shares: headroom.measure.portfolio).

For each invocation in chronological order: build inputs from the trace row (random normal data,
never zeros) in enough buffer sets to keep the working set honest (:func:`headroom.measure.timing.buffer_sets`),
draw the candidate order (:func:`candidate_order`), and time each candidate in each mode with
:class:`headroom.measure.timing.Harness`. The harness floor (an empty Triton kernel timed the same way in
each mode) is measured at the start of the run and carried as columns, never as a candidate.

Rows (``portfolio/run-{run}.parquet``), one per (mode, invocation, candidate):
    run, pid, started_at (ISO 8601 UTC), mode, invocation, shape_key, phase, candidate, tile, fused,
    backend, position (0-based place in the invocation's timing order), median_us, mean_us, p10_us, p90_us,
    std_us, rel_std_pct, reps (samples in this row), rse_pct (the median's relative standard error,
    :func:`headroom.measure.timing.rse_pct`), stop_reason (why the sampler stopped: fixed | target |
    count_cap | time_cap, config `portfolio.sampler`), cell_wall_s (seconds of the cell's timing
    loop), timed_calls (kernel calls behind the samples),
    calls_per_sample (1 eager, graph_calls graph), graph_replay_us (median undivided replay; NaN
    eager), buffer_sets, set_bytes, working_set_bytes, floor_us (empty kernel, same mode and
    method), floor_ratio (median_us / floor_us), near_floor (floor_ratio < floor_factor),
    graph_launch_us (one-call graph replay; NaN without CUDA), flush_l2, timing_method (per mode:
    eager 'spin-events' — GPU time, the GPU held while the host enqueues, timing.py — graph
    'cuda_events', the interpreter 'host_clock'), host_us (eager on CUDA: the host's median enqueue
    µs per call)
    ('cuda_events' | 'host_clock'), device, device_name, sm_clock_mhz (NVML, read after the
    invocation; NaN when unreadable), triton_cache_dir, run_wall_s.
Samples (``portfolio/run-{run}-samples.parquet``), one per timed sample:
    run, mode, invocation, candidate, rep, position, latency_us, calls (kernel calls averaged).
"""

from __future__ import annotations

import logging
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
import pandas as pd

from headroom.core import contracts, defaults
from headroom.families.attention import inputs
from headroom.measure import noise, timing
from headroom.measure.portfolio import (
    SmClock,
    candidate_order,
    device_name,
    measure_floor,
    modes_for,
    samples_frame,
    settings,
    stop_rules,
    triton_cache_dir,
)


def candidate_fn(cand: Any, cos, sin, rotate_k: bool, kv_lens=None) -> Callable:
    """fn(q, k, v) for one candidate row: the same runner correctness checks
    (:func:`headroom.families.attention.runner.runner`; kv_lens: a ragged decode row's lengths)."""
    from headroom.families.attention.runner import runner

    return runner(cand, cos, sin, rotate_k, kv_lens)


# -- the run --------------------------------------------------------------------------------------


def run(
    trace: pd.DataFrame,
    candidates: pd.DataFrame,
    section: dict[str, Any],
    *,
    run: int,
    device: str,
    rope_base: float | None = None,
    log: logging.Logger | None = None,
    progress: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Time every candidate of ``candidates`` (already admitted by correctness) on every
    invocation of ``trace``. Returns (rows, samples) as described in the module docstring."""
    rope_base = defaults.value("partition", "rope_base") if rope_base is None else rope_base
    log = log or logging.getLogger("headroom.families.attention.portfolio")
    cfg = settings(section)
    _check_inputs(trace, candidates, run, device)
    import torch

    t_start = time.perf_counter()
    bench = _Bench.start(cfg, candidates, run=run, device=device, log=log)
    tables = inputs.RopeTables(int(trace["kv_len"].max()), rope_base, device)
    ordered = trace.sort_values("invocation", kind="mergesort")
    rows: list[dict] = []
    sample_parts: list[tuple] = []
    bar = _progress(len(ordered), progress)
    for index, inv in enumerate(ordered.itertuples(index=False)):
        inv_rows, inv_samples = bench.time_invocation(inv, index, tables.get(inv))
        rows += inv_rows
        sample_parts += inv_samples
        bar.update(1)
        bar.set_postfix_str(f"{bench.timed_calls / max(time.perf_counter() - t_start, 1e-9):,.0f} calls/s")
    bar.close()
    if device == "cuda":
        torch.cuda.synchronize()
    wall_s = time.perf_counter() - t_start
    out = pd.DataFrame.from_records(rows)
    out["floor_ratio"] = out["median_us"] / out["floor_us"]
    out["near_floor"] = out["floor_ratio"] < cfg["floor_factor"]
    out["run_wall_s"] = wall_s
    samples = samples_frame(run, sample_parts)
    log.info(
        "portfolio run %d: %d rows, %d samples, %d timed calls in %.1f s wall",
        run,
        len(out),
        len(samples),
        bench.timed_calls,
        wall_s,
    )
    spent = {**bench.harness.untimed_s, "input sets": bench.inputs_s}
    log.info(
        "portfolio run %d, outside the timed loops: %s; timed loops %.1f s (%d eager batches redone "
        "behind a longer spin)",
        run,
        ", ".join(f"{k} {v:.1f} s" for k, v in spent.items()),
        float(out["cell_wall_s"].sum()),
        bench.harness.spins_redone,
    )
    log.info("portfolio run %d, untimed seconds by candidate:\n%s", run, untimed_table(bench.untimed))
    summary = noise.run_summary(out, samples, cfg["floor_factor"])
    log.info("noise report, run %d:\n%s", run, summary.to_string(index=False))
    log.info("sampler, run %d:\n%s", run, noise.sampler_summary(out).to_string(index=False))
    return out, samples


def untimed_table(untimed: dict[str, dict[str, float]]) -> str:
    """The seconds each candidate spent outside its timed loops, by kind, most first."""
    table = pd.DataFrame.from_dict(untimed, orient="index").rename_axis("candidate")
    table["all"] = table.sum(axis=1)
    return table.sort_values("all", ascending=False).round(2).to_string()


def _check_inputs(trace: pd.DataFrame, candidates: pd.DataFrame, run: int, device: str) -> None:
    if type(run) is not int or run < 1:
        raise ValueError(f"run must be a positive int, got {run!r}")
    if device not in ("cuda", "interpret"):
        raise ValueError(f"device must be 'cuda' or 'interpret', got {device!r}")
    inputs.check_trace(trace)
    missing = [c for c in contracts.CANDIDATE_COLUMNS if c not in candidates.columns]
    if missing:
        raise ValueError(f"candidates lacks column(s) {missing}")
    if candidates.empty:
        raise ValueError("no admitted candidates to time: every candidate failed correctness")


@dataclass
class _Bench:
    """One run's timing set-up: the harness, the candidates, the run's facts and its floor."""

    cfg: dict[str, Any]
    run: int
    device: str
    modes: tuple[str, ...]
    harness: timing.Harness
    cands: list
    facts: dict[str, Any]
    floor: dict[str, float]
    graph_launch: float
    l2: int
    clock: SmClock
    timed_calls: int = 0
    inputs_s: float = 0.0  # seconds building the invocations' input sets
    # seconds outside the timed loops, by candidate and kind (timing.UNTIMED): where a run's untimed
    # time goes, logged at its end
    untimed: dict = field(default_factory=dict)

    @classmethod
    def start(cls, cfg, candidates, *, run: int, device: str, log: logging.Logger) -> _Bench:
        modes = modes_for(cfg["mode"], device)
        if modes != (("eager", "graph") if cfg["mode"] == "both" else (cfg["mode"],)):
            log.warning(
                "portfolio.mode=%s needs CUDA for graph mode; timing eager only on %s", cfg["mode"], device
            )
        harness = timing.Harness(
            device,
            warmup=cfg["warmup_reps"],
            reps=cfg["reps"],
            graph_calls=cfg["graph_calls"],
            flush_l2=cfg["flush_l2"],
            stop=stop_rules(cfg),
            work_us=cfg["work_us"],
        )
        started_at = datetime.now(UTC).isoformat(timespec="seconds")
        l2, clock = timing.l2_bytes(), SmClock(device)
        facts = {
            "run": run,
            "pid": os.getpid(),
            "started_at": started_at,
            "device": device,
            "device_name": device_name(device),
            "triton_cache_dir": triton_cache_dir(),
            "flush_l2": cfg["flush_l2"],
        }
        log.info(
            "portfolio run %d: pid %d, %s, modes %s, L2 %d bytes, triton cache %s, sm clock %.0f MHz",
            run,
            facts["pid"],
            facts["device_name"],
            modes,
            l2,
            facts["triton_cache_dir"],
            clock.read(),
        )
        floor, graph_launch = measure_floor(harness, modes, device)
        log.info(
            "harness floor (empty Triton kernel): %s; one-call graph replay %.2f us",
            ", ".join(f"{m} {v:.2f} us" for m, v in floor.items()),
            graph_launch,
        )
        cands = list(candidates.sort_values("candidate").itertuples(index=False))
        return cls(cfg, run, device, modes, harness, cands, facts, floor, graph_launch, l2, clock)

    def time_invocation(self, inv: Any, index: int, rope: tuple) -> tuple[list[dict], list[tuple]]:
        """Every mode x every candidate (in this invocation's seeded order) on one invocation."""
        cfg, cos, sin = self.cfg, *rope
        nbytes = inputs.set_bytes(inv)
        n_sets = timing.buffer_sets(
            nbytes, self.l2, working_set_l2=cfg["working_set_l2"], max_sets=cfg["max_buffer_sets"]
        )
        seeds = [cfg["seed"], self.run, int(inv.invocation)]
        data_seed = int(np.random.SeedSequence(seeds).generate_state(1)[0])
        t0 = time.perf_counter()
        sets = inputs.input_sets(inv, n_sets, self.device, seed=data_seed)
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()  # the sets are filled on the GPU: count that here
        self.inputs_s += time.perf_counter() - t0
        cands = self.cands
        order = candidate_order(len(cands), seed=cfg["seed"], run=self.run, index=index)
        rotate_k, kv_lens = inputs.rotate_k(inv), inputs.kv_lens_tensor(inv, self.device)
        rows, samples = [], []
        for mode in self.modes:
            for position, ci in enumerate(order):
                cand = cands[ci]
                before = dict(self.harness.untimed_s)
                m = self.harness.time(mode, candidate_fn(cand, cos, sin, rotate_k, kv_lens), sets)
                mine = self.untimed.setdefault(cand.candidate, dict.fromkeys(timing.UNTIMED, 0.0))
                for kind, total in self.harness.untimed_s.items():
                    mine[kind] += total - before[kind]
                self.timed_calls += m.timed_calls
                rows.append(self._row(mode, inv, cand, position, m, nbytes))
                samples.append(self._samples(mode, inv, cand, position, m))
        sm = self.clock.read()
        for r in rows:
            r["sm_clock_mhz"] = sm
        del sets
        return rows, samples

    def _row(self, mode: str, inv: Any, cand: Any, position: int, m: Any, nbytes: int) -> dict[str, Any]:
        return {
            **self.facts,
            "mode": mode,
            "invocation": int(inv.invocation),
            "shape_key": inv.shape_key,
            "phase": inv.phase,
            "candidate": cand.candidate,
            "tile": int(cand.tile),
            "fused": bool(cand.fused),
            "backend": str(getattr(cand, "backend", "triton")),
            "position": position,
            **timing.summarize(m.samples_us),
            "reps": int(m.samples_us.size),
            "timed_calls": m.timed_calls,
            "calls_per_sample": m.calls_per_sample,
            "rse_pct": m.rse_pct,
            "stop_reason": m.stop_reason,
            "cell_wall_s": m.wall_s,
            "graph_replay_us": float(np.median(m.replay_us)) if m.replay_us is not None else math.nan,
            "buffer_sets": m.buffer_sets,
            "set_bytes": nbytes,
            "working_set_bytes": nbytes * m.buffer_sets,
            "floor_us": self.floor[mode],
            "graph_launch_us": self.graph_launch,
            "timing_method": m.method,
            "host_us": m.host_us,
        }

    def _samples(self, mode: str, inv: Any, cand: Any, position: int, m: Any) -> tuple:
        """One cell's samples, framed once per run by :func:`samples_frame` (a frame per cell costs
        about a millisecond of host time between cells)."""
        return (mode, int(inv.invocation), cand.candidate, position, m.samples_us, m.calls_per_sample)


def _progress(total: int, enabled: bool):
    from tqdm import tqdm

    return tqdm(
        total=total, desc="portfolio", unit="inv", file=sys.stderr, disable=not enabled, mininterval=1.0
    )
