"""How every latency in the study is measured: one harness, three methods.

- ``eager`` on CUDA: warm-up calls, then ``reps`` timed calls, each bracketed by a pair of CUDA
  events; the host synchronizes once per measurement (not per call), so the events cost a few
  hundred nanoseconds of host time each and no round trip. The events time the stream between
  them, so when the host cannot keep the GPU busy (tiny decode kernels) the host launch gap is
  part of the figure: that is what an eager server pays, and the harness floor (an empty Triton
  kernel timed the same way) says how much of a figure it is.
- ``graph`` on CUDA: ``graph_calls`` back-to-back calls captured into one ``torch.cuda.CUDAGraph``
  (rotating input sets inside the graph); each replay is bracketed by events and divided by the
  calls in it, so the graph's own launch cost is amortized the way a serving forward pass amortizes
  it. ``graph_launch_us`` measures that launch cost separately (replay of a one-call graph).
  ``reps`` timed calls are ``ceil(reps / graph_calls)`` replays, so both modes time the same number
  of kernel calls; each replay is one sample.
- host clock when there is no CUDA (the Triton interpreter): ``time.perf_counter_ns`` around each
  synchronous call, eager only. These are not GPU measurements and every artifact says so.

Cold timing (``flush_l2``, as NVBench does): before every timed call (eager) or replay (graph) an
L2-sized buffer is overwritten, outside the timed interval. Without it, inputs rotate among enough
buffer sets (:func:`buffer_sets`) that a set has left the L2 before it is read again.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from headroom.core import defaults

MODES = ("eager", "graph")
# Default: together the rotating buffer sets hold twice the L2, so under any eviction order close
# to LRU a set is gone from the L2 before its next use.
# Calls made once on a side stream before capture: CUDA Graph capture needs every kernel compiled
# and every lazy allocation done, and PyTorch's docs ask for warm-up on a side stream.
_CAPTURE_WARMUP_CALLS = 3


def cuda_available() -> bool:
    """True when torch sees a CUDA device and the Triton interpreter is not requested."""
    import os

    import torch

    return torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") != "1"


def l2_bytes() -> int:
    """The current CUDA device's L2 size in bytes, read from the device (0 without CUDA)."""
    if not cuda_available():
        return 0
    import torch

    return int(torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size)


def buffer_sets(
    set_bytes: int,
    l2: int,
    *,
    working_set_l2: float | None = None,
    max_sets: int | None = None,
) -> int:
    """How many distinct input sets to rotate among: enough that together they hold
    ``working_set_l2`` times the L2 (at least 2, at most ``max_sets``); either left out is the
    default study's `portfolio.working_set_l2` / `portfolio.max_buffer_sets`.

    >>> buffer_sets(10 << 20, 60 << 20)   # 10 MiB sets, 60 MiB L2 -> 120 MiB in 12 sets
    12
    """
    if working_set_l2 is None:
        working_set_l2 = defaults.value("portfolio", "working_set_l2")
    if max_sets is None:
        max_sets = defaults.value("portfolio", "max_buffer_sets")
    if set_bytes <= 0:
        raise ValueError(f"set_bytes must be positive, got {set_bytes}")
    if l2 < 0:
        raise ValueError(f"l2 must be >= 0, got {l2}")
    if working_set_l2 <= 0:
        raise ValueError(f"working_set_l2 must be positive, got {working_set_l2}")
    if max_sets < 2:
        raise ValueError(f"max_sets must be >= 2, got {max_sets}")
    wanted = math.ceil(working_set_l2 * l2 / set_bytes)
    return int(min(max(wanted, 2), max_sets))


def graph_replays(reps: int, graph_calls: int) -> int:
    """Replays (= samples) that time at least ``reps`` calls with ``graph_calls`` calls per graph."""
    if reps < 1 or graph_calls < 1:
        raise ValueError(f"reps and graph_calls must be >= 1, got {reps} and {graph_calls}")
    return math.ceil(reps / graph_calls)


@dataclass(frozen=True)
class Measurement:
    """One timed (callable, input sets) pair.

    samples_us: one latency per sample, in microseconds per call (graph: replay / calls_per_sample)
    calls_per_sample: 1 for eager, the calls captured in the graph for graph mode
    replay_us: graph only, the undivided replay times (same order as samples_us)
    buffer_sets: distinct input sets the calls rotated among
    """

    mode: str
    samples_us: np.ndarray
    calls_per_sample: int
    buffer_sets: int
    replay_us: np.ndarray | None = None

    @property
    def timed_calls(self) -> int:
        return int(self.samples_us.size * self.calls_per_sample)


def summarize(samples_us: np.ndarray) -> dict[str, float]:
    """median/mean/p10/p90/std (sample std, ddof=1) and rel_std_pct of one sample vector."""
    x = np.asarray(samples_us, dtype=np.float64)
    if x.size == 0 or not np.all(np.isfinite(x)):
        raise ValueError("samples_us must be a non-empty vector of finite latencies")
    std = float(x.std(ddof=1)) if x.size > 1 else 0.0
    mean = float(x.mean())
    return {
        "median_us": float(np.median(x)),
        "mean_us": mean,
        "p10_us": float(np.percentile(x, 10)),
        "p90_us": float(np.percentile(x, 90)),
        "std_us": std,
        "rel_std_pct": 100.0 * std / mean if mean > 0 else float("nan"),
    }


class Harness:
    """Times callables on one device with one method; holds the reusable event pool and the
    L2 flush buffer so that a measurement allocates nothing on the timed path.

    device: "cuda" or "interpret" (host clock, eager only)
    warmup: untimed calls before the timed ones (graph: ``ceil(warmup / graph_calls)`` untimed
        replays, at least one per captured graph, after the capture's own warm-up calls)
    reps: timed calls per measurement (graph: ``graph_replays(reps, graph_calls)`` replays)
    graph_calls: calls captured per CUDA graph
    flush_l2: overwrite an L2-sized buffer before every timed call / replay (cold timing)
    replays: graph replays (= graph samples) per measurement; default ceil(reps / graph_calls),
        so both modes time about ``reps`` calls
    """

    def __init__(
        self,
        device: str,
        *,
        warmup: int = 20,
        reps: int = 280,
        graph_calls: int = 20,
        flush_l2: bool = False,
        replays: int | None = None,
    ) -> None:
        if device not in ("cuda", "interpret"):
            raise ValueError(f"device must be 'cuda' or 'interpret', got {device!r}")
        if device == "cuda" and not cuda_available():
            raise ValueError("device='cuda' but torch sees no CUDA device (or TRITON_INTERPRET=1)")
        if warmup < 0:
            raise ValueError(f"warmup must be >= 0, got {warmup}")
        if reps < 1:
            raise ValueError(f"reps must be >= 1, got {reps}")
        if graph_calls < 1:
            raise ValueError(f"graph_calls must be >= 1, got {graph_calls}")
        if replays is not None and (type(replays) is not int or replays < 1):
            raise ValueError(f"replays must be a positive int or None, got {replays!r}")
        self.device = device
        self.warmup = warmup
        self.reps = reps
        self.graph_calls = graph_calls
        self.flush_l2 = flush_l2
        self.replays = replays if replays is not None else graph_replays(reps, graph_calls)
        self.modes: tuple[str, ...] = MODES if device == "cuda" else ("eager",)
        self._events: list = []
        self._flush_buffer = None
        if device == "cuda":
            import torch

            self._events = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(max(reps, self.replays))
            ]
            if flush_l2:
                self._flush_buffer = torch.empty(max(l2_bytes(), 1), dtype=torch.uint8, device="cuda")

    def _flush(self) -> None:
        if self._flush_buffer is not None:
            self._flush_buffer.fill_(1)

    def time(self, mode: str, fn: Callable, input_sets: Sequence[tuple]) -> Measurement:
        """Time ``fn(*input_sets[i % len(input_sets)])`` in ``mode`` ('eager' or 'graph')."""
        if mode not in self.modes:
            raise ValueError(f"mode must be one of {self.modes} on device {self.device!r}, got {mode!r}")
        if len(input_sets) == 0:
            raise ValueError("input_sets must hold at least one tuple of arguments")
        if mode == "graph":
            return self._graph(fn, input_sets)
        if self.device == "cuda":
            return self._eager_cuda(fn, input_sets)
        return self._eager_host(fn, input_sets)

    def _eager_host(self, fn: Callable, input_sets: Sequence[tuple]) -> Measurement:
        n = len(input_sets)
        for i in range(self.warmup):
            fn(*input_sets[i % n])
        ns = np.empty(self.reps, dtype=np.int64)
        clock = time.perf_counter_ns
        for i in range(self.reps):
            args = input_sets[i % n]
            t0 = clock()
            fn(*args)
            ns[i] = clock() - t0
        return Measurement("eager", ns.astype(np.float64) / 1e3, 1, n)

    def _eager_cuda(self, fn: Callable, input_sets: Sequence[tuple]) -> Measurement:
        import torch

        n = len(input_sets)
        for i in range(self.warmup):
            fn(*input_sets[i % n])
        torch.cuda.synchronize()
        for i, (start, end) in enumerate(self._events[: self.reps]):
            args = input_sets[i % n]
            self._flush()
            start.record()
            fn(*args)
            end.record()
        torch.cuda.synchronize()
        us = np.array([1e3 * s.elapsed_time(e) for s, e in self._events[: self.reps]], dtype=np.float64)
        return Measurement("eager", us, 1, n)

    def _graph(self, fn: Callable, input_sets: Sequence[tuple]) -> Measurement:
        """Capture ``graph_calls`` calls per graph; with more input sets than calls, capture
        several graphs over consecutive slices of the sets and alternate replays among them, so
        the working set inside graph mode is as large as in eager mode."""
        import torch

        n = len(input_sets)
        n_graphs = math.ceil(n / self.graph_calls) if n > self.graph_calls else 1
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for i in range(_CAPTURE_WARMUP_CALLS):
                fn(*input_sets[i % n])
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graphs = []
        for g_index in range(n_graphs):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for j in range(self.graph_calls):
                    fn(*input_sets[(g_index * self.graph_calls + j) % n])
            graphs.append(graph)
        # Every graph replays at least once untimed: a graph's first replay uploads it.
        for i in range(max(n_graphs, math.ceil(self.warmup / self.graph_calls))):
            graphs[i % n_graphs].replay()
        torch.cuda.synchronize()
        events = self._events[: self.replays]
        for i, (start, end) in enumerate(events):
            graph = graphs[i % n_graphs]
            self._flush()
            start.record()
            graph.replay()
            end.record()
        torch.cuda.synchronize()
        replay_us = np.array([1e3 * s.elapsed_time(e) for s, e in events], dtype=np.float64)
        del graphs
        return Measurement(
            "graph",
            replay_us / self.graph_calls,
            self.graph_calls,
            min(n, n_graphs * self.graph_calls),
            replay_us,
        )

    def graph_launch_us(self, fn: Callable, args: tuple) -> float:
        """Median replay time of a graph holding one call of ``fn`` (an empty kernel): what one
        graph launch costs, amortized over ``graph_calls`` calls in graph-mode figures."""
        if self.device != "cuda":
            raise ValueError("graph_launch_us needs CUDA")
        one = Harness("cuda", warmup=self.warmup, reps=self.replays, graph_calls=1, replays=self.replays)
        return float(np.median(one._graph(fn, [args]).replay_us))
