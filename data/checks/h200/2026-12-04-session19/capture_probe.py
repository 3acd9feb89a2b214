"""Where a CUDA Graph capture's ~4 ms go (issue 36: the portfolio runs spend 11-16 s a run capturing,
data/reference/h200/default-flashinfer-6x160's log). Captures 4 calls of a small attention-sized body
(allocating its output inside the capture, as our runner does) N times per way, and replays each
graph 20 times timed by CUDA events:
  torch-graph      `with torch.cuda.graph(g)` (what headroom.measure.timing.Harness._capture does:
                   synchronize, empty_cache and the host cache emptied before each capture)
  raw-shared-pool  g.capture_begin(pool)/capture_end() on a side stream, one pool for all graphs
Run on the H200 from the repository root: python3 data/checks/h200/2026-12-04-session19/capture_probe.py
"""

import statistics
import time

import torch

N, CALLS, REPLAYS = 200, 4, 20
dev = "cuda"
q = torch.randn(32, 32, 1, 128, device=dev, dtype=torch.bfloat16)
k = torch.randn(32, 8, 2048, 128, device=dev, dtype=torch.bfloat16)
v = torch.randn_like(k)


def body():
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    return out * 1.0


def replay_us(graphs):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for g in graphs[:20]:
        g.replay()
        torch.cuda.synchronize()
        for _ in range(REPLAYS):
            s.record()
            g.replay()
            e.record()
            torch.cuda.synchronize()
            out.append(1e3 * s.elapsed_time(e))
    return statistics.median(out)


def torch_graph():
    graphs = []
    for _ in range(N):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(CALLS):
                body()
        graphs.append(g)
    return graphs


def raw_shared_pool():
    graphs, pool, stream = [], torch.cuda.graph_pool_handle(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(N):
            g = torch.cuda.CUDAGraph()
            g.capture_begin(pool=pool)
            for _ in range(CALLS):
                body()
            g.capture_end()
            graphs.append(g)
    torch.cuda.current_stream().wait_stream(stream)
    return graphs


s = torch.cuda.Stream()
s.wait_stream(torch.cuda.current_stream())
with torch.cuda.stream(s):
    for _ in range(3):
        body()
torch.cuda.current_stream().wait_stream(s)
torch.cuda.synchronize()
print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {N} captures of {CALLS} calls each way")
for name, way in (("torch-graph", torch_graph), ("raw-shared-pool", raw_shared_pool)) * 2:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    graphs = way()
    torch.cuda.synchronize()
    ms = 1e3 * (time.perf_counter() - t0) / N
    print(f"{name:16s} {ms:6.2f} ms a capture; replay median {replay_us(graphs):7.2f} us")
    del graphs
