"""The no-op launch that measures the harness floor, and the GPU-only bfloat16 check."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import DEVICE, TOLERANCES, errors, poisoned

import kernels
from kernels import Tile, attention, reference_attention, rope_tables


def test_empty_kernel_launch_runs_and_checks_its_anchor():
    kernels.empty_kernel_launch(torch.zeros(1, device=DEVICE))
    with pytest.raises(ValueError, match="anchor"):
        kernels.empty_kernel_launch(torch.zeros(1, device="meta"))


@pytest.mark.gpu
@pytest.mark.skipif(kernels.interpreted(), reason="kernels were imported for the interpreter")
@pytest.mark.parametrize("q_len,kv_len,rotate_k", [(300, 300, True), (1, 5000, False)])
def test_bfloat16_on_gpu_head_dim_128(q_len, kv_len, rotate_k):
    """The study's dtype and head_dim, compiled: the interpreter cannot check bfloat16."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(2, 32, q_len, 128, generator=gen).to(torch.bfloat16).cuda()
    k = torch.randn(2, 8, kv_len, 128, generator=gen).to(torch.bfloat16).cuda()
    v = torch.randn(2, 8, kv_len, 128, generator=gen).to(torch.bfloat16).cuda()
    cos, sin = rope_tables(kv_len, 128, device="cuda")
    ref = reference_attention(q, k, v, cos, sin, rotate_k=rotate_k)
    for fused in (False, True):
        out = attention(
            q,
            k,
            v,
            cos,
            sin,
            tile=Tile(64, 64, 4, 3),
            fused=fused,
            rotate_k=rotate_k,
            out=poisoned(q.shape, torch.bfloat16),
        )
        rel, abs_ = errors(out, ref)
        assert rel <= TOLERANCES[torch.bfloat16][0] and abs_ <= TOLERANCES[torch.bfloat16][1]
