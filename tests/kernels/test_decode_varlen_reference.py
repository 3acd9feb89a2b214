"""The chunked float64 reference (kernels.reference_attention_chunked) is the plain reference,
chunk by chunk: for chunks over a cache (q_len < kv_len, bottom-right causal, query RoPE offset),
with rotated and un-rotated keys, and per sequence for ragged kv_lens. Plain torch on the CPU."""

from __future__ import annotations

import pytest
import torch

from kernels import reference_attention, reference_attention_chunked, rope_tables


def _qkv(batch, heads_q, heads_kv, q_len, kv_len, seed=0, head_dim=32):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads_q, q_len, head_dim, generator=gen)
    k = torch.randn(batch, heads_kv, kv_len, head_dim, generator=gen)
    return q, k, torch.randn(k.shape, generator=gen)


@pytest.mark.parametrize("rotate_k", [True, False])
@pytest.mark.parametrize("q_len,kv_len", [(5, 37), (1, 300), (7, 7), (64, 200)])
def test_chunks_give_the_plain_reference(q_len, kv_len, rotate_k):
    """chunk_elements=200 forces several query blocks and key chunks on every shape."""
    q, k, v = _qkv(2, 4, 2, q_len, kv_len)
    cos, sin = rope_tables(kv_len, 32)
    plain = reference_attention(q, k, v, cos, sin, rotate_k=rotate_k)
    chunked = reference_attention_chunked(q, k, v, cos, sin, rotate_k=rotate_k, chunk_elements=200)
    assert (plain - chunked).abs().max().item() < 1e-12


@pytest.mark.parametrize("q_len", [1, 3])
def test_ragged_lengths_are_each_sequence_alone(q_len):
    """Sequence b with kv_lens[b] keys is the plain reference on its first kv_lens[b] keys; the
    padding after them changes nothing."""
    lens = [q_len, 50, 17]
    q, k, v = _qkv(3, 2, 1, q_len, 50, seed=1)
    cos, sin = rope_tables(50, 32)
    kv_lens = torch.tensor(lens, dtype=torch.int32)
    chunked = reference_attention_chunked(
        q, k, v, cos, sin, rotate_k=True, kv_lens=kv_lens, chunk_elements=64
    )
    for b, n in enumerate(lens):
        alone = reference_attention(
            q[b : b + 1], k[b : b + 1, :, :n], v[b : b + 1, :, :n], cos, sin, rotate_k=True
        )
        assert (chunked[b : b + 1] - alone).abs().max().item() < 1e-12, f"sequence {b} (kv_len {n})"


def test_lengths_shorter_than_the_queries_are_refused():
    q, k, v = _qkv(2, 2, 2, 4, 8)
    cos, sin = rope_tables(8, 32)
    with pytest.raises(ValueError, match="must lie in 4..8"):
        reference_attention_chunked(q, k, v, cos, sin, rotate_k=True, kv_lens=torch.tensor([3, 8]))
