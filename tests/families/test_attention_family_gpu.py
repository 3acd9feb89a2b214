"""Attention as the first family on the GPU (issue 32, item 3), in bfloat16 on the default study's
partition and candidates: through the Family protocol every candidate computes bit for bit what the
runner every attention stage times computes, with the same kernel launches in the same order, and
passes the family-generic correctness gate against the float64 reference."""

from __future__ import annotations

from functools import partial

import pytest

from tools.runner_identity import launches

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

# (phase, batch, q_len, kv_len): a prefill, a chunk over a cache, a split-KV decode
SHAPES = [("prefill", 1, 512, 512), ("prefill", 1, 256, 1024), ("decode", 8, 1, 2048)]


def _attention():
    """The default study's attention family; its FlashInfer candidates only where FlashInfer is
    installed (the `flashinfer` extra: a GPU host without it runs the rest; its own tests skip)."""
    from dataclasses import replace

    from headroom.families.attention import flashinfer
    from headroom.families.attention.family import ATTENTION

    if flashinfer.available():
        return ATTENTION
    return replace(ATTENTION, native=tuple(n for n in ATTENTION.native if n not in flashinfer.BACKENDS))


@pytest.mark.parametrize("shape", SHAPES, ids=["prefill", "chunk", "decode"])
def test_prepare_is_the_runner_bit_for_bit_with_the_same_launches(shape):
    from headroom.families.attention.runner import runner

    ATTENTION = _attention()
    s = ATTENTION._shape(*shape)
    x = ATTENTION.inputs(s, seed=11, device="cuda")
    differ = []
    for cand in ATTENTION.candidates():
        via = ATTENTION.prepare(cand, s, x)
        direct = runner(ATTENTION._row(cand), x["cos"], x["sin"], x["rotate_k"], None)
        try:
            b = direct(x["q"], x["k"], x["v"])
        except RuntimeError as exc:  # a native with no kernel for the shape: the protocol refuses alike
            with pytest.raises(type(exc)):
                via(x)
            assert ATTENTION.unsupported(cand, exc), f"{cand.id}: {exc} not named unsupported"
            continue
        a = via(x)
        if not torch.equal(a, b):
            differ.append(f"{cand.id}: outputs differ")
        la, lb = launches(partial(via, x)), launches(partial(direct, x["q"], x["k"], x["v"]))
        if la != lb or not la:
            differ.append(f"{cand.id}: launches {la} vs {lb}")
    assert not differ, "\n".join(differ)


def test_every_attention_candidate_passes_the_family_correctness_gate():
    from headroom.families import Step, check, expand

    ATTENTION = _attention()
    steps = [
        Step(0, 0.0, "decode-only", (2048, 1500, 900), (), 3),
        Step(1, 0.02, "prefill-only", (), ((512, 512), (256, 1024)), 768),
    ]
    results = check.check(ATTENTION, expand.expand(ATTENTION, steps), device="cuda")
    bad = results[~results["status"].isin(["passed", "unsupported"])]
    assert bad.empty, bad.to_string()
    assert set(results.loc[results["status"] == "passed", "dtype"]) == {"bfloat16"}
    ours = results[~results["candidate"].str.startswith("native-")]
    assert set(ours["status"]) == {"passed"} and len(ours) == 3 * 15
