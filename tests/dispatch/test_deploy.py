"""A candidate chosen from a dispatch table, planned and run by kernels.deploy, matches the float64
reference (on the interpreter: float16 and float32; on a GPU: its dtypes)."""

from __future__ import annotations

import json

import pytest
import torch

import kernels
from headroom import dispatch
from kernels import deploy
from tests.dispatch.tables import CANDIDATES, TILE, scope, table
from tests.kernels.kernel_helpers import DEVICE, DTYPES, assert_close, random_qkv


def _table(tmp_path, prefill: str, decode: str) -> dispatch.Dispatch:
    """A phase-keyed table over the candidates (what the recommendation writes for a phase pair)."""
    names = list(CANDIDATES)
    policy = {
        "policy": "phase-keyed",
        "candidates": names,
        "fallback": names.index(prefill),
        "table": [["prefill", names.index(prefill)], ["decode", names.index(decode)]],
    }
    path = tmp_path / "dispatch.json"
    path.write_text(json.dumps(table({"eager": scope(policy)})))
    return dispatch.load(path, mode="eager")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("prefill, decode", [("t0-q_fused", "t0-unfused"), ("g1-t0-fused", "t0-q_fused")])
def test_the_chosen_candidate_runs_and_matches_the_float64_reference(tmp_path, dtype, prefill, decode):
    table = _table(tmp_path, prefill, decode)
    gen = torch.Generator().manual_seed(0)
    cos, sin = kernels.rope_tables(64, 32, device=DEVICE)
    for phase, q_len, kv_len, want in (("prefill", 24, 24, prefill), ("decode", 1, 40, decode)):
        cand = table.choose(phase=phase)
        assert cand.id == want
        q, k, v = random_qkv(2, 4, 2, q_len, kv_len, 32, dtype, gen)
        out = deploy.run(cand, q, k, v, cos, sin, rotate_k=True)
        ref = kernels.reference_attention(q, k, v, cos, sin, rotate_k=True)
        assert_close(out, ref, dtype, f"{cand.id} {phase}")


def test_a_native_or_incomplete_candidate_is_refused_with_the_reason():
    q = k = v = torch.zeros(1, 1, 1, 32)
    with pytest.raises(ValueError, match="native 'sdpa-cudnn' kernel: run it through torch"):
        deploy.plan_for({"id": "native-sdpa-cudnn", "backend": "sdpa-cudnn"}, q, k, v, q, q, rotate_k=True)
    with pytest.raises(ValueError, match=r"no \['block_n'\]"):
        deploy.tile_of({**TILE, "block_n": None})
    with pytest.raises(ValueError, match="needs its RoPE placement"):
        deploy.plan_for(
            {**TILE, "id": "x", "generation": 2, "backend": "triton"}, q, k, v, q, q, rotate_k=True
        )
