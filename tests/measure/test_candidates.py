"""The candidate set and the one runner every stage checks and times."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from headroom.families.attention.candidates import COLUMNS, build, placement
from headroom.families.attention.runner import runner

TILES = [
    {"block_m": 32, "block_n": 32, "num_warps": 4, "num_stages": 1},
    {"block_m": 16, "block_n": 64, "num_warps": 2, "num_stages": 2},
]


def test_tiles_cross_fusion_with_unique_readable_ids():
    c = build(TILES, ["unfused", "fused"])
    assert list(c.columns) == COLUMNS
    assert len(c) == 4 and c["candidate"].is_unique
    assert set(c["tile"]) == {0, 1} and c.groupby("tile")["fused"].nunique().eq(2).all()
    assert c.loc[0, "candidate"] == "t0-32x32-w4s1-unfused"
    assert (c["backend"] == "triton").all()


def test_native_candidates_are_marked_and_have_no_tile():
    c = build(TILES, ["fused"], ["cudnn", "math", "flex"])
    native = c[c["backend"] != "triton"]
    assert list(native["candidate"]) == ["native-sdpa-cudnn", "native-sdpa-math", "native-flex"]
    assert list(native["backend"]) == ["sdpa-cudnn", "sdpa-math", "flex"]
    assert (native["tile"] == -1).all() and not native["fused"].any()


def test_rope_placements_and_generations_are_recorded():
    c = build(TILES[:1], ["unfused", "fused", "q_fused"])
    assert list(c["candidate"]) == ["t0-32x32-w4s1-unfused", "t0-32x32-w4s1-fused", "t0-32x32-w4s1-q_fused"]
    assert list(c["fused"]) == [False, True, True]  # the fusion arms: RoPE inside the kernel or not
    assert (c["generation"] == 2).all()
    assert (build(TILES[:1], ["fused"], generation=1)["generation"] == 1).all()


def test_recorded_generation_1_candidates_keep_their_placement():
    legacy = build(TILES[:1], ["unfused", "fused"], generation=1).drop(columns=["rope", "generation"])
    assert [placement(c) for c in legacy.itertuples()] == [("unfused", 1), ("fused", 1)]


@pytest.mark.parametrize(
    "bad, word",
    [
        (([], ["fused"], []), "tiles"),
        ((TILES, [], []), "rope"),
        ((TILES, ["fused"], ["xformers"]), "xformers"),
        ((TILES, ["rotary"], []), "rotary"),
        ((TILES, ["q_fused"], [], 1), "generation-1"),
    ],
)
def test_bad_candidate_settings_raise(bad, word):
    with pytest.raises(ValueError, match=word):
        build(*bad)


@pytest.mark.parametrize("sq, skv, rotate_k", [(37, 37, True), (1, 70, False), (5, 33, False)])
def test_every_runner_matches_the_float64_reference(sq, skv, rotate_k):
    from kernels import reference_attention, rope_tables

    torch.manual_seed(sq * 100 + skv)
    cos, sin = rope_tables(128, 32, dtype=torch.float32, device="cpu")
    q, k, v = torch.randn(2, 4, sq, 32), torch.randn(2, 2, skv, 32), torch.randn(2, 2, skv, 32)
    ref = reference_attention(q, k, v, cos, sin, rotate_k=rotate_k)
    gen1 = build(TILES[:1], ["unfused", "fused"], generation=1)
    gen2 = build(TILES[:1], ["unfused", "fused", "q_fused"], ["math", "flex"])
    for cand in pd.concat([gen1, gen2]).itertuples():
        out = runner(cand, cos, sin, rotate_k)(q, k, v)
        rel = float((out.double() - ref).norm() / ref.norm())
        assert rel < 1e-5, (cand.candidate, rel)
