"""The decoder-layer model: attention plus the GEMMs of one decoder layer, timed at the machine's
calibrated rates. The recommendation states what a figure is worth per layer with it; the decision
charges an eager call's host time with it, only where the host, not the GPU, bounds the layer.

A decoder layer is attention plus its GEMMs: q/k/v/o projections and a gated MLP of three matrices of
width ``intermediate_ratio`` x the model width (heads_q x head_dim; Llama-3-8B: 14336 / 4096 = 3.5),
over the invocation's batch x q_len tokens, at calibrate's matmul rate or the HBM read of their
weights, whichever is slower (decode GEMMs are weight-bound).

Host bound (eager mode): a server's CPU enqueues a layer's kernels while the GPU runs earlier ones, so
the layer costs max(GPU time, host time). Its GPU time is the attention call's (``median_us``, timed
on a busy GPU) plus the GEMMs'; its host time the attention call's enqueue (``host_us``) plus the
GEMMs' launches (``GEMMS_PER_LAYER`` x calibrate's per-launch host cost, where calibrate measured it).
The attention figure a policy is scored on gains the host time the GPU does not hide:
max(0, host - GPU).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pandas as pd

from headroom.core.contracts import dtype_bytes

# q, k, v, o projections and the MLP's gate, up and down: the kernel launches of a layer besides attention
GEMMS_PER_LAYER = 7
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def rate(calibration: pd.DataFrame | None, name: str) -> float:
    """An ok calibrate row's value; NaN where not measured (the CPU)."""
    ok = pd.DataFrame() if calibration is None else calibration[calibration["name"] == name]
    if "status" in ok.columns:
        ok = ok[ok["status"].astype(str) == "ok"]
    value = float(ok["value"].iloc[0]) if len(ok) and pd.notna(ok["value"].iloc[0]) else math.nan
    return value if value > 0 else math.nan


def rates(calibration: pd.DataFrame | None) -> tuple[float, float]:
    """(matmul FLOP/s, HBM bytes/s) of calibrate's ok rows; NaN where not measured."""
    return rate(calibration, "matmul_flops_per_s"), rate(calibration, "hbm_bytes_per_s")


def gemm_us(features: pd.DataFrame, intermediate_ratio: float, flops_per_s: float, bytes_per_s: float):
    """(n,) µs of a decoder layer's GEMMs per invocation (see the module docstring)."""
    f = features
    width = f["heads_q"].to_numpy(float) * f["head_dim"].to_numpy(float)
    kv = f["heads_kv"].to_numpy(float) * f["head_dim"].to_numpy(float)
    params = width * (width + 2 * kv) + width * width + 3 * width * intermediate_ratio * width
    tokens = f["batch"].to_numpy(float) * f["q_len"].to_numpy(float)
    item = np.array([dtype_bytes(d) for d in f["dtype"].astype(str)], dtype=float)
    return np.maximum(2.0 * tokens * params / flops_per_s, params * item / bytes_per_s) * 1e6


def host_bound(md, calibration: pd.DataFrame | None, intermediate_ratio: float):
    """The mode's timings with each eager call's exposed host time added (the module docstring):
    unchanged in graph mode, without ``host_us``, or without the rates a layer needs."""
    flops, bw = rates(calibration)
    if md.mode != "eager" or md.host_us is None or not (math.isfinite(flops) and math.isfinite(bw)):
        return md
    launch = rate(calibration, "launch_host_us")
    other_host = GEMMS_PER_LAYER * (launch if math.isfinite(launch) else 0.0)
    gpu = md.us + gemm_us(md.features, intermediate_ratio, flops, bw)[None, :, None]
    exposed = np.maximum(0.0, md.host_us + other_host - gpu)
    return replace(md, us=md.us + exposed)
