"""Serving rows in the measuring stages: prefill chunks over a cache (q_len < kv_len) and ragged
decodes (kv_lens) through check_trace, the rotate_k rule, the varlen candidates (complete: timed on
every row) and the correctness gate (the interpreter, tiny shapes)."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from headroom.families.attention import correctness, inputs, runner
from headroom.families.attention.candidates import VARLEN_GENERATION, build

TILES = [{"block_m": 32, "block_n": 16, "num_warps": 4, "num_stages": 2}]
TOL = {"float32": (1e-3, 1e-2), "float16": (5e-3, 2e-2)}
LOG = logging.getLogger("test.varlen")


def _row(invocation, phase, batch, q_len, kv_len, kv_lens=None, dtype="float32"):
    return dict(
        invocation=invocation, phase=phase, batch=batch, q_len=q_len, kv_len=kv_len, heads_q=4,
        heads_kv=2, head_dim=32, dtype=dtype, shape_key=f"{phase}|b{batch}|q{q_len}|kv{kv_len}|{dtype}",
        kv_lens=kv_lens,
    )  # fmt: skip


def _trace(*rows) -> pd.DataFrame:
    return pd.DataFrame(list(rows))


def test_check_trace_accepts_chunks_over_a_cache_and_ragged_decodes():
    inputs.check_trace(_trace(_row(0, "prefill", 1, 5, 40), _row(1, "decode", 3, 1, 40, [1, 40, 7])))
    inputs.check_trace(_trace(_row(0, "decode", 2, 1, 9)).drop(columns="kv_lens"))  # old traces


@pytest.mark.parametrize(
    "row, match",
    [
        (_row(0, "prefill", 1, 41, 40), "q_len <= kv_len"),
        (_row(0, "prefill", 1, 40, 40, [40]), "kv_lens belong to decode rows"),
        (_row(0, "decode", 3, 1, 40, [40, 2]), "2 lengths for a batch of 3"),
        (_row(0, "decode", 2, 1, 40, [39, 2]), r"max\(kv_lens\) == kv_len \(40\)"),
        (_row(0, "decode", 2, 1, 40, [40, 0]), "got min 0"),
    ],
)
def test_check_trace_names_bad_serving_rows(row, match):
    with pytest.raises(ValueError, match=match):
        inputs.check_trace(_trace(row))


def test_only_a_prefill_from_an_empty_cache_rotates_its_keys():
    rows = _trace(_row(0, "prefill", 1, 8, 8), _row(1, "prefill", 1, 5, 40), _row(2, "decode", 2, 1, 9))
    assert [inputs.rotate_k(r) for r in rows.itertuples()] == [True, False, False]
    assert correctness.rotate_k_for("prefill", 5, 40) is False


def test_varlen_candidates_are_generation_3():
    cands = build(TILES, ["q_fused"], ["math"], varlen=True)
    varlen = cands[cands["generation"] == VARLEN_GENERATION]
    assert list(varlen["candidate"]) == ["t0-32x16-w4s2-varlen"]
    assert bool(varlen["fused"].iloc[0]) and varlen["rope"].iloc[0] == "q_fused"
    with pytest.raises(ValueError, match="varlen: must be true or false"):
        build(TILES, ["q_fused"], varlen="yes")


def test_correctness_checks_each_candidate_against_the_problem_it_answers():
    """A chunk over a cache and a ragged decode (lengths 1, 40, 7): the generation-2 candidates
    answer the padded batch, the varlen and native ones the ragged batch; all pass, and the varlen
    family is checked on the prefill too (where it runs generation 2's q_fused plan)."""
    cands = build(TILES, ["unfused", "q_fused"], ["math", "flex"], varlen=True)
    trace = _trace(_row(0, "prefill", 1, 5, 40), _row(1, "decode", 3, 1, 40, [1, 40, 7], dtype="float16"))
    shapes = correctness.shapes(trace)
    out = correctness.check(cands, shapes, device="interpret", tolerances_by_dtype=TOL, log=LOG)
    assert out["passed"].all(), out.loc[~out["passed"], ["candidate", "shape_key", "reason"]].to_string()
    assert len(out) == 2 * 5
    assert set(out.loc[out["candidate"].str.endswith("varlen"), "phase"]) == {"prefill", "decode"}
    assert not out["rotate_k"].any()  # nothing re-rotates a cache


def test_a_padded_answer_fails_against_the_ragged_reference():
    """The gate can tell the two problems apart: a candidate that ignores kv_lens is wrong for them."""
    cand = next(build(TILES, ["q_fused"]).itertuples())
    shape = next(correctness.shapes(_trace(_row(0, "decode", 2, 1, 40, [3, 40]))).itertuples())
    fn = runner.runner(cand, *runner.tables(40, 32, "float32", 10000.0, "cpu"), False)
    lens = inputs.kv_lens_tensor(shape, "interpret")
    result = correctness.check_one(
        fn, shape, seed=1, device="interpret", tol=TOL["float32"], rope_base=10000.0, kv_lens=lens
    )
    assert result["status"] == "failed" and "rel_err" in result["reason"]


def test_a_varlen_family_without_kv_lens_rows_is_refused():
    cands = build(TILES, ["q_fused"], varlen=True)
    shapes = correctness.shapes(_trace(_row(0, "decode", 2, 1, 9)))
    with pytest.raises(ValueError, match="t0-32x16-w4s2-varlen: the trace has no decode row with kv_lens"):
        correctness.check(cands, shapes, device="interpret", tolerances_by_dtype=TOL, log=LOG)


def test_the_portfolio_times_every_candidate_on_every_row():
    """Every older candidate on every row (the ragged one on its padded batch); the varlen one too
    (the ragged decode with its lengths, the uniform one through generation 2's plan), so the
    analysis keeps it: its matrix holds only candidates timed on every invocation."""
    from headroom.families.attention import portfolio

    cands = build(TILES, ["q_fused"], ["math"], varlen=True)
    trace = _trace(_row(0, "decode", 2, 1, 24), _row(1, "decode", 2, 1, 24, [24, 3]))
    section = {"sampler": "fixed", "reps": 2, "warmup_reps": 1, "mode": "eager"}
    rows, _ = portfolio.run(trace, cands, section, run=1, device="interpret", progress=False)
    timed = rows.groupby("invocation")["candidate"].apply(set).to_dict()
    assert timed[0] == timed[1] == {"t0-32x16-w4s2-q_fused", "native-sdpa-math", "t0-32x16-w4s2-varlen"}
    assert (rows["median_us"] > 0).all()


def test_checks_past_the_plain_reference_bound_use_the_chunked_one(monkeypatch):
    """A long-cache chunk never builds the whole score matrix: with the bound lowered, the plain
    reference is never called and the check still passes."""
    import kernels

    def plain(*args, **kwargs):
        raise AssertionError("the plain reference ran past PLAIN_REFERENCE_MAX_ELEMENTS")

    monkeypatch.setattr(correctness, "PLAIN_REFERENCE_MAX_ELEMENTS", 10)
    monkeypatch.setattr(kernels, "reference_attention", plain)
    cand = next(build(TILES, ["fused"]).itertuples())
    shape = next(correctness.shapes(_trace(_row(0, "prefill", 1, 6, 30))).itertuples())
    fn = runner.runner(cand, *runner.tables(30, 32, "float32", 10000.0, "cpu"), False)
    result = correctness.check_one(
        fn, shape, seed=2, device="interpret", tol=TOL["float32"], rope_base=10000.0
    )
    assert result["status"] == "passed", result["reason"]
