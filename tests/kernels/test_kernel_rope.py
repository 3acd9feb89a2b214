"""Standalone RoPE kernel and tables against plain torch rotate-half."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from kernel_helpers import DEVICE, DTYPES, poisoned

from kernels import rope, rope_tables


def torch_rotate_half(x, cos_full, sin_full, offset):
    """The Hugging Face formulation: x * cos + rotate_half(x) * sin with full-width tables."""
    seq = x.shape[2]
    c, s = cos_full[offset : offset + seq].double(), sin_full[offset : offset + seq].double()
    x1, x2 = x.double().chunk(2, dim=-1)
    return x.double() * c + torch.cat((-x2, x1), dim=-1) * s


def test_tables_follow_the_formula():
    cos, sin = rope_tables(7, 8, base=500.0, dtype=torch.float64)
    assert cos.shape == sin.shape == (7, 4)
    for p in (0, 3, 6):
        for i in range(4):
            angle = p * 500.0 ** (-2 * i / 8)
            assert math.isclose(cos[p, i].item(), math.cos(angle), rel_tol=1e-12, abs_tol=1e-15)
            assert math.isclose(sin[p, i].item(), math.sin(angle), rel_tol=1e-12, abs_tol=1e-15)


@settings(max_examples=15, deadline=None)
@given(
    batch=st.integers(1, 2),
    heads=st.integers(1, 3),
    seq=st.integers(1, 150),
    head_dim=st.sampled_from([32, 64, 128]),
    offset=st.integers(0, 20),
    dtype=st.sampled_from(DTYPES),
    strided=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_rope_matches_torch_rotate_half(batch, heads, seq, head_dim, offset, dtype, strided, seed):
    gen = torch.Generator().manual_seed(seed)
    shape = (batch, seq, heads, head_dim) if strided else (batch, heads, seq, head_dim)
    x = torch.randn(shape, generator=gen).to(dtype).to(DEVICE)
    if strided:
        x = x.transpose(1, 2)
    cos, sin = rope_tables(offset + seq, head_dim, device=DEVICE)
    out = rope(x, cos, sin, offset, out=poisoned((batch, heads, seq, head_dim), dtype))
    expected = torch_rotate_half(x, torch.cat((cos, cos), -1), torch.cat((sin, sin), -1), offset)
    assert out.isnan().sum().item() == 0
    # one rounding of a float32 result to dtype: half a unit in the last place of |x| <= ~5
    bound = 5 * torch.finfo(dtype).eps
    assert (out.double() - expected).abs().max().item() <= bound


def test_rope_preserves_pair_norms():
    """Rotation is orthogonal on each (d, d + D/2) pair."""
    x = torch.randn(1, 2, 40, 64).to(DTYPES[-1]).to(DEVICE)
    cos, sin = rope_tables(40, 64, device=DEVICE)
    out = rope(x, cos, sin, 0).double()
    pair = lambda t: t[..., :32] ** 2 + t[..., 32:] ** 2  # noqa: E731
    torch.testing.assert_close(pair(out), pair(x.double()), rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("offset", [0, 9])
def test_position_zero_is_identity(offset):
    x = torch.randn(1, 1, 3, 32).to(DTYPES[0]).to(DEVICE)
    cos, sin = rope_tables(12, 32, device=DEVICE)
    out = rope(x, cos, sin, offset)
    if offset == 0:
        torch.testing.assert_close(out[:, :, 0], x[:, :, 0])
    else:
        assert not torch.equal(out[:, :, 0], x[:, :, 0])
