"""Attention kernels against the float64 reference: random shapes, every tile, both paths."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_helpers import (
    DEVICE,
    DTYPES,
    assert_close,
    draw_shape,
    poisoned,
    problem_shape,
    random_qkv,
    seeded_inputs,
)

import kernels
from kernels import (
    Tile,
    attention,
    attention_unrotated,
    decode_block_m,
    decode_split_plan,
    gen1,
    reference_attention,
    rope_tables,
)
from kernels.launch import LOG2E
from kernels.mode import MIN_SPLIT_KEYS

ROOT = Path(__file__).resolve().parents[2]
# Small tiles keep the interpreter fast on the random shapes; the study's own tiles are checked
# one by one below.
SMALL_TILES = [
    Tile(16, 16, 4, 2),
    Tile(32, 16, 4, 3),
    Tile(16, 32, 2, 1),
    Tile(32, 32, 4, 2),
    Tile(64, 32, 4, 2),
]


def study_tiles() -> list[Tile]:
    cfg = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    return [Tile.from_mapping(t) for t in cfg["tiles"]]


@st.composite
def cases(draw):
    return dict(
        draw_shape(draw, [1, 2, 3, 4, 8]),
        tile=draw(st.sampled_from(SMALL_TILES)),
        fused=draw(st.booleans()),
        path=draw(st.sampled_from([None, "prefill", "decode"])),
    )


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_matches_reference_on_random_shapes(case):
    """Any 1 <= Sq <= Skv, GQA ratio 1-8, strided or not, either kernel path, fused or not,
    either rotate_k mode: the output matches float64 and every element is written."""
    gen = torch.Generator().manual_seed(case["seed"])
    q, k, v = random_qkv(*problem_shape(case), case["dtype"], gen, strided=case["strided"])
    cos, sin = rope_tables(case["kv_len"] + 5, case["head_dim"], device=DEVICE)
    out = poisoned(q.shape, case["dtype"])
    if case["path"] is None:
        attention(
            q, k, v, cos, sin, tile=case["tile"], fused=case["fused"], rotate_k=case["rotate_k"], out=out
        )
    else:
        gen1.run(
            q,
            k,
            v,
            cos,
            sin,
            out,
            case["tile"],
            fused=case["fused"],
            rotate_k=case["rotate_k"],
            path=case["path"],
        )
    ref = reference_attention(q, k, v, cos, sin, rotate_k=case["rotate_k"])
    assert_close(out, ref, case["dtype"], str(case))


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("tile", study_tiles(), ids=lambda t: t.name)
def test_every_study_tile(tile, fused):
    """Each configured tile on a prefill shape (Sq = Skv, rotate_k) and a decode shape (Sq = 1,
    rotated cache), with lengths that are not multiples of any block size."""
    gen = torch.Generator().manual_seed(hash((tile, fused)) % 2**31)
    dtype = DTYPES[0]
    for q_len, kv_len, rotate_k in ((45, 45, True), (1, 77, False)):
        q, k, v = random_qkv(1, 4, 2, q_len, kv_len, 32, dtype, gen)
        cos, sin = rope_tables(kv_len, 32, device=DEVICE)
        out = attention(
            q, k, v, cos, sin, tile=tile, fused=fused, rotate_k=rotate_k, out=poisoned(q.shape, dtype)
        )
        ref = reference_attention(q, k, v, cos, sin, rotate_k=rotate_k)
        assert_close(out, ref, dtype, f"{tile.name} fused={fused} Sq={q_len} Skv={kv_len}")


def test_decode_split_path_is_taken_and_correct():
    """A long cache with one KV head: the plan splits, and the merged result is right even for
    a chunk (Sq > 1) whose early rows see no key of the later splits."""
    tile = Tile(16, 16, 4, 2)
    kv_len, group = 96, 4
    assert decode_block_m(tile, group) == 16  # one row block: the launch has B * Hkv = 1 program
    num_splits, split_len = decode_split_plan(1, kv_len, kernels.mode.sm_count(torch.device(DEVICE)))
    assert num_splits > 1 and (num_splits - 1) * split_len < kv_len <= num_splits * split_len
    gen = torch.Generator().manual_seed(7)
    dtype = DTYPES[-1]
    for q_len in (1, 30):
        q, k, v = random_qkv(1, group, 1, q_len, kv_len, 64, dtype, gen)
        cos, sin = rope_tables(kv_len, 64, device=DEVICE)
        out = poisoned(q.shape, dtype)
        gen1.run(q, k, v, cos, sin, out, tile, fused=True, rotate_k=False, path="decode")
        assert_close(
            out, reference_attention(q, k, v, cos, sin, rotate_k=False), dtype, f"decode split Sq={q_len}"
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_long_fused_key_rotation(dtype):
    """Fused prefill rotates every key block of a long cache at its own positions (a chunk of 5
    queries over 1200 keys in 75 blocks of 16)."""
    gen = torch.Generator().manual_seed(13)
    q, k, v = random_qkv(1, 2, 1, 5, 1200, 64, dtype, gen)
    cos, sin = rope_tables(1200, 64, device=DEVICE)
    out = attention(
        q, k, v, cos, sin, tile=Tile(16, 16, 4, 2), fused=True, rotate_k=True, out=poisoned(q.shape, dtype)
    )
    assert_close(out, reference_attention(q, k, v, cos, sin, rotate_k=True), dtype, "long fused")


def test_split_plan_follows_the_gpu_not_the_tile():
    sms = 132
    # enough programs already: no split
    assert decode_split_plan(4 * sms, 32768, sms) == (1, 32768)
    splits, length = decode_split_plan(8, 32768, sms)
    assert splits > 1 and splits * 8 >= 4 * sms // 2 and splits * length >= 32768
    # short caches never split below the minimum split length
    assert decode_split_plan(8, MIN_SPLIT_KEYS, sms)[0] == 1


def test_attention_unrotated_is_attention_of_rotated_inputs():
    dtype = DTYPES[0]
    q, k, v, cos, sin = seeded_inputs(3, (2, 4, 2, 19, 19, 32), 19, dtype)
    qr = kernels.rope(q, cos, sin, 0)
    kr = kernels.rope(k, cos, sin, 0)
    out = attention_unrotated(qr, kr, v, tile=SMALL_TILES[0], out=poisoned(q.shape, dtype))
    assert_close(out, reference_attention(q, k, v, cos, sin, rotate_k=True), dtype, "unrotated")


def test_fused_and_unfused_agree_closely():
    """Same tile, same rounding points: fused and unfused differ only by summation order."""
    dtype = DTYPES[0]
    q, k, v, cos, sin = seeded_inputs(11, (1, 4, 1, 33, 33, 64), 33, dtype)
    a = attention(q, k, v, cos, sin, tile=SMALL_TILES[1], fused=True, rotate_k=True)
    b = attention(q, k, v, cos, sin, tile=SMALL_TILES[1], fused=False, rotate_k=True)
    assert (a.double() - b.double()).abs().max().item() <= 2 * torch.finfo(dtype).eps * 4


def _sdpa_reference(q, k, v, cos, sin, rotate_k):
    """An independent float64 check of reference_attention: HF-style full-width tables,
    rotate_half, repeat_interleave for GQA and torch's SDPA with an explicit boolean mask."""

    def rotate(x, offset):
        seq = x.shape[2]
        c = torch.cat((cos, cos), dim=-1)[offset : offset + seq].double()
        s = torch.cat((sin, sin), dim=-1)[offset : offset + seq].double()
        x1, x2 = x.double().chunk(2, dim=-1)
        return x.double() * c + torch.cat((-x2, x1), dim=-1) * s

    q_len, kv_len = q.shape[2], k.shape[2]
    group = q.shape[1] // k.shape[1]
    qr = rotate(q, kv_len - q_len)
    kr = rotate(k, 0) if rotate_k else k.double()
    allowed = torch.ones(q_len, kv_len, dtype=torch.bool).tril(diagonal=kv_len - q_len)
    return torch.nn.functional.scaled_dot_product_attention(
        qr,
        kr.repeat_interleave(group, 1),
        v.double().repeat_interleave(group, 1),
        attn_mask=allowed.to(q.device),
    )


@pytest.mark.parametrize("q_len,kv_len,rotate_k", [(9, 9, True), (3, 14, False), (1, 6, True)])
def test_reference_matches_independent_torch(q_len, kv_len, rotate_k):
    q, k, v, cos, sin = seeded_inputs(5, (2, 6, 2, q_len, kv_len, 32), kv_len)
    ref = reference_attention(q, k, v, cos, sin, rotate_k=rotate_k)
    assert ref.dtype == torch.float64
    torch.testing.assert_close(ref, _sdpa_reference(q, k, v, cos, sin, rotate_k), rtol=1e-12, atol=1e-12)


def test_softmax_scale_is_inverse_sqrt_head_dim():
    """One key: output = v. Two identical keys: the mean of the two values."""
    q, k, v, cos, sin = seeded_inputs(2, (1, 1, 1, 1, 1, 32), 2)
    out = attention(q, k, v, cos, sin, tile=SMALL_TILES[0], fused=True, rotate_k=False)
    torch.testing.assert_close(out, v)
    assert math.isclose(LOG2E, 1 / math.log(2), rel_tol=1e-15)
