"""The correctness gate: checks, failure reasons, the fail/exclude policy and admitted()."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

from headroom.families.attention import correctness as attention
from headroom.families.attention.candidates import build
from headroom.measure import correctness
from tests.pipeline import copy_project, snakemake

TILES = [
    {"block_m": 16, "block_n": 16, "num_warps": 4, "num_stages": 2},
    {"block_m": 32, "block_n": 16, "num_warps": 4, "num_stages": 3},
]
TOL = {"float32": (1e-3, 1e-2), "float16": (5e-3, 2e-2)}
LOG = logging.getLogger("test.correctness")


def candidates() -> pd.DataFrame:
    return build(TILES, ["unfused", "fused"])


def _trace_row(invocation: int, phase: str, batch: int, q_len: int, kv_len: int, dtype: str) -> dict:
    """One trace row with 4 query heads, 2 KV heads and head_dim 32."""
    key = f"{phase}|b{batch}|q{q_len}|kv{kv_len}|h4/2|d32|{dtype}"
    return dict(
        invocation=invocation,
        phase=phase,
        batch=batch,
        q_len=q_len,
        kv_len=kv_len,
        heads_q=4,
        heads_kv=2,
        head_dim=32,
        dtype=dtype,
        shape_key=key,
    )


def shape_rows() -> pd.DataFrame:
    rows = [
        _trace_row(0, "prefill", 1, 19, 19, "float32"),
        _trace_row(1, "decode", 2, 1, 41, "float16"),
        _trace_row(2, "decode", 2, 1, 41, "float16"),
    ]
    return attention.shapes(pd.DataFrame(rows))


def device() -> str:
    import kernels

    return "interpret" if kernels.interpreted() else "cuda"


def run(make_fn=attention.default_make_fn, **kw) -> pd.DataFrame:
    return attention.check(
        candidates(),
        shape_rows(),
        device=device(),
        tolerances_by_dtype=TOL,
        seed=3,
        make_fn=make_fn,
        log=LOG,
        **kw,
    )


@pytest.fixture(scope="module")
def good() -> pd.DataFrame:
    return run()


def test_every_candidate_on_every_distinct_shape_passes(good):
    assert len(good) == 4 * 2  # 4 candidates x 2 distinct shape keys (3 invocations)
    assert set(attention.COLUMNS) <= set(good.columns)
    assert good["passed"].all(), good[["candidate", "shape_key", "reason"]]
    assert (good["nan_count"] == 0).all() and (good["unwritten_count"] == 0).all()
    assert (good["rel_err"] < 1e-3).all() and (good["rel_err"] > 0).all()
    # fresh inputs for every shape, the same for every candidate on it (one float64 answer a shape)
    assert (good.groupby("shape_key")["input_seed"].nunique() == 1).all()
    assert good["input_seed"].nunique() == good["shape_key"].nunique()
    assert list(good["rotate_k"]) == [p == "prefill" for p in good["phase"]]
    assert (
        correctness.admitted(candidates(), good)["candidate"].tolist() == candidates()["candidate"].tolist()
    )


def _wrap(transform):
    def make_fn(cand, cos, sin, rotate_k):
        fn = attention.default_make_fn(cand, cos, sin, rotate_k)
        if cand.candidate != candidates()["candidate"].iloc[1]:
            return fn
        return transform(fn)

    return make_fn


def test_a_wrong_answer_fails_with_its_error():
    def off_by_scale(fn):
        return lambda q, k, v, out=None: fn(q, k, v, out=out).mul_(1.05)

    res = run(_wrap(off_by_scale))
    bad = res[~res["passed"]]
    assert set(bad["candidate"]) == {candidates()["candidate"].iloc[1]}
    assert bad["reason"].str.contains("rel_err").all()
    assert (bad["status"] == "failed").all()


def test_unwritten_elements_are_caught():
    def half_written(fn):
        def run_half(q, k, v, out=None):
            res = fn(q, k, v)  # then only the first half of the heads reaches `out`
            out[:, : q.shape[1] // 2] = res[:, : q.shape[1] // 2]
            return out

        return run_half

    res = run(_wrap(half_written))
    bad = res[~res["passed"]]
    assert set(bad["candidate"]) == {candidates()["candidate"].iloc[1]}
    assert (bad["nan_count"] > 0).all() and (bad["unwritten_count"] == bad["nan_count"]).all()
    assert bad["reason"].str.contains("unwritten").all()


def test_a_call_that_writes_its_inputs_fails_and_the_next_candidates_see_the_drawn_ones():
    def scribbler(fn):
        def scribble(q, k, v, out=None):
            res = fn(q, k, v, out=out)
            k.mul_(2.0)  # a kernel writing the cache it reads
            return res

        return scribble

    res = run(_wrap(scribbler))
    bad = res[~res["passed"]]
    assert set(bad["candidate"]) == {candidates()["candidate"].iloc[1]}
    assert (bad["status"] == "failed").all()
    assert bad["reason"].str.contains(r"the call wrote its inputs \(k\)").all(), bad["reason"]
    # its own copy was written: the candidates after it were checked on the drawn inputs
    assert res[res["candidate"] != candidates()["candidate"].iloc[1]]["passed"].all()


def test_the_float64_answer_is_computed_once_per_shape_and_layout(monkeypatch):
    calls = []
    real = attention.reference

    def counted(q, k, v, cos, sin, *, rotate_k, kv_lens=None):
        calls.append(kv_lens is None)
        return real(q, k, v, cos, sin, rotate_k=rotate_k, kv_lens=kv_lens)

    monkeypatch.setattr(attention, "reference", counted)
    res = run()
    assert res["passed"].all()
    assert calls == [True, True]  # 2 distinct shapes, 4 candidates each, padded layout only


def _raising(exc):
    def explode(fn):
        def raiser(q, k, v, out=None):
            raise exc

        return raiser

    return explode


def test_a_launch_failure_of_our_kernel_is_an_error_with_reason():
    res = run(_wrap(_raising(RuntimeError("triton: PassManager::run failed"))))
    bad = res[~res["passed"]]
    assert set(bad["candidate"]) == {candidates()["candidate"].iloc[1]}
    assert (bad["status"] == "error").all()
    assert bad["reason"].str.startswith("RuntimeError: triton: PassManager::run failed").all()
    assert bad["rel_err"].isna().all()
    assert correctness.failing(res)["candidate"].tolist() == [candidates()["candidate"].iloc[1]]


def test_a_tile_out_of_resources_is_unsupported_not_a_failure(caplog):
    class OutOfResources(RuntimeError):  # Triton's exception, by name
        pass

    res = run(_wrap(_raising(OutOfResources("out of resource: shared memory, Required: 294912"))))
    victim = candidates()["candidate"].iloc[1]
    bad = res[~res["passed"]]
    assert set(bad["candidate"]) == {victim}
    assert (bad["status"] == "unsupported").all()
    assert bad["reason"].str.contains("out of resource: shared memory").all()
    assert correctness.failing(res).empty
    with caplog.at_level(logging.WARNING):
        assert correctness.gate(res, "fail", LOG).empty  # the study goes on
    assert f"unsupported on 2/2 shapes: {victim}" in caplog.text
    assert victim not in set(correctness.admitted(candidates(), res)["candidate"])


def test_a_native_backend_with_no_kernel_is_unsupported_and_the_study_goes_on(caplog):
    # On the CPU, torch has no memory-efficient SDPA kernel: the real backend raises "No viable
    # backend" (torch >= 2.5; the H200's message, "No available kernel", is checked below).
    cands = build(TILES[:1], ["unfused"], native=["efficient"])
    res = attention.check(cands, shape_rows(), device=device(), tolerances_by_dtype=TOL, seed=3, log=LOG)
    native = res[res["candidate"] == "native-sdpa-efficient"]
    assert len(native) == 2 and (native["status"] == "unsupported").all(), native[["status", "reason"]]
    assert native["reason"].str.contains("no kernel for this shape").all()
    assert not native["passed"].any()
    assert correctness.gate(res, "fail", LOG).empty
    kept = correctness.admitted(cands, res)["candidate"].tolist()
    assert kept == [c for c in cands["candidate"] if c != "native-sdpa-efficient"]


def test_no_available_kernel_is_unsupported_only_for_a_native_backend():
    exc = RuntimeError("No available kernel. Aborting execution.")
    assert "no kernel for this shape" in attention.unsupported_reason(exc, native=True)
    assert attention.unsupported_reason(exc, native=False) is None  # our own kernel: a failure
    assert attention.unsupported_reason(ValueError("bad"), native=True) is None


def test_a_native_backend_its_compiler_cannot_build_is_unsupported_not_failed():
    BackendCompilerFailed = type("BackendCompilerFailed", (RuntimeError,), {})
    exc = BackendCompilerFailed("backend='inductor' raised: no Triton for this device")
    assert "cannot be compiled" in attention.unsupported_reason(exc, native=True)
    assert attention.unsupported_reason(exc, native=False) is None  # never for our kernels


def test_a_wrong_answer_still_fails_next_to_an_unsupported_candidate():
    class OutOfResources(RuntimeError):
        pass

    res = run(_wrap(_raising(OutOfResources("out of resource: shared memory"))))
    assert set(res.loc[res["status"] == "unsupported", "candidate"]) == {candidates()["candidate"].iloc[1]}
    res.loc[res["candidate"] == candidates()["candidate"].iloc[2], ["passed", "status"]] = [False, "failed"]
    with pytest.raises(correctness.CorrectnessFailure, match=candidates()["candidate"].iloc[2]):
        correctness.gate(res, "fail", LOG)


def test_inject_fault_breaks_exactly_that_candidate():
    target = candidates()["candidate"].iloc[2]
    res = run(inject_fault=target)
    assert set(res.loc[~res["passed"], "candidate"]) == {target}
    with pytest.raises(ValueError, match="inject_fault"):
        run(inject_fault="no-such-candidate")


def test_gate_fail_names_the_candidates_and_exclude_goes_on(good, caplog):
    broken = good.copy()
    victim = broken["candidate"].iloc[0]
    broken.loc[broken["candidate"] == victim, ["passed", "status", "reason"]] = [
        False,
        "failed",
        "rel_err 1 > 0.001",
    ]
    with pytest.raises(correctness.CorrectnessFailure, match=victim):
        correctness.gate(broken, "fail", LOG)
    with caplog.at_level(logging.ERROR):
        bad = correctness.gate(broken, "exclude", LOG)
    assert bad["candidate"].tolist() == [victim]
    assert f"EXCLUDED from every later stage: {victim}" in caplog.text
    assert correctness.gate(good, "fail", LOG).empty
    with pytest.raises(ValueError, match="on_correctness_failure"):
        correctness.gate(good, "ignore", LOG)
    kept = correctness.admitted(candidates(), broken)
    assert victim not in set(kept["candidate"]) and len(kept) == len(candidates()) - 1


def test_admitted_refuses_a_stale_correctness_artifact(good):
    more = build(
        TILES + [{"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 3}], ["unfused", "fused"]
    )
    with pytest.raises(ValueError, match="no correctness rows"):
        correctness.admitted(more, good)


def test_config_and_trace_errors_name_the_key():
    with pytest.raises(ValueError, match="correctness.tolerances"):
        correctness.tolerances({})
    with pytest.raises(ValueError, match=r"correctness.tolerances.float16.rel"):
        correctness.tolerances({"tolerances": {"float16": {"rel": 0, "abs": 1e-2}}})
    assert correctness.tolerances({"tolerances": {"float16": {"rel": 5e-3, "abs": 2e-2}}}) == {
        "float16": (5e-3, 2e-2)
    }
    with pytest.raises(ValueError, match="shape_key"):
        attention.shapes(pd.DataFrame({"phase": ["decode"]}))
    with pytest.raises(ValueError, match="no entry for dtype 'float16'"):
        attention.check(
            candidates(),
            shape_rows(),
            device=device(),
            tolerances_by_dtype={"float32": (1e-3, 1e-2)},
            log=LOG,
        )


@pytest.mark.slow
def test_pipeline_gate_end_to_end(tmp_path):
    """The rule itself: a deliberately broken candidate stops the pipeline under `fail` (no
    artifact) and is written but excluded under `exclude`."""
    project = copy_project(tmp_path / "p")
    fault = "correctness={inject_fault: t0-128x64-w8s3-q_fused}"
    proc = snakemake(project, "results/default/correctness.parquet", "--config", fault, check=False)
    assert proc.returncode != 0
    log = (project / "results/default/logs/correctness.log").read_text()
    assert "failed correctness: t0-128x64-w8s3-q_fused" in log
    assert not (project / "results/default/correctness.parquet").exists()

    snakemake(
        project, "results/default/correctness.parquet", "--config", fault, "on_correctness_failure=exclude"
    )
    from headroom.core import artifacts

    res = artifacts.read(project / "results/default/correctness.parquet")
    cands = artifacts.read(project / "results/default/candidates.parquet")
    assert set(res.loc[~res["passed"], "candidate"]) == {"t0-128x64-w8s3-q_fused"}
    kept = correctness.admitted(cands, res)["candidate"].tolist()
    assert "t0-128x64-w8s3-q_fused" not in kept and len(kept) == len(cands) - 1
    assert (
        "EXCLUDED from every later stage: t0-128x64-w8s3-q_fused"
        in (project / "results/default/logs/correctness.log").read_text()
    )


def test_reference_inputs_are_random_not_zero():
    """check_one draws N(0, 1) inputs: a kernel returning zeros cannot pass."""
    shape = next(shape_rows().itertuples(index=False))

    def zeros(q, k, v, out=None):
        out.zero_()
        return out

    res = attention.check_one(zeros, shape, seed=1, device=device(), tol=TOL["float32"], rope_base=10000.0)
    assert res["status"] == "failed" and res["rel_err"] == pytest.approx(1.0)
