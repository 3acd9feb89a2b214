"""Generation 3, the variable-length decode (kernels/decode_varlen.py), on the current Triton mode
(the interpreter on CPU): ragged kv_lens against the float64 chunked reference, poisoned outputs
and padding, the one-split and split paths, plan reuse with new lengths, and the input checks."""

from __future__ import annotations

import pytest
import torch
from kernel_helpers import DEVICE, DTYPES, assert_close, poisoned

import kernels
from kernels import Tile, decode_varlen, plan_decode_varlen, reference_attention_chunked, rope_tables

TILE = Tile(32, 16, 4, 2)
HEAD_DIM = 32


def _inputs(lens, heads_q, heads_kv, capacity, dtype, seed=0):
    """q (B, Hq, 1, D), a (B, Hkv, capacity, D) cache whose padding (keys >= kv_lens[b]) is NaN,
    so any read of it shows, and the int32 lengths, on DEVICE."""
    gen = torch.Generator().manual_seed(seed)
    batch = len(lens)

    def randn(*shape):
        return torch.randn(shape, generator=gen).to(dtype)

    q = randn(batch, heads_q, 1, HEAD_DIM)
    k, v = randn(batch, heads_kv, capacity, HEAD_DIM), randn(batch, heads_kv, capacity, HEAD_DIM)
    for b, n in enumerate(lens):
        k[b, :, n:] = float("nan")
        v[b, :, n:] = float("nan")
    kv_lens = torch.tensor(lens, dtype=torch.int32)
    return q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), kv_lens.to(DEVICE)


def _reference(q, k, v, cos, sin, kv_lens):
    clean = [t.nan_to_num(0.0) for t in (k, v)]  # the reference slices the valid keys itself
    return reference_attention_chunked(q, *clean, cos, sin, rotate_k=False, kv_lens=kv_lens)


@pytest.mark.parametrize("dtype", DTYPES)
def test_ragged_lengths_match_the_float64_reference(dtype):
    """Lengths 1, 70 (the whole cache, several splits) and 23, GQA 2: every element written, the
    NaN padding never read, the answer within the dtype's tolerance."""
    q, k, v, kv_lens = _inputs([1, 70, 23], 4, 2, 70, dtype)
    cos, sin = rope_tables(70, HEAD_DIM, device=DEVICE)
    p = plan_decode_varlen(q, k, v, cos, sin, kv_lens, tile=TILE)
    assert p.num_splits > 1 and p.launches == 2 and p.generation == kernels.VARLEN_GENERATION
    out = p.run(q, k, v, cos, sin, kv_lens, out=poisoned(q.shape, dtype))
    assert_close(out, _reference(q, k, v, cos, sin, kv_lens), dtype, "varlen split path")


def test_one_split_writes_the_output_in_one_launch():
    q, k, v, kv_lens = _inputs([3, 16, 1], 3, 1, 16, torch.float32, seed=1)
    cos, sin = rope_tables(16, HEAD_DIM, device=DEVICE)
    p = plan_decode_varlen(q, k, v, cos, sin, kv_lens, tile=TILE)
    assert (p.num_splits, p.launches) == (1, 1)
    out = p.run(q, k, v, cos, sin, kv_lens, out=poisoned(q.shape, torch.float32))
    assert_close(out, _reference(q, k, v, cos, sin, kv_lens), torch.float32, "varlen one split")


def test_uniform_lengths_are_the_generation_2_decode():
    """Every sequence full: the same problem as generation 2's decode over a rotated cache."""
    q, k, v, kv_lens = _inputs([40, 40], 2, 2, 40, torch.float32, seed=2)
    cos, sin = rope_tables(40, HEAD_DIM, device=DEVICE)
    ours = decode_varlen(q, k, v, cos, sin, kv_lens, tile=TILE)
    gen2 = kernels.attention(q, k, v, cos, sin, tile=TILE, rope="q_fused", rotate_k=False)
    assert (ours - gen2).abs().max().item() < 1e-5


def test_a_plan_runs_new_lengths_without_replanning():
    """The grid follows the capacity, not the lengths: a serving step updates kv_lens in place."""
    q, k, v, kv_lens = _inputs([48, 48], 2, 1, 48, torch.float32, seed=3)
    cos, sin = rope_tables(48, HEAD_DIM, device=DEVICE)
    p = plan_decode_varlen(q, k, v, cos, sin, kv_lens, tile=TILE)
    kv_lens.copy_(torch.tensor([5, 31], dtype=torch.int32))
    out = p.run(q, k, v, cos, sin, kv_lens, out=poisoned(q.shape, torch.float32))
    assert_close(out, _reference(q, k, v, cos, sin, kv_lens), torch.float32, "replanned lengths")


@pytest.mark.parametrize(
    "change, match",
    [
        (lambda a: a.update(kv_lens=a["kv_lens"].long()), "int32"),
        (
            lambda a: a.update(kv_lens=torch.tensor([0, 4], dtype=torch.int32, device=DEVICE)),
            r"kv_lens\[0\] = 0",
        ),
        (lambda a: a.update(kv_lens=torch.tensor([4, 9], dtype=torch.int32, device=DEVICE)), "outside 1..8"),
        (lambda a: a.update(kv_lens=a["kv_lens"][:1]), r"\(2,\)"),
        (lambda a: a.update(q=a["q"].expand(-1, -1, 2, -1)), "Sq == 1"),
        (lambda a: a.update(cos=a["cos"][:4], sin=a["sin"][:4]), "covers 4 positions"),
        (lambda a: a.update(tile=(32, 16, 4, 2)), "kernels.Tile"),
    ],
)
def test_bad_inputs_are_named(change, match):
    q, k, v, kv_lens = _inputs([8, 4], 2, 1, 8, torch.float32)
    cos, sin = rope_tables(8, HEAD_DIM, device=DEVICE)
    args = dict(q=q, k=k, v=v, cos=cos, sin=sin, kv_lens=kv_lens, tile=TILE)
    change(args)
    with pytest.raises(ValueError, match=match):
        plan_decode_varlen(**args)


def test_run_refuses_tensors_unlike_the_plan():
    q, k, v, kv_lens = _inputs([8, 4], 2, 1, 8, torch.float32)
    cos, sin = rope_tables(8, HEAD_DIM, device=DEVICE)
    p = plan_decode_varlen(q, k, v, cos, sin, kv_lens, tile=TILE)
    with pytest.raises(ValueError, match="kv_lens does not match the plan"):
        p.run(q, k, v, cos, sin, kv_lens.long())
    with pytest.raises(ValueError, match="k does not match the plan"):
        p.run(q, k[:, :, :4], v, cos, sin, kv_lens)


@pytest.mark.parametrize("seed", range(6))
def test_random_ragged_batches_and_strided_caches(seed):
    """Random batch (1-4), GQA group (1, 3, 4), head_dim (32, 64), lengths 1..capacity, tile, and a
    cache laid out (B, S, H, D) as a fused QKV projection writes it, viewed (B, H, S, D)."""
    gen = torch.Generator().manual_seed(seed)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=gen))]

    batch, group, head_dim, dtype = pick([1, 2, 4]), pick([1, 3, 4]), pick([32, 64]), pick(DTYPES)
    heads_kv, capacity = pick([1, 2]), int(torch.randint(1, 80, (1,), generator=gen))
    tile = pick([Tile(16, 16, 4, 2), Tile(32, 32, 4, 2), Tile(64, 16, 4, 3)])
    lens = torch.randint(1, capacity + 1, (batch,), generator=gen, dtype=torch.int32)
    lens[0] = capacity  # the longest fills the cache
    q = torch.randn(batch, heads_kv * group, 1, head_dim, generator=gen).to(dtype).to(DEVICE)
    k, v = (
        torch.randn(batch, capacity, heads_kv, head_dim, generator=gen).to(dtype).to(DEVICE).transpose(1, 2)
        for _ in range(2)
    )
    kv_lens = lens.to(DEVICE)
    cos, sin = rope_tables(capacity, head_dim, device=DEVICE)
    out = decode_varlen(q, k, v, cos, sin, kv_lens, tile=tile, out=poisoned(q.shape, dtype))
    ref = reference_attention_chunked(q, k, v, cos, sin, rotate_k=False, kv_lens=kv_lens)
    assert_close(out, ref, dtype, f"seed {seed}: lengths {lens.tolist()}, group {group}, {tile.name}")
