"""Long contexts on the GPU (issue 22, item 5): the correctness gate on a prefill chunk of 512
queries over a 131,072-token cache and on a ragged decode of 8 sequences from 1 to 131,072 tokens,
Llama-3-8B heads (32 query, 8 KV, head_dim 128) in bfloat16, against the chunked float64
reference. Our kernels must pass; a native backend passes or is recorded `unsupported` with its
reason (never a wrong answer or another error). And a decode and a prefill chunk whose cache holds more
than 2**31 elements (17 sequences x 8 heads x 131,072 keys x 128): the Mooncake study's decode batches
do (up to 2.9e9), and 32-bit batch offsets read outside the cache there. Run on the H200:

    pytest -m gpu -x -q -s tests/measure/test_long_context_gpu.py
"""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from headroom.core import defaults
from headroom.families.attention import correctness as attention
from headroom.families.attention.candidates import build
from headroom.measure import correctness

pytestmark = pytest.mark.gpu

TILES = [{"block_m": 128, "block_n": 64, "num_warps": 8, "num_stages": 3}]
LOG = logging.getLogger("test.long_context")
LENGTHS = [131072, 1, 17, 4096, 65536, 300, 9000, 2]


def _shape(phase, batch, q_len, kv_len, kv_lens=None) -> pd.DataFrame:
    row = dict(
        invocation=0, phase=phase, batch=batch, q_len=q_len, kv_len=kv_len, heads_q=32, heads_kv=8,
        head_dim=128, dtype="bfloat16", shape_key=f"{phase}|b{batch}|q{q_len}|kv{kv_len}", kv_lens=kv_lens,
    )  # fmt: skip
    return attention.shapes(pd.DataFrame([row]))


def _check(cands: pd.DataFrame, shapes: pd.DataFrame) -> pd.DataFrame:
    tol = correctness.tolerances(defaults.section("correctness"))
    out = attention.check(cands, shapes, device="cuda", tolerances_by_dtype=tol, log=LOG)
    print(out[["candidate", "status", "rel_err", "max_abs_err", "reason"]].to_string())
    ours = out["candidate"].str.startswith("t")
    assert (out.loc[ours, "status"] == "passed").all(), out.loc[ours & ~out["passed"], "reason"].tolist()
    assert out.loc[~ours, "status"].isin(["passed", "unsupported"]).all()
    return out


def test_a_prefill_chunk_over_a_131k_cache():
    """q_len 512 < kv_len 131,072: bottom-right causal, queries rotated at 130,560.., the cache
    not re-rotated; natives through causal_lower_right."""
    cands = build(TILES, ["unfused", "fused", "q_fused"], ["flash", "efficient", "cudnn"])
    out = _check(cands, _shape("prefill", 1, 512, 131072))
    assert not out["rotate_k"].any()


def test_a_long_ragged_decode():
    """Lengths 1 .. 131,072 in one batch: the varlen family and FlexAttention's length mask against
    the ragged reference, generation 2 on the padded batch against the padded one."""
    cands = build(TILES, ["q_fused"], ["flex", "flash", "efficient"], varlen=True)
    out = _check(cands, _shape("decode", len(LENGTHS), 1, max(LENGTHS), LENGTHS))
    assert out.loc[out["candidate"].str.endswith("varlen"), "passed"].all()


# 17 x 8 x 131,072 x 128 = 2.28e9 elements per cache: batch offsets past 2**31 from sequence 16 on
PAST_INT32 = (17, 131072)


def test_caches_past_two_to_the_31_elements():
    """Decode (every placement, the padded batch) and the varlen decode with its longest sequence
    last, then a prefill chunk of 64 queries, each over a cache whose last sequences start past
    2**31 elements: 32-bit offsets (b * stride_kb) wrapped there and read outside the cache (CUDA
    illegal address in the Mooncake study, 2026-12-01)."""
    batch, kv = PAST_INT32
    assert batch * 8 * kv * 128 > 2**31
    lengths = [kv // (i + 2) for i in range(batch - 1)] + [kv]
    cands = build(TILES, ["unfused", "fused", "q_fused"], varlen=True)
    _check(cands, _shape("decode", batch, 1, kv, lengths))
    _check(build(TILES, ["unfused", "fused", "q_fused"]), _shape("prefill", batch, 64, kv))
