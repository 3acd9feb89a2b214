"""What the measure stages' tests share: the smallest trace and candidates the kernels take on the
interpreter (~0.1 s a call keeps the modules fast), a small CUDA trace, and the markers that pick
the interpreter or a GPU."""

import os
from pathlib import Path

import pandas as pd
import pytest

from headroom.core import defaults
from headroom.families.attention.candidates import build as build_candidates
from headroom.measure.timing import cuda_available

ROOT = Path(__file__).resolve().parents[2]
# In-process tests on CPU tensors need kernels built for the interpreter (conftest decides).
interpreter_only = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="kernels were imported compiled (a GPU machine)"
)
cuda_only = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") == "1" or not cuda_available(), reason="needs a CUDA GPU"
)
REPS = 2
PARTITION = {"heads_q": 2, "heads_kv": 1, "head_dim": 32, "dtype": "float32", "rope_base": 10000.0}
#: the policies section the lifecycle's dispatch timing fits its policies with
FIT = {"train_fraction": 0.5, "clusters": 2, "seed": 0}


def trace_of(rows, heads_q: int, heads_kv: int, head_dim: int, dtype: str) -> pd.DataFrame:
    """A trace of (phase, batch, q_len, kv_len) rows on one partition, invocations 0, 1, ..."""
    head = f"h{heads_q}/{heads_kv}|d{head_dim}|{dtype}"
    return pd.DataFrame(
        [
            {
                "invocation": i,
                "phase": ph,
                "batch": b,
                "q_len": q,
                "kv_len": kv,
                "heads_q": heads_q,
                "heads_kv": heads_kv,
                "head_dim": head_dim,
                "dtype": dtype,
                "shape_key": f"{ph}|b{b}|q{q}|kv{kv}|{head}",
            }
            for i, (ph, b, q, kv) in enumerate(rows)
        ]
    )


def tiny_trace() -> pd.DataFrame:
    return trace_of(
        [("prefill", 1, 16, 16), ("decode", 1, 1, 32), ("prefill", 1, 32, 32)], 2, 1, 32, "float32"
    )


def tiny_candidates() -> pd.DataFrame:
    tiles = [
        {"block_m": 16, "block_n": 16, "num_warps": 1, "num_stages": 1},
        {"block_m": 32, "block_n": 16, "num_warps": 1, "num_stages": 1},
    ]
    return build_candidates(tiles, ["unfused", "fused"], generation=1).iloc[:3].reset_index(drop=True)


def cuda_trace() -> pd.DataFrame:
    return trace_of([("prefill", 1, 256, 256), ("decode", 4, 1, 1024)], 8, 2, 64, "bfloat16")


def cuda_candidates() -> pd.DataFrame:
    """One tile crossed with every RoPE placement of the default study."""
    tiles = [{"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2}]
    return build_candidates(tiles, defaults.section("rope"))
