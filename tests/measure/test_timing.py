"""The timing harness on plain torch callables (host clock); CUDA paths in GPU-marked tests."""

import math
import time

import numpy as np
import pytest
import torch

from headroom.core import defaults
from headroom.measure import timing


def test_buffer_sets_cover_the_requested_multiple_of_l2():
    l2 = 60 << 20
    n = timing.buffer_sets(10 << 20, l2)
    assert n * (10 << 20) >= 2 * l2 > (n - 1) * (10 << 20)
    assert timing.buffer_sets(1 << 30, l2) == 2  # one set larger than L2: still rotate two
    assert timing.buffer_sets(1, l2, max_sets=16) == 16
    assert timing.buffer_sets(1 << 20, 0) == 2  # no L2 known (interpreter): the minimum
    with pytest.raises(ValueError, match="set_bytes"):
        timing.buffer_sets(0, l2)
    with pytest.raises(ValueError, match="max_sets"):
        timing.buffer_sets(1, l2, max_sets=1)


def test_buffer_write_fills_its_buffer_with_ones_on_every_call():
    write = timing.buffer_write(4096, "cpu")
    assert write.buffer.dtype == torch.uint8 and write.buffer.numel() == 4096
    for _ in range(2):
        write.buffer.zero_()
        assert write() is None and int(write.buffer.sum()) == 4096
    # the cold harness's flush is this write, of the L2's size (no L2 without CUDA: nothing flushed)
    harness = timing.Harness("interpret", warmup=0, reps=1, graph_calls=1, flush_l2=True)
    assert harness._flush_write is None and harness._flush() is None


def test_graph_replays_time_at_least_reps_calls():
    assert timing.graph_replays(280, 20) == 14
    assert timing.graph_replays(281, 20) == 15
    assert timing.graph_replays(3, 20) == 1
    with pytest.raises(ValueError):
        timing.graph_replays(0, 20)


def test_host_eager_times_every_rep_and_rotates_inputs():
    seen = []

    def fn(x):
        seen.append(x)
        time.sleep(0.002)

    h = timing.Harness("interpret", warmup=2, reps=5)
    assert h.modes == ("eager",)
    m = h.time("eager", fn, [(0,), (1,), (2,)])
    assert m.samples_us.shape == (5,) and m.timed_calls == 5 and m.buffer_sets == 3
    assert seen == [0, 1, 0, 1, 2, 0, 1]  # 2 warm-up calls, then 5 timed, rotating
    # 2 ms sleeps: the host clock sees at least that, and not wildly more.
    assert np.all(m.samples_us >= 2000) and np.median(m.samples_us) < 50_000


def test_host_eager_orders_short_and_long_calls():
    # Sleeps, not arithmetic: on a loaded CI machine a sleep only lengthens, so 0.5 ms vs 25 ms
    # keeps its order where two matmuls' medians may not.
    h = timing.Harness("interpret", warmup=1, reps=5)
    short = h.time("eager", time.sleep, [(0.0005,)])
    long = h.time("eager", time.sleep, [(0.025,)])
    assert np.median(short.samples_us) >= 500 and np.median(long.samples_us) >= 25_000
    assert np.median(long.samples_us) > np.median(short.samples_us)


def test_graph_mode_refused_without_cuda_and_bad_arguments_named():
    h = timing.Harness("interpret", warmup=0, reps=1)
    with pytest.raises(ValueError, match="mode"):
        h.time("graph", lambda: None, [()])
    with pytest.raises(ValueError, match="input_sets"):
        h.time("eager", lambda: None, [])
    with pytest.raises(ValueError, match="device"):
        timing.Harness("cpu")
    with pytest.raises(ValueError, match="reps"):
        timing.Harness("interpret", reps=0)
    with pytest.raises(ValueError, match="warmup"):
        timing.Harness("interpret", warmup=-1)


def test_summarize_known_vector():
    s = timing.summarize(np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    assert s["median_us"] == 3.0 and s["mean_us"] == 3.0
    assert s["std_us"] == pytest.approx(np.sqrt(2.5))
    assert s["p10_us"] == pytest.approx(1.4) and s["p90_us"] == pytest.approx(4.6)
    assert s["rel_std_pct"] == pytest.approx(100 * np.sqrt(2.5) / 3)
    with pytest.raises(ValueError, match="samples_us"):
        timing.summarize(np.array([1.0, np.nan]))


@pytest.mark.gpu
@pytest.mark.skipif(not timing.cuda_available(), reason="needs a CUDA GPU")
def test_cuda_eager_and_graph_agree_on_a_memory_bound_copy():
    n = 1 << 26  # 128 MiB in bf16 halves: far past L2, a few tens of microseconds
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    h = timing.Harness("cuda", warmup=3, reps=40, graph_calls=10)
    eager = h.time("eager", lambda s, d: d.copy_(s), [(src, dst)])
    graph = h.time("graph", lambda s, d: d.copy_(s), [(src, dst)])
    assert eager.samples_us.size == 40 and graph.samples_us.size == 4
    assert graph.calls_per_sample == 10
    # A launch-insensitive copy: both methods within 25 % of each other.
    assert np.median(graph.samples_us) == pytest.approx(np.median(eager.samples_us), rel=0.25)


# -- the adaptive sampler, on a fake clock ---------------------------------------------------------


class FakeClock:
    """A nanosecond clock that only moves when a timed call says how long it took."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns

    def call(self, us: float) -> None:
        self.ns += round(us * 1e3)


def _latencies(spread_pct: float, n: int = 64, seed: int = 0) -> list[tuple]:
    """Input sets that make the fake call take 100 us x (1 + spread_pct% standard normal noise)."""
    x = 100.0 * (1 + spread_pct / 100 * np.random.default_rng(seed).standard_normal(n))
    return [(float(v),) for v in np.maximum(x, 1.0)]


def _rule(**kw) -> timing.StopRule:
    args = {
        "target_rse_pct": 1.0,
        "min_samples": 5,
        "max_samples": 200,
        "min_time_s": 0.0,
        "max_time_s": 10.0,
    }
    return timing.StopRule(**{**args, **kw})


def _adaptive(rule: timing.StopRule, sets: list[tuple]) -> timing.Measurement:
    clock = FakeClock()
    h = timing.Harness("interpret", warmup=0, reps=7, stop={"eager": rule}, clock=clock)
    return h.time("eager", clock.call, sets)


def test_rse_pct_is_the_robust_standard_error_of_the_median():
    x = 100 + np.random.default_rng(1).standard_normal(10_000)
    # sigma 1 us on 100 us: sqrt(pi/2) * 1 / sqrt(n) percent, within sampling error
    assert timing.rse_pct(x) == pytest.approx(np.sqrt(np.pi / 2) / np.sqrt(x.size), rel=0.05)
    with_outliers = np.concatenate([x, np.full(100, 1e4)])  # 1% of samples 100x slower
    assert timing.rse_pct(with_outliers) < 1.1 * timing.rse_pct(x)  # the IQR ignores them
    assert timing.rse_pct(np.array([5.0])) == np.inf


def test_fixed_sampler_records_its_reason_and_noise():
    clock = FakeClock()
    m = timing.Harness("interpret", warmup=0, reps=7, clock=clock).time("eager", clock.call, _latencies(2))
    assert m.samples_us.size == 7 and m.stop_reason == "fixed"
    assert m.rse_pct == pytest.approx(timing.rse_pct(m.samples_us))
    assert m.wall_s == pytest.approx(m.samples_us.sum() / 1e6)


def test_quiet_cell_stops_on_target_at_the_minimum_count():
    m = _adaptive(_rule(), _latencies(0.5))
    assert m.stop_reason == "target" and m.samples_us.size == 5 and m.rse_pct <= 1.0
    np.testing.assert_allclose(m.samples_us, [s[0] for s in _latencies(0.5)[:5]], atol=1e-3)


def test_noisy_cell_samples_until_the_target_then_stops():
    m = _adaptive(_rule(), _latencies(10, n=400))
    # 10% spread needs about (1.25 * 10 / 1)^2 ~ 160 samples for 1%: more than the minimum, under the cap
    assert m.stop_reason == "target" and 5 < m.samples_us.size < 200
    assert m.rse_pct <= 1.0 and m.rse_pct == pytest.approx(timing.rse_pct(m.samples_us))
    # the samples are the calls in order: rotation over the input sets continued across batches
    np.testing.assert_allclose(
        m.samples_us, [s[0] for s in _latencies(10, n=400)[: m.samples_us.size]], atol=1e-3
    )


def test_min_time_keeps_a_quiet_cell_sampling():
    m = _adaptive(_rule(min_time_s=0.002), _latencies(0.5))  # 2 ms of 100-us calls: 20 samples
    assert m.stop_reason == "target" and 20 <= m.samples_us.size < 30


def test_count_cap_stops_a_cell_that_never_meets_its_target():
    m = _adaptive(_rule(target_rse_pct=0.01, max_samples=40), _latencies(10))
    assert m.stop_reason == "count_cap" and m.samples_us.size == 40 and m.rse_pct > 0.01


def test_time_cap_stops_a_slow_noisy_cell_near_the_cap():
    m = _adaptive(_rule(target_rse_pct=0.01, max_time_s=0.003), _latencies(10))  # ~30 calls of 100 us
    assert m.stop_reason == "time_cap" and m.samples_us.size < 200
    assert 0.003 <= m.wall_s <= 0.003 + 2 * m.samples_us.max() / 1e6


def test_every_cap_keeps_the_minimum_count():
    m = _adaptive(_rule(target_rse_pct=0.01, min_samples=8, max_time_s=1e-6), _latencies(10))
    assert m.stop_reason == "time_cap" and m.samples_us.size == 8


def test_stop_rule_refuses_bad_settings_by_name():
    for kw, name in (
        ({"target_rse_pct": 0}, "target_rse_pct"),
        ({"min_samples": 1}, "min_samples"),
        ({"max_samples": 4}, "max_samples"),
        ({"min_time_s": -1}, "min_time_s"),
        ({"max_time_s": 0}, "max_time_s"),
    ):
        with pytest.raises(ValueError, match=name):
            _rule(**kw)
    with pytest.raises(ValueError, match="stop"):
        timing.Harness("interpret", stop={"eager": {"target_rse_pct": 1}})


@pytest.mark.gpu
@pytest.mark.skipif(not timing.cuda_available(), reason="needs a CUDA GPU")
def test_cuda_adaptive_sampler_stops_by_the_same_rule_in_both_modes():
    src = torch.randn(1 << 24, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    loose = timing.StopRule(target_rse_pct=5.0, min_samples=5, max_samples=50, min_time_s=0.0, max_time_s=5.0)
    # min_time_s out of reach: only the count cap can stop it, after several batches
    tight = timing.StopRule(
        target_rse_pct=5.0, min_samples=5, max_samples=12, min_time_s=1e3, max_time_s=60.0
    )
    # loose: the target stops it between the minimum and the cap (an eager copy's spread can need a
    # few samples past the minimum: 7 on the H200 once); tight: exactly at the count cap
    for rule, reason, sizes in ((loose, "target", range(5, 50)), (tight, "count_cap", [12])):
        h = timing.Harness("cuda", warmup=3, reps=40, graph_calls=10, stop={"eager": rule, "graph": rule})
        for mode in timing.MODES:
            m = h.time(mode, lambda s, d: d.copy_(s), [(src, dst)])
            assert m.stop_reason == reason and m.samples_us.size in sizes, (mode, m.stop_reason)
            assert reason != "target" or m.rse_pct <= rule.target_rse_pct
            assert m.rse_pct == pytest.approx(timing.rse_pct(m.samples_us)) and np.all(m.samples_us > 0)
    assert m.replay_us.size == 12 and m.calls_per_sample == 10  # graph: a sample is one replay


def test_a_cell_stops_on_its_own_samples_whatever_was_timed_before():
    """No state carries from one cell to the next: a cell's samples and stop are the same whether a
    quiet or a noisy candidate was timed before it (stopping never looks at other candidates)."""
    rule = _rule(target_rse_pct=0.5, max_samples=100)

    def cell_after(previous: list[tuple]) -> timing.Measurement:
        clock = FakeClock()
        h = timing.Harness("interpret", warmup=0, reps=7, stop={"eager": rule}, clock=clock)
        h.time("eager", clock.call, previous)
        return h.time("eager", clock.call, _latencies(3, seed=7))

    a, b = cell_after(_latencies(0.1, seed=1)), cell_after(_latencies(20, seed=2))
    assert a.stop_reason == b.stop_reason and a.samples_us.size == b.samples_us.size > 5
    np.testing.assert_array_equal(a.samples_us, b.samples_us)


def test_sampling_left_out_is_the_default_studys_portfolio():
    cfg = defaults.section("portfolio")
    h = timing.Harness("interpret")
    assert (h.warmup, h.reps, h.graph_calls) == (cfg["warmup_reps"], cfg["reps"], cfg["graph_calls"])
    assert timing.Harness("interpret", reps=7, graph_calls=3).replays == timing.graph_replays(7, 3)


class _FakeEvent:
    """A CUDA event stand-in: ``elapsed_time`` 0.01 ms; ``query`` from a script of answers."""

    answers: list = []

    def __init__(self, enable_timing=False):
        pass

    def record(self):
        pass

    def query(self):
        return _FakeEvent.answers.pop(0)

    def elapsed_time(self, other):
        return 0.01


def _spin_harness(monkeypatch, answers):
    import torch

    from headroom.measure import timing

    sleeps = []
    monkeypatch.setattr(torch.cuda, "Event", _FakeEvent)
    monkeypatch.setattr(torch.cuda, "_sleep", sleeps.append)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    _FakeEvent.answers = list(answers)
    h = object.__new__(timing.Harness)  # a CUDA harness without a GPU: its pieces, not its checks
    h.device, h.warmup, h.reps, h.graph_calls, h.stop = "cuda", 0, 3, 1, {}
    h.eager_method, h._cycles_per_us, h._flush_write = "spin-events", 1000.0, None
    h.untimed_s, h.spins_redone, h.work_us = dict.fromkeys(timing.UNTIMED, 0.0), 0, 0.0
    h._events = [(_FakeEvent(), _FakeEvent()) for _ in range(8)]
    ticks = iter(range(0, 10**12, 40_000))  # each clock read 40 µs later: 40 µs of enqueue per read
    h.clock = lambda: next(ticks)
    return h, sleeps


def test_a_spin_found_too_short_is_redone_longer_and_only_covered_batches_count(monkeypatch):
    # the event after the first spin has already completed when the batch is enqueued (query True):
    # the GPU waited on the host inside it, so the batch is timed again behind a longer spin
    # the GPU waited on the host inside it, so half the batch is timed again behind a longer spin,
    # and no later batch is larger: a host blocked on a full launch queue waits out any spin
    h, sleeps = _spin_harness(monkeypatch, [True, False, False, False])
    m = h._time("eager", lambda x: None, [(1,)])
    assert len(sleeps) == 4 and sleeps[1] > sleeps[0]
    assert m.method == "spin-events" and m.samples_us.tolist() == [10.0, 10.0, 10.0]
    assert m.host_us > 0  # the host's enqueue per call, measured beside the GPU time
    assert h.spins_redone == 1  # counted for the run's log


def test_the_first_spin_is_sized_from_the_warm_ups_later_calls_not_its_one_time_first_call(monkeypatch):
    # a native's first call on a shape builds its plan (a cuDNN graph: tens of ms, once); averaged
    # into the warm-up it sized each cell's first spin ~25 ms long for 10 calls of ~0.1 ms each on the
    # H200 (2026-12-04): the estimate comes from the warm-up's later half
    h, sleeps = _spin_harness(monkeypatch, [False])
    clock = FakeClock()
    h.clock, h.warmup = clock, 8
    calls = []

    def fn(x):
        clock.call(100_000.0 if not calls else 40.0)  # µs: the first call, then every other
        calls.append(x)

    m = h._time("eager", fn, [(1,)])
    assert len(calls) == 8 + 3 and m.samples_us.size == 3
    assert sleeps == [int(max(timing.SPIN_FLOOR_US, timing.SPIN_MARGIN * 40.0 * 3) * 1000.0)]
    assert h.untimed_s["eager warm-up"] == pytest.approx(0.1 + 7 * 40e-6)


def test_a_spin_that_never_covers_the_batch_fails_loudly(monkeypatch):
    from headroom.measure import timing

    h, _ = _spin_harness(monkeypatch, [True] * (timing.SPIN_RETRIES + 1))
    with pytest.raises(RuntimeError, match="the host is stalled"):
        h._time("eager", lambda x: None, [(1,)])


def test_a_natives_backend_is_held_once_around_the_whole_measurement():
    import torch

    from headroom.families.attention import runner
    from headroom.measure import timing

    seen = []
    attend = runner._causal_sdpa("math")

    def fn(q, k, v):
        seen.append(bool(runner._HELD))
        return attend(q, k, v)

    fn.hold = attend.hold
    q = torch.randn(1, 2, 4, 8)
    timing.Harness("interpret", warmup=1, reps=3).time("eager", fn, [(q, q, q)])
    assert seen == [True] * 4 and not runner._HELD  # held for warm-up and timed calls, then released
    assert torch.allclose(
        attend(q, q, q), torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)
    )


@pytest.mark.gpu
@pytest.mark.skipif(not timing.cuda_available(), reason="needs a CUDA GPU")
def test_eager_calls_on_a_busy_gpu_read_the_graph_replays_time_not_the_hosts():
    # a 64-token prefill (bf16, 32/8 heads, d128): back to back its eager figure is the host's launch
    # path (48 µs on an H200, 2026-12-02), on a busy GPU it is the kernel's (11.1 µs; graph replay 7.4:
    # the two events around each eager call cost the GPU a few µs that a replay of 20 calls amortizes)
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
    import eager_timing_check as check

    from headroom.core import defaults
    from headroom.families.attention import candidates, inputs, runner

    cfg = defaults.section("partition")
    cands = candidates.build(defaults.study()["tiles"], ["q_fused"])
    ours = next(c for c in cands.itertuples(index=False) if c.tile == 2)
    cos, sin = runner.tables(4096, cfg["head_dim"], cfg["dtype"], cfg["rope_base"], "cuda")
    row = check._row("prefill", 1, 64, 64)
    m = check.measure(runner.runner(ours, cos, sin, True), inputs.input_sets(row, 8, "cuda", seed=0))
    assert abs(m["spin_gpu_us"] - m["graph_us"]) <= max(5.0, 0.5 * m["graph_us"]), m
    assert m["back_to_back_us"] > 2 * m["spin_gpu_us"] and m["host_us"] > m["spin_gpu_us"], m


# -- work-sized counts (work_us) -------------------------------------------------------------------


def _fixed_call(clock: FakeClock, us: float, calls: list):
    def fn(x):
        clock.call(us)
        calls.append(x)

    return fn


@pytest.mark.parametrize(("call_us", "warm"), [(1000.0, 3), (400.0, 5), (10.0, 20)])
def test_work_sized_warm_up_holds_about_work_us_of_calls_within_its_bounds(call_us, warm):
    # a 1-ms MoE prefill call took 20 untimed calls a cell (24 ms) before its few timed ones
    clock, calls = FakeClock(), []
    h = timing.Harness("interpret", warmup=20, reps=4, clock=clock, work_us=2000.0)
    m = h.time("eager", _fixed_call(clock, call_us, calls), [(1,), (2,)])
    assert len(calls) == warm + 4 and m.samples_us.size == 4
    assert h.untimed_s["eager warm-up"] == pytest.approx(warm * call_us * 1e-6)


def test_work_us_zero_keeps_the_fixed_warm_up():
    clock, calls = FakeClock(), []
    h = timing.Harness("interpret", warmup=20, reps=4, clock=clock)
    h.time("eager", _fixed_call(clock, 1000.0, calls), [(1,)])
    assert h.work_us == 0.0 and len(calls) == 24


@pytest.mark.parametrize("bad", [-1.0, math.inf, math.nan, "1000"])
def test_a_bad_work_us_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="work_us must be a finite number >= 0"):
        timing.Harness("interpret", work_us=bad)


class _FakeGraph:
    """torch.cuda.CUDAGraph stand-in: capture records the calls made inside it; replay makes them."""

    capturing: list | None = None

    def __init__(self):
        self.calls = []

    def replay(self):
        for fn, args in self.calls:
            fn(*args, replaying=True)


def _fake_cuda(monkeypatch):
    import contextlib

    import torch

    @contextlib.contextmanager
    def graph(g):
        _FakeGraph.capturing = g.calls
        yield
        _FakeGraph.capturing = None

    class _Stream:
        def wait_stream(self, other):
            pass

    for name, value in {
        "Event": _FakeEvent, "synchronize": lambda: None, "CUDAGraph": _FakeGraph, "graph": graph,
        "Stream": _Stream, "current_stream": _Stream, "stream": lambda s: contextlib.nullcontext(),
    }.items():  # fmt: skip
        monkeypatch.setattr(torch.cuda, name, value)


@pytest.mark.parametrize(("call_us", "per_graph", "replays"), [(1200.0, 1, 5), (150.0, 7, 5), (21.0, 20, 5)])
def test_work_sized_graphs_hold_about_work_us_of_calls(monkeypatch, call_us, per_graph, replays):
    # graph mode's 5 replays of 20 calls were 100 calls of up to 1.2 ms a cell (89 s of a 160-s MoE
    # run on the H200): sized, a replay holds about work_us of calls, every replay still timed
    _fake_cuda(monkeypatch)
    clock, made = FakeClock(), {"calls": 0}

    def fn(x, replaying=False):
        if _FakeGraph.capturing is not None:
            _FakeGraph.capturing.append((fn, (x,)))
            return
        clock.call(call_us)
        made["calls"] += 1

    h = object.__new__(timing.Harness)
    h.device, h.warmup, h.reps, h.graph_calls, h.replays, h.work_us = "cuda", 20, 100, 20, 5, 1000.0
    h.stop, h._flush_write, h.clock = {}, None, clock
    h.untimed_s = dict.fromkeys(timing.UNTIMED, 0.0)
    h._events = [(_FakeEvent(), _FakeEvent()) for _ in range(200)]
    m = h._time("graph", fn, [(1,), (2,)])
    assert m.calls_per_sample == per_graph and m.buffer_sets == min(2, math.ceil(2 / per_graph) * per_graph)
    fixed = 5 if per_graph == 20 else timing.graph_replays(100, per_graph)
    assert m.samples_us.size == fixed  # the fixed sampler still times reps calls
    assert m.samples_us == pytest.approx(np.full(fixed, 10.0 / per_graph))  # a replay's µs per call
    warm = min(20, math.ceil(1000.0 / call_us))
    warm_replays = max(math.ceil(2 / per_graph), math.ceil(warm / per_graph))
    # the two sizing calls, the capture's warm-up on its side stream, the untimed and timed replays
    untimed = 2 + timing._CAPTURE_WARMUP_CALLS + warm_replays * per_graph
    assert made["calls"] == untimed + fixed * per_graph


@pytest.mark.gpu
@pytest.mark.skipif(not timing.cuda_available(), reason="needs a CUDA GPU")
def test_cuda_work_sized_counts_measure_a_long_call_as_the_fixed_counts_do():
    n = 1 << 29  # 1 GiB in bf16 halves, each way: a ~0.5-ms copy, far past L2
    src = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    fixed = timing.Harness("cuda", warmup=20, reps=60, graph_calls=20)
    sized = timing.Harness("cuda", warmup=20, reps=60, graph_calls=20, work_us=1000.0)
    for mode in ("eager", "graph"):
        a = fixed.time(mode, lambda s, d: d.copy_(s), [(src, dst)])
        b = sized.time(mode, lambda s, d: d.copy_(s), [(src, dst)])
        assert np.median(b.samples_us) == pytest.approx(np.median(a.samples_us), rel=0.03), mode
    assert 1 <= b.calls_per_sample <= 3 and a.calls_per_sample == 20
    assert sized.untimed_s["eager warm-up"] < fixed.untimed_s["eager warm-up"] / 3
