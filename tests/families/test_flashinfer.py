"""FlashInfer candidates on the CPU (issue 33): our side of the seam against a stand-in for
FlashInfer's wrappers (tests/families/fake_flashinfer.py) -- page tables, the token-major layouts,
RoPE written into FlashInfer's buffers, plan once then run, the output read back -- checked against
PyTorch's math SDPA through the same runner; the plan-time error where FlashInfer is missing; the
harness's untimed ``prepare``. FlashInfer itself runs in tests/families/test_flashinfer_gpu.py."""

import sys
from types import SimpleNamespace

import pytest
import torch

from headroom.core import config as hconfig
from headroom.core import defaults
from headroom.families.attention import candidates, flashinfer
from headroom.families.attention.runner import build_plan, has_plan, runner, tables
from headroom.measure import timing
from tests.families import fake_flashinfer

HQ, HKV, D = 4, 2, 64
# (batch, q_len, kv_len, kv_lens): a prefill over a partial last page, a chunk over a cache, a
# decode of equal lengths, a ragged decode whose shortest sequence holds one token
ROWS = [(2, 20, 20, None), (1, 5, 37, None), (3, 1, 40, None), (3, 1, 40, [40, 17, 1])]


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setitem(sys.modules, "flashinfer", fake_flashinfer)
    monkeypatch.setattr(flashinfer, "_WRAPPERS", {})
    monkeypatch.setattr(flashinfer, "_WORKSPACE", {})
    fake_flashinfer.calls.clear()
    return fake_flashinfer


def _native(backend):
    return SimpleNamespace(backend=backend, candidate=f"native-{backend}")


def _inputs(b, sq, skv, lens, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, HQ, sq, D, generator=g).half()
    k, v = (torch.randn(b, HKV, skv, D, generator=g).half() for _ in range(2))
    return q, k, v, None if lens is None else torch.tensor(lens, dtype=torch.int32)


def test_page_table_gives_each_sequence_its_own_pages_and_its_last_page_length():
    assert flashinfer.page_table(32, [32, 17]) == ([0, 2, 4], [0, 1, 2, 3], [16, 1])
    assert flashinfer.page_table(40, [40, 17, 1]) == ([0, 3, 5, 6], [0, 1, 2, 3, 4, 6], [8, 1, 1])
    with pytest.raises(ValueError, match=r"kv_lens\[1\] = 0 is outside 1..32"):
        flashinfer.page_table(32, [32, 0])


@pytest.mark.parametrize("backend", flashinfer.BACKENDS)
@pytest.mark.parametrize("shape", ROWS, ids=["prefill", "chunk", "decode", "ragged-decode"])
def test_flashinfer_candidate_computes_what_the_math_sdpa_native_computes(fake, backend, shape):
    b, sq, skv, lens = shape
    q, k, v, kv_lens = _inputs(b, sq, skv, lens)
    cos, sin = tables(64, D, "float16", 10000.0, "cpu")
    rotate_k = sq == skv
    want = runner(_native("sdpa-math"), cos, sin, rotate_k, kv_lens)(q, k, v)
    fn = runner(_native(backend), cos, sin, rotate_k, kv_lens)
    out = torch.full_like(want, float("nan"))  # poisoned: every element must be written
    got = fn(q, k, v, out=out)
    assert got is out and torch.isfinite(out).all()
    torch.testing.assert_close(out.float(), want.float(), rtol=2e-2, atol=2e-2)
    again = fn(q, k, v)  # the view of FlashInfer's own output, no copy
    torch.testing.assert_close(again.float(), want.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize(
    ("backend", "shape", "wrapper"),
    [
        ("flashinfer-paged", ROWS[0], "BatchPrefillWithPagedKVCacheWrapper"),
        ("flashinfer-ragged", ROWS[1], "BatchPrefillWithRaggedKVCacheWrapper"),
        ("flashinfer-paged", ROWS[3], "BatchDecodeWithPagedKVCacheWrapper"),
        ("flashinfer-ragged", ROWS[2], "BatchDecodeWithPagedKVCacheWrapper"),
    ],
)
def test_each_row_runs_the_wrapper_its_serving_stack_uses_planned_once(fake, backend, shape, wrapper):
    b, sq, skv, lens = shape
    cos, sin = tables(64, D, "float16", 10000.0, "cpu")
    fn = runner(_native(backend), cos, sin, sq == skv, None if lens is None else _inputs(*shape)[3])
    sets = [_inputs(*shape, seed=s)[:3] for s in range(3)]
    fn.prepare(sets)
    for q, k, v in sets * 2:
        fn(q, k, v)
    assert fake.calls == [(wrapper, "plan")] + [(wrapper, "run")] * 6
    tensor_cores = next(iter(flashinfer._WRAPPERS.values())).tensor_cores
    assert tensor_cores == (wrapper.startswith("BatchDecode") and backend == "flashinfer-ragged")


def test_the_lifecycle_times_flashinfer_plan_as_its_plan_cost(fake):
    cand = candidates.build([{"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2}], ["unfused"],
                            ["flashinfer-paged", "cudnn"])  # fmt: skip
    rows = {r.candidate: r for r in cand.itertuples(index=False)}
    assert has_plan(rows["native-flashinfer-paged"]) and not has_plan(rows["native-sdpa-cudnn"])
    q, k, v, _ = _inputs(*ROWS[0])
    cos, sin = tables(64, D, "float16", 10000.0, "cpu")
    w = build_plan(rows["native-flashinfer-paged"], cos, sin, True, q, k, v)
    assert isinstance(w, fake.BatchPrefillWithPagedKVCacheWrapper) and fake.calls[-1][1] == "plan"
    assert rows["native-flashinfer-paged"].backend == "flashinfer-paged"
    assert rows["native-flashinfer-paged"].tile == candidates.NATIVE_TILE


def test_float32_and_odd_head_sizes_are_unsupported_not_wrong(fake):
    from headroom.families.attention.correctness import unsupported_reason

    cos, sin = tables(64, 32, "float32", 10000.0, "cpu")
    q, k, v = torch.randn(1, HQ, 8, 32), torch.randn(1, HKV, 8, 32), torch.randn(1, HKV, 8, 32)
    for x in (q, q.half()):
        with pytest.raises(NotImplementedError) as info:
            runner(_native("flashinfer-paged"), cos, sin.to(x.dtype), True)(x, k.to(x.dtype), v.to(x.dtype))
        assert unsupported_reason(info.value, native=True).startswith("backend has no kernel for this shape")


def test_the_harness_prepares_before_any_timed_call():
    seen = []

    def fn(x):
        seen.append(("call", id(x)))

    fn.prepare = lambda sets: seen.append(("prepare", len(sets)))
    h = timing.Harness("interpret", warmup=1, reps=2)
    h.time("eager", fn, [(torch.zeros(1),), (torch.zeros(1),)])
    assert seen[0] == ("prepare", 2) and all(kind == "call" for kind, _ in seen[1:])
    assert h.untimed_s["prepare"] > 0


def _study(device, **over):
    return {"native_candidates": ["cudnn", "flashinfer-paged", "flashinfer-ragged"], "family": None,
            "device": device, **over}  # fmt: skip


def test_a_cuda_study_without_flashinfer_fails_at_plan_time_naming_the_extra_and_the_key(monkeypatch):
    monkeypatch.setattr(flashinfer, "available", lambda: False)
    with pytest.raises(ValueError) as info:
        flashinfer.require(_study("cuda"))
    msg = str(info.value)
    assert "\n" not in msg and "config key 'native_candidates'" in msg
    assert "flashinfer-paged, flashinfer-ragged" in msg and '".[pipeline,flashinfer]"' in msg
    flashinfer.require(_study("interpret"))  # the CPU runs the smoke overlay, which drops them
    flashinfer.require(_study("cuda", native_candidates=["cudnn"]))
    flashinfer.require(_study("cuda", family="examples.rmsnorm.family:FAMILY"))
    monkeypatch.setattr(flashinfer, "available", lambda: True)
    flashinfer.require(_study("cuda"))


def test_the_shipped_default_lists_flashinfer_on_cuda_and_the_smoke_overlay_drops_it():
    cfg = hconfig.load(hconfig.PROJECT_ROOT / "config" / "config.yaml")
    assert set(flashinfer.BACKENDS) <= set(defaults.section("native_candidates"))
    cuda = hconfig.resolve(cfg, cuda_available=True)
    cpu = hconfig.resolve(cfg, cuda_available=False)
    assert set(flashinfer.BACKENDS) <= set(cuda["native_candidates"])
    assert not set(flashinfer.BACKENDS) & set(cpu["native_candidates"])
