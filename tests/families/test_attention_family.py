"""Attention as the first family (issue 32, item 3): the Family protocol's answers are the pipeline's
own -- the engine's steps expand to the trace's invocations, the candidates are the candidates
table's, and a candidate prepared through the protocol computes, bit for bit, what the runner every
attention stage times computes (here on the interpreter in float16; on the H200 in bfloat16 in
tests/families/test_attention_family_gpu.py)."""

import copy
import json

import numpy as np
import pytest

from headroom.core import defaults
from headroom.families import Family
from headroom.families.attention.family import ATTENTION, AttentionFamily
from headroom.families.contract import check_candidates, check_family
from headroom.families.expand import expand, steps_of
from headroom.trace import invocations, step_table

FEATURES = ["phase", "batch", "q_len", "kv_len"]


def _merged(base: dict, over: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = _merged(out.get(key, {}), value) if isinstance(value, dict) else value
    return out


def _trace_and_calls(over: dict, partition=None):
    """The whole window's trace (no sampling) and the attention family's calls from its steps."""
    cfg = _merged(defaults.section("trace"), {"invocations": None, "sampler": "stride", **over})
    part = partition or defaults.section("partition")
    trace = invocations.build_trace(cfg, part)
    family = AttentionFamily.from_config({"partition": part, "trace": cfg})
    calls = expand(family, steps_of(step_table.build(cfg, part)))
    return trace, calls


@pytest.mark.parametrize(
    "over",
    [
        {},  # the default: synthetic lognormal log, unchunked engine
        {"batching": {"max_batched_tokens": 512}},  # chunked prefill: mixed steps
        {"synthetic": {"requests": 64, "mean_gap_s": 0.05}, "batching": {"max_batch": 8}},
    ],
    ids=["default", "chunked", "busy"],
)
def test_the_engine_steps_expand_to_the_traces_invocations_in_order(over):
    trace, calls = _trace_and_calls(over)
    assert len(calls) == len(trace) > 100
    np.testing.assert_array_equal(calls[FEATURES].to_numpy(), trace[FEATURES].to_numpy())
    assert (calls["phase"] == "prefill").sum() == (trace["phase"] == "prefill").sum()


def test_per_sequence_decodes_carry_every_length_as_the_trace_does():
    trace, calls = _trace_and_calls({"batching": {"kv_summary": "per_sequence"}})
    np.testing.assert_array_equal(calls[FEATURES].to_numpy(), trace[FEATURES].to_numpy())
    shapes = [json.loads(s) for s in calls["shape"]]
    want = [None if lens is None else ",".join(map(str, lens)) for lens in trace["kv_lens"]]
    assert [s.get("kv_lens") for s in shapes] == want


def test_a_mean_kv_summary_has_no_family_form():
    with pytest.raises(ValueError, match="kv_summary 'mean'"):
        AttentionFamily.from_config({"trace": {"batching": {"kv_summary": "mean"}}})


def test_attention_satisfies_the_family_contract():
    assert isinstance(ATTENTION, Family)
    check_family(ATTENTION)
    assert ATTENTION.name == "attention" and ATTENTION.version == "generation-2"
    check_candidates(ATTENTION, ATTENTION.candidates())


def test_its_candidates_are_the_candidates_table():
    from headroom.families.attention.candidates import build

    table = build(
        defaults.section("tiles"),
        defaults.section("rope"),
        defaults.section("native_candidates"),
        defaults.study()["generation"],
    )
    cands = ATTENTION.candidates()
    assert [c.id for c in cands] == table["candidate"].tolist()
    first = table.iloc[0]
    assert cands[0].params["block_m"] == first["block_m"] and cands[0].params["rope"] == first["rope"]
    assert all(type(v) in (int, bool, str) for c in cands for v in c.params.values())


def test_a_ragged_decode_is_answered_only_by_candidates_that_read_lengths():
    family = AttentionFamily.from_config(
        {"varlen_decode": True, "trace": {"batching": {"kv_summary": "per_sequence"}}}
    )
    shape = family._shape("decode", 2, 1, 64) | {"kv_lens": "64,37"}
    supported = {c.id for c in family.candidates() if family.supports(c, shape)}
    assert supported and all(c.endswith("varlen") or c.startswith("native-") for c in supported)
    plain = family._shape("decode", 2, 1, 64)
    assert all(family.supports(c, plain) for c in family.candidates())


def test_its_cost_is_the_rooflines_useful_work():
    shape = ATTENTION._shape("prefill", 1, 128, 256)
    cost = ATTENTION.cost(shape)
    pairs = 128 * (256 - 128) + 128 * 129 // 2
    assert cost["flops"] == 4 * 32 * 128 * pairs
    assert cost["bytes"] == 2 * (32 * 128 * 128 * 2) + 2 * 8 * 256 * 128 * 2 + 2 * 128 * 128 * 2


SMOKE = defaults.study()["smoke"]


def _smoke_family(**over) -> AttentionFamily:
    study = _merged(SMOKE, over)
    return AttentionFamily.from_config(
        {**study, "partition": {**study["partition"], "dtype": "float16"}, "native_candidates": ["math"]}
    )


@pytest.mark.parametrize(
    "phase,batch,q_len,kv_len",
    [("prefill", 1, 40, 40), ("prefill", 1, 16, 72), ("decode", 2, 1, 64)],
    ids=["prefill", "chunk", "decode"],
)
def test_prepare_computes_bit_for_bit_what_the_runner_computes(phase, batch, q_len, kv_len):
    import torch

    from headroom.families.attention.runner import runner

    family = _smoke_family()
    shape = family._shape(phase, batch, q_len, kv_len)
    x = family.inputs(shape, seed=7, device="cpu")
    ref = family.reference(shape, x)
    rel, _ = family.tolerance("float16")
    for cand in family.candidates():
        got = family.prepare(cand, shape, x)(x)
        direct = runner(family._row(cand), x["cos"], x["sin"], x["rotate_k"], None)(x["q"], x["k"], x["v"])
        assert torch.equal(got, direct), cand.id
        assert float((got.double() - ref).norm() / ref.norm()) < rel, cand.id


def test_the_family_correctness_gate_passes_every_smoke_candidate():
    from headroom.families import Step, check

    family = _smoke_family()
    steps = [
        Step(0, 0.0, "decode-only", (64, 40), (), 2),
        Step(1, 0.02, "prefill-only", (), ((40, 40), (16, 72)), 56),
    ]
    results = check.check(family, expand(family, steps), device="cpu")
    assert len(results) == 3 * len(family.candidates())
    assert set(results["status"]) == {"passed"}, results.to_string()
