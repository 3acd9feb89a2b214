"""Hand-built measurement sets with known answers, shared by the analysis tests (no GPU).

Shapes are tiny named keys; latencies come from a function of (shape_key, tile, fused) so each test
states its surface in one line and can compute the expected figures by hand.
"""

from __future__ import annotations

import pandas as pd

# name -> (phase, batch, q_len, kv_len); heads and head_dim fixed (GQA 4:2, D=32, float16).
SHAPES = {
    "A": ("prefill", 1, 256, 256),
    "B": ("prefill", 1, 4096, 4096),  # alone in its bucket
    "C": ("decode", 8, 1, 1024),
    "D": ("decode", 32, 1, 8192),  # only ever in a test split when a test asks for an unseen key
    "A2": ("prefill", 1, 200, 200),  # same bucket as A (pow2 ceilings 256, 256, batch 1)
}
TILES = 3


def trace(sequence: str | list[str]) -> pd.DataFrame:
    """Trace rows for a sequence of shape names, invocation = position (chronological)."""
    rows = []
    for i, name in enumerate(sequence):
        phase, batch, q_len, kv_len = SHAPES[name]
        rows.append(
            {
                "invocation": i,
                "phase": phase,
                "batch": batch,
                "q_len": q_len,
                "kv_len": kv_len,
                "heads_q": 4,
                "heads_kv": 2,
                "head_dim": 32,
                "dtype": "float16",
                "shape_key": name,
            }
        )
    return pd.DataFrame(rows)


def candidates(tiles: int = TILES) -> pd.DataFrame:
    rows = []
    for tile in range(tiles):
        for fused in (False, True):
            rows.append(
                {
                    "candidate": f"t{tile}-{'fused' if fused else 'unfused'}",
                    "tile": tile,
                    "block_m": 64,
                    "block_n": 32 * (tile + 1),
                    "num_warps": 4,
                    "num_stages": 2,
                    "fused": fused,
                }
            )
    return pd.DataFrame(rows)


def timings(
    tr: pd.DataFrame, latency, runs=(1, 2, 3), modes=("eager",), std_us: float = 0.0, reps: int = 100
):
    """Portfolio rows: latency(shape_key, tile, fused, run, mode, invocation) -> median_us."""
    rows = []
    cands = candidates()
    for run in runs:
        for mode in modes:
            for _, inv in tr.iterrows():
                for _, c in cands.iterrows():
                    us = float(
                        latency(
                            inv["shape_key"],
                            int(c["tile"]),
                            bool(c["fused"]),
                            run,
                            mode,
                            int(inv["invocation"]),
                        )
                    )
                    rows.append(
                        {
                            "run": run,
                            "pid": 1000 + run,
                            "mode": mode,
                            "invocation": int(inv["invocation"]),
                            "shape_key": inv["shape_key"],
                            "candidate": c["candidate"],
                            "tile": int(c["tile"]),
                            "fused": bool(c["fused"]),
                            "median_us": us,
                            "mean_us": us,
                            "p10_us": us,
                            "p90_us": us,
                            "std_us": std_us,
                            "reps": reps,
                        }
                    )
    return pd.DataFrame(rows)


def with_native(tm: pd.DataFrame, factor, backend: str = "sdpa-cudnn") -> pd.DataFrame:
    """The timings with our candidates' backend ('triton') and a native candidate beside them,
    'native-<backend>' (no tile: -1; unfused, RoPE by our standalone kernel): on each row t0-unfused's
    latency times ``factor(shape_key)``."""
    ours = tm.assign(backend="triton")
    native = ours[ours["candidate"] == "t0-unfused"].copy()
    scale = native["shape_key"].map(factor).astype(float)
    for c in ("median_us", "mean_us", "p10_us", "p90_us"):
        native[c] = native[c] * scale
    native = native.assign(candidate=f"native-{backend}", tile=-1, fused=False, backend=backend)
    return pd.concat([ours, native], ignore_index=True)


def candidates_with(*backends: str) -> pd.DataFrame:
    """``candidates()`` (backend 'triton') and a native row per backend, as with_native names them."""
    native = [
        {"candidate": f"native-{b}", "tile": -1, "block_m": 0, "block_n": 0, "num_warps": 0,
         "num_stages": 0, "fused": False, "backend": b, "rope": "unfused"}
        for b in backends
    ]  # fmt: skip
    ours = candidates().assign(backend="triton", rope=None)  # generation 1: placement from fused
    return pd.concat([ours, pd.DataFrame(native)], ignore_index=True)


BASE_US = {"A": 100.0, "B": 400.0, "C": 50.0, "D": 80.0, "A2": 90.0}


def flat(key, tile, fused, run, mode, inv):
    return BASE_US[key]


def environment(device: str = "cuda") -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "device": device,
                "gpu_name": "NVIDIA H200" if device == "cuda" else "cpu",
                "sm_count": 132,
                "l2_bytes": 50 * 2**20,
            }
        ]
    )


def graph_sweep(graph_speedup: float = 1.03, eager_speedup: float = 2.5, status: str = "ok") -> pd.DataFrame:
    rows = []
    for regime, ws in (("l2-resident", 10 * 2**20), ("spilled", 400 * 2**20)):
        for mode, speedup in (("eager", eager_speedup), ("graph", graph_speedup)):
            for fused in (False, True):
                us = 100.0 * speedup if not fused else 100.0
                rows.append(
                    {
                        "regime": regime,
                        "working_set_bytes": ws,
                        "l2_bytes": 50 * 2**20,
                        "mode": mode,
                        "fused": fused,
                        "tile": 0,
                        "shape_key": "A",
                        "median_us": us if status == "ok" else float("nan"),
                        "status": status,
                        "reason": "" if status == "ok" else "CUDA Graphs need a GPU (device: interpret)",
                    }
                )
    return pd.DataFrame(rows)


def calibration(l2_bytes: float = 50 * 2**20) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {
                "name": "hbm_bytes_per_s",
                "value": 4.0e12,
                "unit": "bytes/s",
                "working_set_bytes": 8 * l2_bytes,
                "regime": "hbm",
                "status": "ok",
            },
            # measured inside L2: must never be taken as HBM bandwidth
            {
                "name": "hbm_bytes_per_s",
                "value": 9.0e12,
                "unit": "bytes/s",
                "working_set_bytes": l2_bytes / 4,
                "regime": "hbm",
                "status": "ok",
            },
            {
                "name": "l2_bytes_per_s",
                "value": 1.0e13,
                "unit": "bytes/s",
                "working_set_bytes": l2_bytes / 4,
                "regime": "l2",
                "status": "ok",
            },
            {
                "name": "launch_eager_us",
                "value": 5.0,
                "unit": "us",
                "working_set_bytes": 0,
                "regime": "launch",
                "status": "ok",
            },
            {
                "name": "launch_graph_us",
                "value": 1.0,
                "unit": "us",
                "working_set_bytes": 0,
                "regime": "launch",
                "status": "ok",
            },
            {
                "name": "matmul_flops_per_s",
                "value": 5.0e14,
                "unit": "flop/s",
                "working_set_bytes": 0,
                "regime": "compute",
                "status": "ok",
            },
        ]
    )


def lifecycle() -> pd.DataFrame:
    rows = [
        {"kind": "compile", "candidate": c, "policy": None, "value": 2.0, "unit": "s"}
        for c in candidates()["candidate"]
    ]
    rows += [
        {"kind": "cache", "candidate": c, "policy": None, "value": 1.0e5, "unit": "bytes"}
        for c in candidates()["candidate"]
    ]
    rows += [
        {"kind": "dispatch", "candidate": None, "policy": p, "value": v, "unit": "ns"}
        for p, v in (
            ("global", 0.0),
            ("exact-key", 150.0),
            ("bucketed", 300.0),
            ("clustered", 2000.0),
            ("regret-aware", 150.0),
        )
    ]
    rows.append({"kind": "switch", "candidate": None, "policy": None, "value": 3.0, "unit": "us"})
    return pd.DataFrame(rows)
