"""The candidate set and the one runner every stage checks and times."""

from __future__ import annotations

import pytest
import torch

from headroom.measure.candidates import COLUMNS, build
from headroom.measure.runner import runner

TILES = [
    {"block_m": 32, "block_n": 32, "num_warps": 4, "num_stages": 1},
    {"block_m": 16, "block_n": 64, "num_warps": 2, "num_stages": 2},
]


def test_tiles_cross_fusion_with_unique_readable_ids():
    c = build(TILES, [False, True])
    assert list(c.columns) == COLUMNS
    assert len(c) == 4 and c["candidate"].is_unique
    assert set(c["tile"]) == {0, 1} and c.groupby("tile")["fused"].nunique().eq(2).all()
    assert c.loc[0, "candidate"] == "t0-32x32-w4s1-unfused"
    assert (c["backend"] == "triton").all()


def test_native_candidates_are_marked_and_have_no_tile():
    c = build(TILES, [True], ["cudnn", "math", "flex"])
    native = c[c["backend"] != "triton"]
    assert list(native["candidate"]) == ["native-sdpa-cudnn", "native-sdpa-math", "native-flex"]
    assert list(native["backend"]) == ["sdpa-cudnn", "sdpa-math", "flex"]
    assert (native["tile"] == -1).all() and not native["fused"].any()


@pytest.mark.parametrize("bad", [([], [True], []), (TILES, [], []), (TILES, [True], ["xformers"])])
def test_bad_candidate_settings_raise(bad):
    with pytest.raises(ValueError):
        build(*bad)


@pytest.mark.parametrize("sq, skv, rotate_k", [(37, 37, True), (1, 70, False), (5, 33, False)])
def test_every_runner_matches_the_float64_reference(sq, skv, rotate_k):
    from kernels import reference_attention, rope_tables

    torch.manual_seed(sq * 100 + skv)
    cos, sin = rope_tables(128, 32, dtype=torch.float32, device="cpu")
    q, k, v = torch.randn(2, 4, sq, 32), torch.randn(2, 2, skv, 32), torch.randn(2, 2, skv, 32)
    ref = reference_attention(q, k, v, cos, sin, rotate_k=rotate_k)
    for cand in build(TILES[:1], [False, True], ["math", "flex"]).itertuples():
        out = runner(cand, cos, sin, rotate_k)(q, k, v)
        rel = float((out.double() - ref).norm() / ref.norm())
        assert rel < 1e-5, (cand.candidate, rel)
