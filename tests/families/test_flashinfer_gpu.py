"""FlashInfer candidates on the GPU (issue 33): each passes the correctness gate against the float64
reference on the default partition in bfloat16 -- a prefill over a partial last page, a chunk over a
cache, a decode and a ragged serving decode -- and is timed by the harness in both modes (its plan
made outside the capture), with the lifecycle's plan cost measured."""

from __future__ import annotations

import logging

import pandas as pd
import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

LOG = logging.getLogger("test.flashinfer")
BACKENDS = ("flashinfer-paged", "flashinfer-ragged")


def _row(invocation, phase, batch, q_len, kv_len, kv_lens=None):
    return dict(
        invocation=invocation, phase=phase, batch=batch, q_len=q_len, kv_len=kv_len, heads_q=32,
        heads_kv=8, head_dim=128, dtype="bfloat16", shape_key=f"{phase}|b{batch}|q{q_len}|kv{kv_len}",
        kv_lens=kv_lens,
    )  # fmt: skip


TRACE = pd.DataFrame(
    [
        _row(0, "prefill", 2, 1000, 1000),
        _row(1, "prefill", 1, 256, 1030),
        _row(2, "decode", 16, 1, 2048),
        _row(3, "decode", 5, 1, 4100, [4100, 1, 17, 2048, 300]),
    ]
)


@pytest.fixture(scope="module")
def installed():
    from headroom.families.attention import flashinfer

    if not flashinfer.available():
        pytest.skip('FlashInfer is not installed (pip install -e ".[pipeline,flashinfer]")')
    return flashinfer


def test_flashinfer_candidates_pass_the_correctness_gate(installed):
    from headroom.core import defaults
    from headroom.families.attention import correctness
    from headroom.families.attention.candidates import build
    from headroom.measure.correctness import tolerances

    cands = build(defaults.section("tiles")[:1], ["unfused"], [*BACKENDS, "cudnn"])
    out = correctness.check(
        cands, correctness.shapes(TRACE), device="cuda",
        tolerances_by_dtype=tolerances(defaults.section("correctness")), log=LOG,
    )  # fmt: skip
    fi = out[out["candidate"].str.contains("flashinfer")]
    assert len(fi) == 2 * len(TRACE)
    assert (fi["status"] == "passed").all(), fi[["candidate", "shape_key", "status", "reason"]].to_string()
    LOG.info("FlashInfer rel_err: %s", fi.groupby("candidate")["rel_err"].max().to_dict())


@pytest.mark.parametrize("backend", BACKENDS)
def test_flashinfer_is_timed_eager_and_under_graph_replay_with_its_plan_untimed(installed, backend):
    from types import SimpleNamespace

    from headroom.families.attention import inputs
    from headroom.families.attention.runner import build_plan, runner, tables
    from headroom.measure import timing

    cand = SimpleNamespace(backend=backend, candidate=f"native-{backend}")
    cos, sin = tables(8192, 128, "bfloat16", 10000.0, "cuda")
    h = timing.Harness("cuda", warmup=3, reps=5, graph_calls=4)
    for inv in TRACE.itertuples(index=False):
        sets = inputs.input_sets(inv, 3, "cuda", seed=1)
        lens = inputs.kv_lens_tensor(inv, "cuda")
        for mode in ("eager", "graph"):
            fn = runner(cand, cos, sin, inputs.rotate_k(inv), lens)
            m = h.time(mode, fn, sets)
            assert (m.samples_us > 0).all() and m.samples_us.size >= (5 if mode == "eager" else 2)
        q, k, v = sets[0]
        assert build_plan(cand, cos, sin, inputs.rotate_k(inv), q, k, v, kv_lens=lens) is not None
    assert h.untimed_s["prepare"] > 0
