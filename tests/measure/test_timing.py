"""The timing harness on plain torch callables (host clock); CUDA paths in GPU-marked tests."""

import time

import numpy as np
import pytest
import torch

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
