"""How long a CUDA process takes to end after its last line, ending normally (the interpreter's
teardown) or through os._exit (headroom.core.stage.end_process), on one host: each run a fresh
process doing what a portfolio run holds at its end (cuDNN SDPA and FlexAttention through Inductor on
several shapes, graphs captured and dropped), the two ways alternating.
    python3 exit_cost.py ROUNDS > exit_cost.txt"""

import subprocess
import sys
import time

CHILD = r"""
import os, sys, time
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.nn.attention.flex_attention import flex_attention

flex = torch.compile(flex_attention, dynamic=False)
for s, kv in [(1, 512), (1, 2048), (1, 4096), (128, 128), (256, 1024), (512, 512), (1024, 1024)]:
    q = torch.randn(4, 32, s, 128, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(4, 32, kv, 128, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        F.scaled_dot_product_attention(q, k, v)
    flex(q, k, v)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        F.scaled_dot_product_attention(q, k, v)
        torch.cuda.synchronize()
        for _ in range(40):
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                F.scaled_dot_product_attention(q, k, v)
            g.replay()
            del g
torch.cuda.synchronize()
print(time.time(), flush=True)
if sys.argv[1] == "os._exit":
    sys.stdout.flush()
    os._exit(0)
"""


def one(way: str) -> tuple[float, float]:
    t0 = time.time()
    child = subprocess.Popen([sys.executable, "-c", CHILD, way], stdout=subprocess.PIPE, text=True)
    last = float(child.stdout.readline())
    rc = child.wait()
    end = time.time()
    if rc != 0:
        raise SystemExit(f"{way}: exit status {rc}")
    return end - last, end - t0


for r in range(int(sys.argv[1])):
    for way in ("teardown", "os._exit"):
        ending, whole = one(way)
        print(
            f"round {r + 1} {way:9s}: {ending:.2f} s after its last line ({whole:.1f} s in all)", flush=True
        )
