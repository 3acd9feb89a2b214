"""The example family compiled on the GPU: every config of its @triton.autotune kernel, launched
through from_triton_autotune, matches the float64 reference in bfloat16 on a decode-sized, a
capture-sized and a prefill-sized step."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def test_the_rmsnorm_family_passes_its_reference_on_the_gpu():
    from headroom.families import Step, check, expand, load

    loaded = load("examples.rmsnorm.family:FAMILY", device="cuda")
    steps = [
        Step(0, 0.0, "decode-only", (100,) * 8, (), 8),
        Step(1, 0.02, "mixed", (100,) * 3, ((509, 509),), 512),
        Step(2, 0.04, "prefill-only", (), ((3000, 3000),), 3000),
    ]
    results = check.check(loaded.family, expand.expand(loaded.family, steps), device="cuda")
    assert len(results) == 3 * 4 and set(results["status"]) == {"passed"}, results.to_string()
    assert set(results["dtype"]) == {"bfloat16"}
