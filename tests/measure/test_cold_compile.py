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
        lifecycle._spawned(lifecycle._spec(cand, shapes, 10000.0), 300, interpret=True), trace
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
    spec = lifecycle._spec(cand, shapes, 1e4)
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
    spawned = lifecycle._spawned(lifecycle._spec(cand, shapes, 10000.0), 600, interpret=False)
    for res in (forked, spawned):
        assert "error" not in res, res.get("error")
        assert res["toolchain_s"] > 0 and res["cache_bytes"] > 0 and res["pid"] != os.getpid()
        assert res["shapes"][0]["new_bytes"] > 0  # the first shape compiled the candidate's kernels
    compiled = [[s["new_bytes"] > 0 for s in r["shapes"]] for r in (forked, spawned)]
    assert compiled[0] == compiled[1]
