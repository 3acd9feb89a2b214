"""Cold compilation (families/attention/cold_compile.py, the lifecycle's compile rows): one fresh
process per candidate, forked or started, its fallback and its timeout."""

import logging
import os

import pandas as pd
import pytest

from headroom.families.attention import lifecycle
from tests.measure import measure_helpers as mh


def _compile_inputs():
    trace = mh.tiny_trace()
    shapes = [
        {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in trace.to_dict("records")
    ]
    return trace, shapes, next(mh.tiny_candidates().itertuples(index=False))


def _check_child_result(res: dict, trace: pd.DataFrame) -> None:
    assert "error" not in res, res.get("error")
    assert [s["shape_key"] for s in res["shapes"]] == list(trace["shape_key"])
    assert all(s["first_s"] > 0 and s["second_s"] > 0 and s["new_bytes"] == 0 for s in res["shapes"])
    assert res["cache_bytes"] == 0 and res["toolchain_s"] > 0 and res["pid"] != os.getpid()


@mh.interpreter_only
def test_cold_compile_child_plumbing_on_the_interpreter():
    """The forked path end to end (spec out, result back), one fresh process per candidate; the
    interpreter compiles nothing, so its cache stays empty and no shape counts as a specialization."""
    from headroom.families.attention import cold_compile

    trace, shapes, cand = _compile_inputs()
    with cold_compile.Server(interpret=True, project_root=mh.ROOT) as server:
        first = lifecycle._compile_one(cand, shapes, 10000.0, 300, server=server)
        second = lifecycle._compile_one(cand, shapes, 10000.0, 300, server=server)
    _check_child_result(first, trace)
    _check_child_result(second, trace)
    assert first["pid"] != second["pid"]


@mh.interpreter_only
def test_cold_compile_fallback_starts_a_fresh_interpreter(caplog):
    from headroom.families.attention import cold_compile

    trace, shapes, cand = _compile_inputs()
    _check_child_result(
        lifecycle._spawned(cold_compile.spec(cand, shapes, 10000.0), 300, interpret=True), trace
    )
    # A forked child that fails (here: compiled kernels and no CUDA) is retried in a freshly started
    # process, whose own failure is what the row records.
    with (
        cold_compile.Server(interpret=False, project_root=mh.ROOT) as server,
        caplog.at_level(logging.WARNING),
    ):
        res = lifecycle._compile_one(cand, shapes, 10000.0, 300, server=server)
    assert "again in a freshly started process" in caplog.text
    assert res["error"].startswith("cold-compile child exited")


@mh.interpreter_only
def test_cold_compile_child_that_outlives_its_timeout_is_killed(tmp_path):
    from headroom.families.attention import cold_compile

    _, shapes, cand = _compile_inputs()
    spec = cold_compile.spec(cand, shapes, 1e4)
    with cold_compile.Server(interpret=True, project_root=mh.ROOT) as server:
        assert "error" not in server.compile(spec, str(tmp_path / "a"), timeout_s=300)  # the server is up
        res = server.compile(spec, str(tmp_path / "b"), timeout_s=0.001)
        assert res["timed_out"] and res["error"] == "cold-compile child timed out after 0.001 s"
        assert lifecycle._compile_one(cand, shapes, 1e4, 0.001, server=server)["timed_out"]  # no retry


@pytest.mark.gpu
@mh.cuda_only
def test_cold_compile_on_cuda_forked_and_spawned_agree():
    """A forked child compiles cold as a freshly started one does: the same specializations, new
    cache files, the toolchain timed."""
    from headroom.families.attention import cold_compile

    trace = mh.cuda_trace()
    shapes = [
        {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in trace.to_dict("records")
    ]
    cand = next(mh.cuda_candidates().itertuples(index=False))
    with cold_compile.Server(interpret=False, project_root=mh.ROOT) as server:
        forked = lifecycle._compile_one(cand, shapes, 10000.0, 600, server=server)
    spawned = lifecycle._spawned(cold_compile.spec(cand, shapes, 10000.0), 600, interpret=False)
    for res in (forked, spawned):
        assert "error" not in res, res.get("error")
        assert res["toolchain_s"] > 0 and res["cache_bytes"] > 0 and res["pid"] != os.getpid()
        assert res["shapes"][0]["new_bytes"] > 0  # the first shape compiled the candidate's kernels
    compiled = [[s["new_bytes"] > 0 for s in r["shapes"]] for r in (forked, spawned)]
    assert compiled[0] == compiled[1]


@mh.interpreter_only
def test_compile_ahead_children_call_each_candidate_on_every_shape(caplog):
    """The correctness stage's compile-ahead (cold_compile.warm): one forked child per candidate,
    two side by side, each calling it on every shape; results come back per candidate, none
    mixed up, though all children share one cache directory."""
    from headroom.families.attention import cold_compile

    trace, shapes, _ = _compile_inputs()
    cands = list(mh.tiny_candidates().itertuples(index=False))
    with caplog.at_level(logging.INFO):
        done = cold_compile.warm(
            shapes, cands, 1e4, workers=2, timeout_s=300, log=logging.getLogger("t"), interpret=True
        )
    assert list(done) == [c.candidate for c in cands]
    assert all("error" not in r and r["shapes"] == len(trace) and r["failed"] == [] for r in done.values())
    assert len({r["pid"] for r in done.values()} | {os.getpid()}) == len(cands) + 1
    assert f"compiled {len(cands)} candidate(s) ahead on {len(trace)} shapes in 2 children" in caplog.text


@mh.interpreter_only
def test_compile_ahead_child_notes_a_shape_it_cannot_run_and_runs_the_rest():
    from headroom.families.attention import cold_compile

    _, shapes, cand = _compile_inputs()
    broken = dict(shapes[1], heads_q=3)  # 3 query heads over 1 KV head is fine; over 2 it is not
    broken["heads_kv"] = 2
    res = cold_compile.warm_child(cold_compile.spec(cand, [shapes[0], broken, shapes[2]], 1e4))
    assert res["shapes"] == 3 and len(res["failed"]) == 1 and res["failed"][0].startswith(broken["shape_key"])


def test_compile_ahead_sends_what_compiles_and_refuses_a_bad_worker_count(monkeypatch):
    """Ours and FlexAttention go ahead; SDPA's and FlashInfer's backends compile nothing of ours."""
    from headroom.families.attention import cold_compile, correctness
    from headroom.families.attention.candidates import build

    cands = build(
        [{"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2}],
        ["unfused"],
        native=["cudnn", "flex", "flashinfer-ragged"],
    )
    sent = {}
    monkeypatch.setattr(
        cold_compile, "warm", lambda shapes, cs, *a, **k: sent.update(shapes=shapes, cands=cs)
    )
    trace = mh.tiny_trace()
    names = correctness.compile_ahead(trace, cands, workers=3, rope_base=1e4)
    assert sorted(names) == ["native-flex", "t0-64x64-w4s2-unfused"]
    assert [s["shape_key"] for s in sent["shapes"]] == list(trace["shape_key"])
    assert correctness.compile_ahead(trace, cands, workers=0, rope_base=1e4) == []
    with pytest.raises(ValueError, match="correctness.compile_workers' must be an int >= 0, got -1"):
        correctness.compile_ahead(trace, cands, workers=-1, rope_base=1e4)


@pytest.mark.gpu
@mh.cuda_only
def test_compile_ahead_on_cuda_leaves_the_stage_nothing_to_compile(tmp_path, monkeypatch):
    """After the correctness stage's compile-ahead, the stage's own first calls of each candidate
    on each shape add nothing to the shared Triton cache: they load what the children compiled.
    (A tile no other test uses, so no kernel of it is already loaded in this process.)"""
    import torch

    from headroom.families.attention import correctness, inputs, portfolio
    from headroom.families.attention.candidates import build
    from headroom.families.attention.runner import tables

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    trace = mh.cuda_trace()
    cands = build([{"block_m": 32, "block_n": 32, "num_warps": 2, "num_stages": 2}], ["unfused", "q_fused"])
    sent = correctness.compile_ahead(trace, cands, workers=2, rope_base=1e4, log=logging.getLogger("t"))
    assert sorted(sent) == sorted(cands["candidate"])
    files = sorted(tmp_path.rglob("*"))
    assert any(f.suffix == ".cubin" for f in files)  # the children compiled into the shared directory
    cos, sin = tables(int(trace["kv_len"].max()), 64, "bfloat16", 1e4, "cuda")
    for row in trace.itertuples(index=False):
        q, k, v = inputs.input_sets(row, 1, "cuda", seed=1)[0]
        for cand in cands.itertuples(index=False):
            portfolio.candidate_fn(cand, cos, sin, inputs.rotate_k(row), None)(q, k, v)
    torch.cuda.synchronize()
    assert sorted(tmp_path.rglob("*")) == files
