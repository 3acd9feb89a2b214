"""The fused-MoE family compiled on the GPU in bfloat16: every candidate of the Qwen3-MoE-like and
the Mixtral-like layers (our configs and torch._grouped_mm) matches the float64 reference on a
decode-sized, a capture-sized and a prefill-sized step, uniformly and skewed routed."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def _steps():
    from headroom.families import Step

    return [
        Step(0, 0.0, "decode-only", (100,) * 8, (), 8),
        Step(1, 0.02, "mixed", (100,) * 3, ((509, 509),), 512),
        Step(2, 0.04, "prefill-only", (), ((4096, 4096),), 4096),
    ]


@pytest.mark.parametrize("layer, steps", [("QWEN3", 3), ("MIXTRAL", 2)])
def test_every_moe_candidate_passes_its_reference_on_the_gpu(layer, steps):
    from headroom.families import check, expand, load

    family = load(f"headroom.families.moe.family:{layer}", device="cuda").family
    results = check.check(family, expand.expand(family, _steps()[:steps]), device="cuda")
    n = len(family.candidates())
    assert len(results) == steps * n and set(results["status"]) == {"passed"}, results.to_string()
    assert set(results["dtype"]) == {"bfloat16"}


def test_skewed_routing_passes_too():
    from headroom.families import check, expand
    from headroom.families.moe.family import QWEN3, MoEFamily

    family = MoEFamily(QWEN3.layer, routing="skewed")
    results = check.check(family, expand.expand(family, _steps()[:2]), device="cuda")
    assert set(results["status"]) == {"passed"}, results.to_string()


def test_the_weights_are_drawn_on_the_gpu_once_per_process():
    # drawn by the device's own generator: QWEN3's 402M draws from the CPU's cost every process
    # (each portfolio run, correctness, each cold-compile child) seconds before any timing
    import time

    from headroom.families.moe.family import QWEN3, MoEFamily

    family = MoEFamily(QWEN3.layer)
    t0 = time.perf_counter()
    w = family.weights("cuda")
    torch.cuda.synchronize()
    drawn_s = time.perf_counter() - t0
    assert w.is_cuda and w.dtype == torch.bfloat16 and tuple(w.shape) == (128, 1536, 2048)
    assert family.weights("cuda") is w  # once per device and process
    assert abs(w[0].float().std().item() * 2048**0.5 - 1) < 0.01  # N(0, 1/K)
    assert torch.equal(MoEFamily(QWEN3.layer).weights("cuda"), w)  # seed 0: the same weights
    assert drawn_s < 1.0, f"drawing the weights took {drawn_s:.2f} s"
