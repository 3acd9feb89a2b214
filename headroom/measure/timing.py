"""How every latency in the study is measured: one harness, three methods.

- ``eager`` on CUDA (``EAGER_METHOD`` 'spin-events'): warm-up calls, then the timed calls in
  batches of at most ``SPIN_BATCH``, each call bracketed by a pair of CUDA events, while the GPU is
  held by a spin kernel (``torch.cuda._sleep``) long enough for the host to enqueue the whole batch:
  the events then bracket GPU work only, back to back, as a server's CPU runs ahead of a busy GPU.
  The spin is sized from the host's enqueue time per call so far (x ``SPIN_MARGIN``) and verified:
  an event recorded right after it that has already completed when the batch is enqueued means the
  GPU went idle inside the batch, and the batch is timed again with a spin twice as long. The
  host's enqueue time per call, measured while the GPU spins, is kept beside the GPU time
  (``Measurement.host_us``): what an eager call costs the CPU, charged by the decision only where
  the host bounds a decoder layer (headroom/families/attention/layer.py). 'back-to-back' (the method before
  decision v4: no spin, so a short call's figure is its host launch path) stays for calibrate's
  harness floor and tools/eager_timing_check.py.
- ``graph`` on CUDA: ``graph_calls`` back-to-back calls captured into one ``torch.cuda.CUDAGraph``
  (rotating input sets inside the graph); each replay is bracketed by events and divided by the
  calls in it, so the graph's own launch cost is amortized the way a serving forward pass amortizes
  it. ``graph_launch_us`` measures that launch cost separately (replay of a one-call graph).
  ``reps`` timed calls are ``ceil(reps / graph_calls)`` replays, so both modes time the same number
  of kernel calls; each replay is one sample.
- host clock when there is no CUDA (the Triton interpreter): ``time.perf_counter_ns`` around each
  synchronous call, eager only. These are not GPU measurements and every artifact says so.

Work-sized counts (``work_us`` > 0; 0 keeps the fixed counts): a cell's warm-up stops once it
holds about ``work_us`` of calls (at least :data:`MIN_SIZED_WARMUP` calls, at most ``warmup``), and a
graph holds ``ceil(work_us / call µs)`` calls (at least one, at most ``graph_calls``), the call's
time read from one synchronized call before the cell (:meth:`Harness.call_us`). A 1-ms call then
takes a few untimed calls and one call per replay, where fixed counts spend 20 warm-up calls and 20
calls a replay on it; a short call keeps the fixed counts. Every replay still holds ``work_us`` of
work, so the graph's device-side launch is amortized over at least that much in every cell.

Cold timing (``flush_l2``, as NVBench does): before every timed call (eager) or replay (graph) an
L2-sized buffer is overwritten, outside the timed interval. Without it, inputs rotate among enough
buffer sets (:func:`buffer_sets`) that a set has left the L2 before it is read again.

How many samples a measurement takes (the *sampler*): ``fixed``, ``reps`` calls (graph:
``replays`` replays) in one batch; or adaptive, a :class:`StopRule` per mode, the way NVBench's
``stdrel`` criterion stops: sample in batches until the median's relative standard error
(:func:`rse_pct`) is at most the target, once the cell holds ``min_samples`` samples and
``min_time_s`` of timed work, or until ``max_samples`` samples (count cap) or ``max_time_s`` of
wall-clock time (time cap). The unit of a sample is one call (eager) or one replay of
``graph_calls`` calls (graph). One loop (:meth:`Harness._sample`) drives every method; a method only
times "the next k samples" and hands them back, so the host-clock and the CUDA paths stop by the
same code. The rule looks at the cell's own samples only, never at other candidates.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from headroom.core import contracts, defaults

MODES = ("eager", "graph")
# Default: together the rotating buffer sets hold twice the L2, so under any eviction order close
# to LRU a set is gone from the L2 before its next use.
# Calls made once on a side stream before capture: CUDA Graph capture needs every kernel compiled
# and every lazy allocation done, and PyTorch's docs ask for warm-up on a side stream.
_CAPTURE_WARMUP_CALLS = 3
EAGER_METHODS = ("spin-events", "back-to-back")
EAGER_METHOD = "spin-events"
# Timed calls per spin: each call records two events and launches a few kernels, and CUDA queues
# about a thousand pending commands before the host blocks; a full queue would make the host wait
# for the GPU, and the spin check would read that as a spin too short.
SPIN_BATCH = 64
SPIN_MARGIN = 2.0  # the spin covers twice the host time the batch is expected to take
SPIN_FLOOR_US = 200.0  # and never less: the first estimate of a cell comes from few calls
SPIN_RETRIES = 6  # doublings of a spin found too short before the measurement fails
# Harness.untimed_s's kinds ('prepare': a callable's own untimed set-up of the input sets, e.g. a
# native's cache layout and plan, made before its first call as a server's already are)
UNTIMED = ("prepare", "eager warm-up", "graph capture", "graph warm-up replays")
# Work-sized warm-up (work_us > 0): two synchronized calls (the first pays one-time work, the second
# is the call's time) and at least one enqueued without waiting, whose host time sizes the first spin
MIN_SIZED_WARMUP = 3


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


def sized_calls(work_us: float, call_us: float, least: int, most: int) -> int:
    """Calls holding about ``work_us`` of work at ``call_us`` each, within [least, most] (work-sized
    counts, module docstring).

    >>> sized_calls(1000.0, 150.0, 1, 20), sized_calls(1000.0, 1200.0, 1, 20), sized_calls(1000.0, 21.0, 1, 20)
    (7, 1, 20)
    """
    return int(min(most, max(least, math.ceil(work_us / call_us))))


#: Why a measurement stopped: the portfolio contract's vocabulary (headroom/core/contracts.py).
STOP_REASONS = contracts.STOP_REASONS
# sqrt(pi / 2): the standard error of a median is this many times that of a mean (normal samples);
# 1.349: an interquartile range over this is a standard deviation (normal samples), robust to the
# outliers a timing vector carries (NVBench's stdrel moved to the relative IQR for that reason).
_MEDIAN_SE_FACTOR = math.sqrt(math.pi / 2)
_IQR_PER_SIGMA = 1.349


def rse_pct(samples: np.ndarray) -> float:
    """Relative standard error of the median, in percent: sqrt(pi/2) * sigma / (sqrt(n) * median),
    sigma estimated robustly as IQR / 1.349; inf with fewer than two samples.

    >>> round(rse_pct(np.array([99.0, 100.0, 100.0, 101.0])), 3)
    0.232
    """
    x = np.asarray(samples, dtype=np.float64)
    if x.size < 2:
        return math.inf
    q25, median, q75 = np.percentile(x, [25, 50, 75])
    if not median > 0:
        return math.inf
    sigma = (q75 - q25) / _IQR_PER_SIGMA
    return float(100.0 * _MEDIAN_SE_FACTOR * sigma / (math.sqrt(x.size) * median))


@dataclass(frozen=True)
class StopRule:
    """When an adaptive measurement (one mode of one cell) stops, NVBench ``stdrel``-style.

    target_rse_pct: stop once :func:`rse_pct` of the samples is at most this ...
    min_samples, min_time_s: ... and the cell holds at least this many samples and this many
        seconds of timed work (the sum of its samples; graph: of its replays)
    max_samples: count cap; max_time_s: wall-clock cap on the cell's timed loop (checked after each
        batch; batches are sized from the time per sample so far to end near the cap)
    """

    target_rse_pct: float
    min_samples: int
    max_samples: int
    min_time_s: float
    max_time_s: float

    def __post_init__(self) -> None:
        if not self.target_rse_pct > 0:
            raise ValueError(f"target_rse_pct must be > 0, got {self.target_rse_pct!r}")
        if type(self.min_samples) is not int or self.min_samples < 2:
            raise ValueError(f"min_samples must be an int >= 2, got {self.min_samples!r}")
        if type(self.max_samples) is not int or self.max_samples < self.min_samples:
            raise ValueError(
                f"max_samples must be an int >= min_samples ({self.min_samples}), got {self.max_samples!r}"
            )
        if not self.min_time_s >= 0:
            raise ValueError(f"min_time_s must be >= 0, got {self.min_time_s!r}")
        if not self.max_time_s > 0:
            raise ValueError(f"max_time_s must be > 0, got {self.max_time_s!r}")

    def reason(self, samples_us: np.ndarray, rse: float, wall_s: float) -> str | None:
        """Why to stop after these samples (STOP_REASONS), or None to take another batch."""
        n = samples_us.size
        enough = n >= self.min_samples and float(samples_us.sum()) * 1e-6 >= self.min_time_s
        if enough and rse <= self.target_rse_pct:
            return "target"
        if n >= self.max_samples:
            return "count_cap"
        if wall_s >= self.max_time_s:
            return "time_cap"
        return None

    def next_batch(self, n: int, rse: float, wall_s: float) -> int:
        """Samples to take next: what the noise so far says the target needs (n * (rse / target)^2,
        at least the minimum count and a quarter more than now, so a cell takes few batches), no
        more than the count cap and than the time left at the pace so far allows (at least one)."""
        wanted = n * (rse / self.target_rse_pct) ** 2 if math.isfinite(rse) else 2 * n
        k = max(self.min_samples - n, math.ceil(wanted) - n, math.ceil(n / 4), 1)
        per_sample_s = wall_s / n if n else 0.0
        if per_sample_s > 0:
            k = min(k, max(1, math.floor((self.max_time_s - wall_s) / per_sample_s)))
        return int(min(k, self.max_samples - n))


def sample_loop(
    rule: StopRule | None, take: Callable[[int], np.ndarray], fixed: int, clock: Callable[[], int]
) -> tuple[np.ndarray, str, float, float]:
    """The one sampling loop: ``take(k)`` times the next k samples (their µs, in the method's unit:
    a call or a replay). No rule: one batch of ``fixed``; a rule: batches until it gives a reason.
    Returns (samples, stop reason, rse_pct, wall seconds by ``clock``, a nanosecond clock). The
    harness runs it on the device; :mod:`headroom.measure.cost` replays it on recorded samples."""
    t0 = clock()
    if rule is None:
        x = take(fixed)
        return x, "fixed", rse_pct(x), (clock() - t0) / 1e9
    batches = [take(rule.min_samples)]
    while True:
        x = np.concatenate(batches)
        rse, wall_s = rse_pct(x), (clock() - t0) / 1e9
        reason = rule.reason(x, rse, wall_s)
        if reason is not None:
            return x, reason, rse, wall_s
        batches.append(take(rule.next_batch(x.size, rse, wall_s)))


@dataclass(frozen=True)
class Measurement:
    """One timed (callable, input sets) pair.

    samples_us: one latency per sample, in microseconds per call (graph: replay / calls_per_sample)
    calls_per_sample: 1 for eager, the calls captured in the graph for graph mode
    replay_us: graph only, the undivided replay times (same order as samples_us)
    host_us: eager on CUDA with the spin: the host's median enqueue time per call (NaN otherwise)
    method: how the samples were taken (``timing_method`` in the portfolio rows)
    buffer_sets: distinct input sets the calls rotated among
    stop_reason: one of STOP_REASONS; rse_pct: the median's relative standard error it reached
    wall_s: wall-clock seconds of the timed loop (batches, their synchronizations)
    """

    mode: str
    samples_us: np.ndarray
    calls_per_sample: int
    buffer_sets: int
    replay_us: np.ndarray | None = None
    stop_reason: str = "fixed"
    rse_pct: float = math.nan
    wall_s: float = math.nan
    host_us: float = math.nan  # eager 'spin-events': median enqueue µs per call on the host
    method: str = ""

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


def buffer_write(nbytes: int, device) -> Callable[[], None]:
    """A write of ``nbytes``: a uint8 buffer allocated now, filled with 1s on every call (its
    ``buffer`` attribute). Cold timing's L2 flush (Harness flush_l2) and the lifecycle's traffic
    between switched calls (lifecycle.work_between) are this write."""
    import torch

    buffer = torch.empty(nbytes, dtype=torch.uint8, device=device)

    def write() -> None:
        buffer.fill_(1)

    write.buffer = buffer
    return write


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
    stop: {mode: StopRule} for the adaptive sampler; a mode left out (or None) samples fixed
    clock: an ``int`` nanosecond clock (``time.perf_counter_ns``): the host-clock samples and every
        measurement's wall time; tests pass a fake one
    eager_method: 'spin-events' (the default: GPU time, the host's enqueue time beside it) or
        'back-to-back' (the host launch path included; the harness floor)
    work_us: > 0 sizes each cell's warm-up and calls per graph to about this many µs of work
        (module docstring); 0 (the default) keeps ``warmup`` and ``graph_calls`` fixed
    warmup, reps and graph_calls left out are the default study's ``portfolio`` warmup_reps, reps
    and graph_calls (config/config.yaml)
    """

    def __init__(
        self,
        device: str,
        *,
        warmup: int | None = None,
        reps: int | None = None,
        graph_calls: int | None = None,
        flush_l2: bool = False,
        replays: int | None = None,
        stop: dict[str, StopRule] | None = None,
        clock: Callable[[], int] = time.perf_counter_ns,
        eager_method: str = EAGER_METHOD,
        work_us: float = 0.0,
    ) -> None:
        warmup, reps, graph_calls = _sampling(warmup, reps, graph_calls)
        if eager_method not in EAGER_METHODS:
            raise ValueError(f"eager_method must be one of {EAGER_METHODS}, got {eager_method!r}")
        self.eager_method = eager_method
        self._cycles_per_us = math.nan
        _check_harness_args(device, warmup, reps, graph_calls, replays, stop)
        if not (isinstance(work_us, int | float) and math.isfinite(work_us) and work_us >= 0):
            raise ValueError(f"work_us must be a finite number >= 0, got {work_us!r}")
        self.work_us = float(work_us)
        self.device = device
        self.warmup = warmup
        self.reps = reps
        self.graph_calls = graph_calls
        self.flush_l2 = flush_l2
        self.replays = replays if replays is not None else graph_replays(reps, graph_calls)
        self.stop = dict(stop or {})
        self.clock = clock
        self.modes: tuple[str, ...] = MODES if device == "cuda" else ("eager",)
        self._events: list = []
        self._flush_write = None
        # Seconds spent outside the timed loops, by kind: where a run's time goes ('eager warm-up':
        # the untimed calls and their GPU work; 'graph capture': the capture's warm-up calls and the
        # captures; 'graph warm-up replays': each graph's untimed first replays, which upload it).
        self.untimed_s = dict.fromkeys(UNTIMED, 0.0)
        self.spins_redone = 0  # eager batches timed again behind a longer spin
        if device == "cuda":
            import torch

            pool = max(reps, self.replays, *(r.max_samples for r in self.stop.values()))
            self._events = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                for _ in range(pool)
            ]
            if flush_l2:
                self._flush_write = buffer_write(max(l2_bytes(), 1), "cuda")

    def _flush(self) -> None:
        if self._flush_write is not None:
            self._flush_write()

    def time(self, mode: str, fn: Callable, input_sets: Sequence[tuple]) -> Measurement:
        """Time ``fn(*input_sets[i % len(input_sets)])`` in ``mode`` ('eager' or 'graph'). A ``fn``
        with a ``hold`` attribute (a context: a native's attention backend) is timed inside it,
        entered once for the whole measurement, as a server chooses its backend once. A ``fn`` with
        a ``prepare`` attribute gets ``fn.prepare(input_sets)`` first, untimed (its layouts and plan:
        nothing of it may happen inside a capture or a timed call)."""
        if mode not in self.modes:
            raise ValueError(f"mode must be one of {self.modes} on device {self.device!r}, got {mode!r}")
        if len(input_sets) == 0:
            raise ValueError("input_sets must hold at least one tuple of arguments")
        if hasattr(fn, "prepare"):
            t0 = self.clock()
            fn.prepare(input_sets)
            self._sync()
            self.untimed_s["prepare"] += (self.clock() - t0) / 1e9
        with fn.hold() if hasattr(fn, "hold") else contextlib.nullcontext():
            return self._time(mode, fn, input_sets)

    def _time(self, mode: str, fn: Callable, input_sets: Sequence[tuple]) -> Measurement:
        if mode == "graph":
            return self._graph(fn, input_sets)
        n = len(input_sets)
        warm_ns = self._eager_warmup(fn, input_sets)
        if self.device != "cuda":
            take, method, host = self._eager_host(fn, input_sets), "host_clock", None
        elif self.eager_method == "back-to-back":
            take, method, host = self._eager_cuda(fn, input_sets), "cuda_events", None
        else:
            host = []
            take, method = self._eager_spin(fn, input_sets, warm_ns / 1e3, host), "spin-events"
        us, reason, rse, wall_s = self._sample("eager", take, self.reps)
        host_us = float(np.median(host)) if host else math.nan
        return Measurement("eager", us, 1, n, None, reason, rse, wall_s, host_us, method)

    def _eager_warmup(self, fn: Callable, input_sets: Sequence[tuple]) -> float:
        """The untimed calls before an eager cell (``warmup``, or work-sized: module docstring);
        returns the host's enqueue ns per call over the later half of the calls not waited on, the
        first spin's estimate: past one-time first-call work (a cuDNN plan, a compile guard) that
        would size every first spin of the cell far too long."""
        n, t0 = len(input_sets), self.clock()
        count, first = self.warmup, 0
        if self.work_us > 0 and self.warmup >= MIN_SIZED_WARMUP:
            count, first = self._sized(self.call_us(fn, input_sets), self.warmup, MIN_SIZED_WARMUP), 2
        late = first + (count - first) // 2
        t_late = self.clock()
        for i in range(first, count):
            if i == late:
                t_late = self.clock()
            fn(*input_sets[i % n])
        warm_ns = (self.clock() - t_late) / max(count - late, 1)
        self._sync()  # the warm-up's GPU work, counted with it
        self.untimed_s["eager warm-up"] += (self.clock() - t0) / 1e9
        return warm_ns

    def call_us(self, fn: Callable, input_sets: Sequence[tuple]) -> float:
        """µs of one call by the host clock, synchronized before and after, behind one untimed call
        that pays first-call work: what work-sized counts divide ``work_us`` by."""
        self._sync()
        fn(*input_sets[0])
        self._sync()
        t0 = self.clock()
        fn(*input_sets[1 % len(input_sets)])
        self._sync()
        return max((self.clock() - t0) / 1e3, 1e-3)

    def _sized(self, call_us: float, most: int, least: int) -> int:
        return sized_calls(self.work_us, call_us, least, most)

    def _sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def _sample(self, mode: str, take: Callable[[int], np.ndarray], fixed: int):
        return sample_loop(self.stop.get(mode), take, fixed, self.clock)

    def _eager_host(self, fn: Callable, input_sets: Sequence[tuple]) -> Callable[[int], np.ndarray]:
        n, clock, done = len(input_sets), self.clock, [0]

        def take(k: int) -> np.ndarray:
            ns = np.empty(k, dtype=np.int64)
            for j in range(k):
                args = input_sets[(done[0] + j) % n]
                t0 = clock()
                fn(*args)
                ns[j] = clock() - t0
            done[0] += k
            return ns.astype(np.float64) / 1e3

        return take

    def _eager_cuda(self, fn: Callable, input_sets: Sequence[tuple]) -> Callable[[int], np.ndarray]:
        """k calls, each between a pair of pooled events, one synchronize per batch. A batch after
        the first starts with one untimed call, so that its first timed call finds the stream busy
        as every later call does, not idle after the synchronize."""
        import torch

        n, done = len(input_sets), [0]
        torch.cuda.synchronize()

        def take(k: int) -> np.ndarray:
            if done[0]:
                fn(*input_sets[(done[0] - 1) % n])
            events = self._events[:k]
            for j, (start, end) in enumerate(events):
                args = input_sets[(done[0] + j) % n]
                self._flush()
                start.record()
                fn(*args)
                end.record()
            torch.cuda.synchronize()
            done[0] += k
            return np.array([1e3 * s.elapsed_time(e) for s, e in events], dtype=np.float64)

        return take

    def _eager_spin(
        self, fn: Callable, input_sets: Sequence[tuple], guess_us: float, host: list
    ) -> Callable[[int], np.ndarray]:
        """k calls in batches of at most SPIN_BATCH, each batch enqueued behind a spin kernel that
        holds the GPU until the host has enqueued it (the module docstring); ``host`` gathers each
        batch's enqueue µs per call. ``guess_us``: the host time per call of the warm-up's later
        half, the first estimate of the spin a batch needs."""
        import torch

        n, done, per_call, most = len(input_sets), [0], [max(guess_us, 1.0)], [SPIN_BATCH]
        held = torch.cuda.Event()
        torch.cuda.synchronize()

        def batch(k: int) -> np.ndarray:
            spin_us = max(SPIN_FLOOR_US, SPIN_MARGIN * per_call[0] * k)
            for _ in range(SPIN_RETRIES + 1):
                events = self._events[:k]
                torch.cuda._sleep(int(spin_us * self.cycles_per_us()))
                held.record()
                t0 = self.clock()
                for j, (start, end) in enumerate(events):
                    args = input_sets[(done[0] + j) % n]
                    self._flush()
                    start.record()
                    fn(*args)
                    end.record()
                enqueue_us = (self.clock() - t0) / 1e3 / k
                covered = not held.query()  # the spin still runs: the GPU never waited on the host
                torch.cuda.synchronize()
                per_call[0] = enqueue_us
                if covered:
                    host.append(enqueue_us)
                    done[0] += k
                    return np.array([1e3 * s.elapsed_time(e) for s, e in events], dtype=np.float64)
                # Not covered: the spin was too short, or the host blocked on a full launch queue
                # (64 calls of a native's ~20 launches each fill CUDA's queue of pending work, and
                # the host then waits out any spin): a longer spin for half the calls, and no later
                # batch of this measurement larger than that
                self.spins_redone += 1
                k = most[0] = max(1, k // 2)
                spin_us = max(2.0 * spin_us, SPIN_MARGIN * enqueue_us * k)
            raise RuntimeError(
                f"eager timing: a spin of {spin_us:.0f} µs still ended before {k} call(s) were enqueued "
                f"({enqueue_us:.1f} µs each): the host is stalled or a call waits on the GPU"
            )

        def take(k: int) -> np.ndarray:
            parts = []
            while k > 0:
                parts.append(batch(min(k, most[0])))
                k -= len(parts[-1])
            return np.concatenate(parts)

        return take

    def cycles_per_us(self) -> float:
        """GPU clock cycles per µs of the spin kernel, measured once per harness: a spin of 10^6
        cycles timed by CUDA events."""
        if math.isnan(self._cycles_per_us):
            import torch

            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda._sleep(1_000)  # the kernel's first launch loads it
            start.record()
            torch.cuda._sleep(1_000_000)
            end.record()
            torch.cuda.synchronize()
            self._cycles_per_us = 1_000_000 / (1e3 * start.elapsed_time(end))
        return self._cycles_per_us

    def _graph(self, fn: Callable, input_sets: Sequence[tuple]) -> Measurement:
        """Capture ``graph_calls`` calls per graph (work-sized: module docstring); with more input
        sets than calls, capture several graphs over consecutive slices of the sets and alternate
        replays among them, so the working set inside graph mode is as large as in eager mode. A
        sample is one replay."""
        import torch

        n = len(input_sets)
        t0 = self.clock()
        per_graph, warm = self.graph_calls, self.warmup
        if self.work_us > 0:
            call_us = self.call_us(fn, input_sets)
            per_graph, warm = self._sized(call_us, self.graph_calls, 1), self._sized(call_us, self.warmup, 1)
        graphs = self._capture(fn, input_sets, per_graph)
        t1 = self.clock()
        # Every graph replays at least once untimed: a graph's first replay uploads it.
        for i in range(max(len(graphs), math.ceil(warm / per_graph))):
            graphs[i % len(graphs)].replay()
        torch.cuda.synchronize()
        self.untimed_s["graph capture"] += (t1 - t0) / 1e9
        self.untimed_s["graph warm-up replays"] += (self.clock() - t1) / 1e9
        done = [0]

        def take(k: int) -> np.ndarray:
            if done[0]:  # as in eager: the first timed replay of a later batch finds the stream busy
                graphs[(done[0] - 1) % len(graphs)].replay()
            events = self._events[:k]
            for j, (start, end) in enumerate(events):
                graph = graphs[(done[0] + j) % len(graphs)]
                self._flush()
                start.record()
                graph.replay()
                end.record()
            torch.cuda.synchronize()
            done[0] += k
            return np.array([1e3 * s.elapsed_time(e) for s, e in events], dtype=np.float64)

        fixed = self.replays if per_graph == self.graph_calls else graph_replays(self.reps, per_graph)
        replay_us, reason, rse, wall_s = self._sample("graph", take, fixed)
        n_graphs = len(graphs)
        graphs.clear()  # frees the captured graphs (and their memory pool) before the next cell
        return Measurement(
            "graph",
            replay_us / per_graph,
            per_graph,
            min(n, n_graphs * per_graph),
            replay_us,
            reason,
            rse,
            wall_s,
            method="cuda_events",
        )

    def _capture(self, fn: Callable, input_sets: Sequence[tuple], per_graph: int) -> list:
        import torch

        n = len(input_sets)
        n_graphs = math.ceil(n / per_graph) if n > per_graph else 1
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
                for j in range(per_graph):
                    fn(*input_sets[(g_index * per_graph + j) % n])
            graphs.append(graph)
        return graphs

    def graph_launch_us(self, fn: Callable, args: tuple) -> float:
        """Median replay time of a graph holding one call of ``fn`` (an empty kernel): what one
        graph launch costs, amortized over ``graph_calls`` calls in graph-mode figures."""
        if self.device != "cuda":
            raise ValueError("graph_launch_us needs CUDA")
        one = Harness("cuda", warmup=self.warmup, reps=self.replays, graph_calls=1, replays=self.replays)
        return float(np.median(one._graph(fn, [args]).replay_us))


def _sampling(warmup: int | None, reps: int | None, graph_calls: int | None) -> tuple[int, int, int]:
    """(warmup, reps, graph_calls), each left out taken from the default study's portfolio section."""
    cfg = defaults.section("portfolio")
    return (
        cfg["warmup_reps"] if warmup is None else warmup,
        cfg["reps"] if reps is None else reps,
        cfg["graph_calls"] if graph_calls is None else graph_calls,
    )


def _check_harness_args(device, warmup, reps, graph_calls, replays, stop) -> None:
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
    for mode, rule in (stop or {}).items():
        if mode not in MODES or not isinstance(rule, StopRule):
            raise ValueError(f"stop must map modes {MODES} to StopRule, got {mode!r}: {rule!r}")
