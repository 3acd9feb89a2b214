"""Generation-2 paths: plan/run and the RoPE placements (rope=) against the float64 reference,
plan reuse against attention(), and the checks Plan.run makes before it launches."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kernel_helpers import (
    DEVICE,
    DTYPES,
    TOLERANCES,
    assert_close,
    draw_shape,
    errors,
    poisoned,
    problem_shape,
    random_qkv,
)

import kernels
from kernels import Tile, Variant, attention, plan, reference_attention, rope_tables
from kernels import split as split_module
from kernels.decode import decode_launches

TILES = [Tile(16, 16, 4, 2), Tile(32, 16, 4, 2), Tile(32, 32, 4, 2)]
VARIANTS = [
    Variant(),
    Variant(tma=True),
    Variant(pack_gqa=True),
    Variant(tma=True, warp_specialize=True, pack_gqa=True),
    Variant(decode_reduce_in_kernel=False),
]


@st.composite
def cases(draw):
    return dict(
        draw_shape(draw, [1, 3, 4]),
        tile=draw(st.sampled_from(TILES)),
        rope=draw(st.sampled_from(kernels.ROPE_MODES)),
        variant=draw(st.sampled_from(VARIANTS)),
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_plan_matches_reference_on_random_shapes(case):
    """Every RoPE placement and prefill variant, any 1 <= Sq <= Skv (decode and its split path at
    Sq = 1), GQA 1-4, strided or not: the output matches float64, every element is written, and
    a second run of the same plan on fresh tensors is right too."""
    gen = torch.Generator().manual_seed(case["seed"])
    shape = problem_shape(case)
    cos, sin = rope_tables(case["kv_len"] + 3, case["head_dim"], device=DEVICE)
    p = None
    for _ in range(2):
        q, k, v = random_qkv(*shape, case["dtype"], gen, strided=case["strided"])
        if p is None:
            p = plan(
                q,
                k,
                v,
                cos,
                sin,
                tile=case["tile"],
                rope=case["rope"],
                rotate_k=case["rotate_k"],
                variant=case["variant"],
            )
        out = p.run(q, k, v, cos, sin, out=poisoned(q.shape, case["dtype"]))
        ref = reference_attention(q, k, v, cos, sin, rotate_k=case["rotate_k"])
        assert_close(out, ref, case["dtype"], f"{p} {case}")


def test_q_fused_and_variants_on_a_long_chunk():
    """A 21-query chunk after a 279-key prefix: the generation-2 kernel's causal offset, its
    masked diagonal and the unmasked loop over many key blocks, for every variant."""
    gen = torch.Generator().manual_seed(4)
    dtype = DTYPES[0]
    q, k, v = random_qkv(1, 4, 1, 21, 300, 32, dtype, gen)
    cos, sin = rope_tables(300, 32, device=DEVICE)
    ref = reference_attention(q, k, v, cos, sin, rotate_k=True)
    for variant in VARIANTS:
        out = attention(
            q,
            k,
            v,
            cos,
            sin,
            tile=Tile(32, 32, 4, 2),
            rope="q_fused",
            rotate_k=True,
            variant=variant,
            out=poisoned(q.shape, dtype),
        )
        assert_close(out, ref, dtype, f"q_fused {variant}")


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("q_len,kv_len,rotate_k", [(19, 19, True), (1, 50, False)])
def test_plan_reuse_is_bit_identical_to_attention(fused, q_len, kv_len, rotate_k):
    """A generation-1 plan runs the same kernels with the same arguments as attention(fused=):
    same bits, on the plan's tensors and on fresh ones (decode through the split path)."""
    gen = torch.Generator().manual_seed(9)
    dtype, tile = DTYPES[0], Tile(16, 16, 4, 2)
    cos, sin = rope_tables(kv_len, 32, device=DEVICE)
    q, k, v = random_qkv(2, 4, 2, q_len, kv_len, 32, dtype, gen)
    p = plan(q, k, v, cos, sin, tile=tile, fused=fused, rotate_k=rotate_k)
    assert p.generation == 1 and (p.num_splits > 1) == (q_len == 1)
    for _ in range(2):
        a = p.run(q, k, v, cos, sin)
        b = attention(q, k, v, cos, sin, tile=tile, fused=fused, rotate_k=rotate_k)
        assert torch.equal(a, b)
        q, k, v = random_qkv(2, 4, 2, q_len, kv_len, 32, dtype, gen)


@pytest.mark.parametrize("reduce_in_kernel", [True, False])
def test_decode_split_merge_of_a_chunk(reduce_in_kernel):
    """The split-KV decode kernel on a 30-query chunk over 96 keys (early rows see no key of the
    later splits), merging in-kernel or by the reduction launch; run twice, since the in-kernel
    merge must leave its arrival counters at zero for the next launch."""
    gen = torch.Generator().manual_seed(7)
    dtype = DTYPES[-1]
    q, k, v = random_qkv(1, 4, 1, 30, 96, 64, dtype, gen)
    cos, sin = rope_tables(96, 64, device=DEVICE)
    tensors = {"q": q, "k": k, "v": v, "cos": cos, "sin": sin, "out": poisoned(q.shape, dtype)}
    launches = decode_launches(
        tensors,
        Tile(16, 16, 4, 2),
        Variant(decode_reduce_in_kernel=reduce_in_kernel),
        rotate_q=True,
        rotate_k=False,
    )
    specs, scratch = launches.specs, launches.scratch
    assert launches.num_splits > 1 and launches.reduce_in_kernel == reduce_in_kernel
    assert len(specs) == (1 if reduce_in_kernel else 2)
    tensors.update(scratch)
    for _ in range(2):
        tensors["out"].fill_(float("nan"))
        for spec in specs:
            spec.launch(tensors)
        assert_close(tensors["out"], reference_attention(q, k, v, cos, sin, rotate_k=False), dtype, "chunk")
    if reduce_in_kernel:
        assert int(scratch["counters"].abs().sum()) == 0


def test_attention_rope_is_its_cached_plan():
    gen = torch.Generator().manual_seed(10)
    q, k, v = random_qkv(1, 4, 1, 20, 20, 32, DTYPES[0], gen)
    cos, sin = rope_tables(20, 32, device=DEVICE)
    a = attention(q, k, v, cos, sin, tile=TILES[0], rope="q_fused", rotate_k=True)
    b = plan(q, k, v, cos, sin, tile=TILES[0], rope="q_fused", rotate_k=True).run(q, k, v, cos, sin)
    assert torch.equal(a, b)


def _example():
    gen = torch.Generator().manual_seed(1)
    q, k, v = random_qkv(1, 4, 2, 17, 17, 32, DTYPES[0], gen)
    cos, sin = rope_tables(20, 32, device=DEVICE)
    return q, k, v, cos, sin


@pytest.mark.parametrize("name", ["q", "k", "v", "cos", "sin", "out"])
def test_run_refuses_tensors_unlike_the_plan(name):
    q, k, v, cos, sin = _example()
    p = plan(q, k, v, cos, sin, tile=TILES[0], rope="fused", rotate_k=True)
    good = dict(q=q, k=k, v=v, cos=cos, sin=sin, out=torch.empty_like(q))
    t = good[name]
    other_dtype = DTYPES[1] if t.dtype == DTYPES[0] else DTYPES[0]
    storage = torch.empty(t.numel() + 8, dtype=t.dtype, device=DEVICE)
    unlike = {
        "shape": t[:-1] if name in ("cos", "sin") else t[..., :-1, :],
        "dtype": t.to(other_dtype),
        "strides": t.transpose(-1, -2).contiguous().transpose(-1, -2),
        "device": t.to("meta"),
        "alignment": storage[1 : 1 + t.numel()].view(t.shape),
    }
    for what, bad in unlike.items():
        with pytest.raises(ValueError, match=f"Plan.run: {name} does not match the plan") as info:
            p.run(**{**good, name: bad})
        assert "make a new plan" in str(info.value), what


def test_plan_refuses_bad_arguments():
    q, k, v, cos, sin = _example()
    with pytest.raises(ValueError, match="exactly one of fused="):
        plan(q, k, v, cos, sin, tile=TILES[0], rotate_k=True)
    with pytest.raises(ValueError, match="exactly one of fused="):
        plan(q, k, v, cos, sin, tile=TILES[0], rotate_k=True, fused=True, rope="fused")
    with pytest.raises(ValueError, match="rope must be one of"):
        plan(q, k, v, cos, sin, tile=TILES[0], rotate_k=True, rope="both")
    with pytest.raises(ValueError, match="variant= applies to generation-2"):
        plan(q, k, v, cos, sin, tile=TILES[0], rotate_k=True, fused=True, variant=Variant())
    with pytest.raises(ValueError, match="cos covers 20 positions but 21"):
        k2, v2 = torch.cat((k, k[:, :, :4]), 2), torch.cat((v, v[:, :, :4]), 2)
        plan(q, k2, v2, cos, sin, tile=TILES[0], rotate_k=True, rope="q_fused")


def test_split_plan_is_torch_free_and_matches_the_kernels():
    """kernels/split.py imports neither torch nor triton (the roofline imports it), and
    kernels.decode_split_plan is its plan with this mode's split sizes."""
    source = open(split_module.__file__).read()
    assert "import torch" not in source and "import triton" not in source
    from kernels.mode import MIN_SPLIT_KEYS, SPLIT_ALIGN_KEYS

    for programs, kv_len in ((1, 96), (8, 32768), (600, 4096)):
        assert kernels.decode_split_plan(programs, kv_len, 132) == split_module.decode_split_plan(
            programs, kv_len, 132, min_split_keys=MIN_SPLIT_KEYS, align_keys=SPLIT_ALIGN_KEYS
        )
    assert split_module.decode_split_plan(8, 2048, 132) == (8, 256)  # B1 Hkv8 Skv2048 on the H200


def test_generation_tag():
    assert kernels.GENERATION == 2 and isinstance(kernels.GENERATION, int)


@pytest.mark.gpu
@pytest.mark.skipif(kernels.interpreted(), reason="kernels were imported for the interpreter")
@pytest.mark.parametrize("rope", kernels.ROPE_MODES)
@pytest.mark.parametrize("variant", [VARIANTS[0], VARIANTS[-1]], ids=lambda v: v.name)
def test_bfloat16_generation2_on_gpu(rope, variant):
    """The study's dtype and head_dim, compiled, TMA / warp-specialised / packed paths included
    (the interpreter cannot check bfloat16 or the compiled launchers)."""
    gen = torch.Generator().manual_seed(0)
    for q_len, kv_len, rotate_k in ((300, 300, True), (1, 5000, False), (77, 3001, False)):
        q = torch.randn(2, 32, q_len, 128, generator=gen).to(torch.bfloat16).cuda()
        k = torch.randn(2, 8, kv_len, 128, generator=gen).to(torch.bfloat16).cuda()
        v = torch.randn(2, 8, kv_len, 128, generator=gen).to(torch.bfloat16).cuda()
        cos, sin = rope_tables(kv_len, 128, device="cuda")
        p = plan(q, k, v, cos, sin, tile=Tile(128, 64, 8, 3), rope=rope, rotate_k=rotate_k, variant=variant)
        assert p.direct, p.fallback_reasons
        out = p.run(q, k, v, cos, sin, out=poisoned(q.shape, torch.bfloat16))
        rel, abs_ = errors(out, reference_attention(q, k, v, cos, sin, rotate_k=rotate_k))
        assert rel <= TOLERANCES[torch.bfloat16][0] and abs_ <= TOLERANCES[torch.bfloat16][1], (rel, abs_)


@pytest.mark.parametrize(
    "q_len,kv_len,rotate_k", [(8, 8, True), (4, 40, False), (1, 64, False), (1, 8, False)]
)
def test_plan_launches_follow_the_schedule(q_len, kv_len, rotate_k):
    """kernels/schedule.py's launch sequence (what the roofline counts) is what plan() builds, for
    every placement of both generations and both decode merges: same steps, same kernels."""
    from kernels import schedule

    gen = torch.Generator().manual_seed(11)
    q, k, v = random_qkv(1, 4, 2, q_len, kv_len, 32, DTYPES[0], gen)
    cos, sin = rope_tables(kv_len, 32, device=DEVICE)
    kernel_step = {"rope_kernel": "rope", "prefill_kernel": "prefill", "prefill2_kernel": "prefill"}
    kernel_step |= {"decode_kernel": "decode", "reduce_kernel": "reduce"}
    cases = [(1, r, None) for r in ("unfused", "fused")]
    cases += [(2, r, v_) for r in kernels.ROPE_MODES for v_ in (None, Variant(decode_reduce_in_kernel=True))]
    for generation, rope, variant in cases:
        how = {"fused": rope == "fused"} if generation == 1 else {"rope": rope, "variant": variant}
        p = plan(q, k, v, cos, sin, tile=Tile(16, 16, 4, 2), rotate_k=rotate_k, **how)
        steps = schedule.launch_sequence(
            rope, generation, rotate_k=rotate_k, q_len=q_len, num_splits=p.num_splits, variant=variant
        )
        ran = [kernel_step[spec.kernel.__name__] for spec in p.specs]
        assert p.launches == len(steps) and ran == [s.removesuffix("_q").removesuffix("_k") for s in steps]
