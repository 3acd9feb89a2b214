"""Fused MoE grouped GEMM (kernels/moe.py): the kernel against its float64 reference in NaN-guarded
buffers, the routing alignment's invariants, the one-line input errors, and (GPU) the bfloat16
Qwen3-MoE layer.

Tolerance of the interpreter cases (float32, float16): the kernel's arithmetic has two error
sources, a float32 accumulation over K and one rounding of the result to the output dtype, so
each element must satisfy
    |out - ref| <= u * |ref| + 2 * K * u32 * mag + subnormal spacing
with u the output dtype's unit roundoff (2^-24 float32, 2^-11 float16), u32 = 2^-24 and
mag = sum_k |a| |w| (times |weight|), the standard bound on a length-K float32 dot product (the 2
covers the routing-weight product and the rounding of the accumulated error). It is about u
relative: a kernel that rounded operands to float16 in a float32 run, or lost a K tail, fails.
"""

from __future__ import annotations

import math

import pytest
import torch
from kernel_helpers import DEVICE, DTYPES, TOLERANCES, errors, poisoned

import kernels
from kernels.moe import align, fused_moe, reference_moe


def cfg(block_m, block_n, block_k, group_m, num_warps=4, num_stages=2) -> dict:
    return dict(
        BLOCK_SIZE_M=block_m,
        BLOCK_SIZE_N=block_n,
        BLOCK_SIZE_K=block_k,
        GROUP_SIZE_M=group_m,
        num_warps=num_warps,
        num_stages=num_stages,
    )


C16 = cfg(16, 16, 16, 1)
C16_G4 = cfg(16, 32, 32, 4)
C32_G1 = cfg(32, 32, 16, 1)
C32_G4 = cfg(32, 16, 32, 4)
# 10 experts so top-8 routing can leave two empty; K = N = 40 leave a masked tail of 8 for every
# block size above (and several N blocks, so GROUP_SIZE_M's reordering is exercised)
E, K, N = 10, 40, 40
# skewed: expert 0 takes 86% of the probability, experts 8, 9 none; ids are distinct per token,
# so expert 0 gets most slots at top_k 1 and about one per token above
SKEWED = torch.tensor([0.86] + [0.02] * 7 + [0.0] * 2)


def route(m: int, top_k: int, routing: str, gen: torch.Generator) -> torch.Tensor:
    """[m, top_k] int64 expert ids, distinct per token like a router's top-k; 'single' sends every
    slot to expert 3."""
    if routing == "single":
        return torch.full((m, top_k), 3, dtype=torch.int64)
    probs = torch.ones(E) if routing == "uniform" else SKEWED
    return torch.multinomial(probs.expand(m, E), top_k, replacement=False, generator=gen)


def guarded(t: torch.Tensor, pad: int = 8) -> torch.Tensor:
    """t copied into the corner of a NaN buffer larger by `pad` in every dimension: a view with
    padded strides whose neighbours are NaN, so a read past K (or a row) shows up as NaN."""
    big = torch.full([s + pad for s in t.shape], float("nan"), dtype=t.dtype, device=t.device)
    view = big[tuple(slice(0, s) for s in t.shape)]
    view.copy_(t)
    return view


def problem(m, top_k, routing, dtype, weighted, seed=0):
    """a [m, K] ~ N(0, 1), w [E, N, K] ~ N(0, 1/K) (outputs of order 1, as in a trained layer),
    ids, and routing weights in (0, 1) or None; on DEVICE, a and w NaN-guarded."""
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, K, generator=gen).to(dtype)
    w = (torch.randn(E, N, K, generator=gen) / math.sqrt(K)).to(dtype)
    ids = route(m, top_k, routing, gen)
    weights = torch.rand(m, top_k, generator=gen) if weighted else None
    to = lambda t: None if t is None else t.to(DEVICE)  # noqa: E731
    return guarded(to(a)), guarded(to(w)), to(ids), to(weights)


def assert_within_bound(out, a, w, ids, weights, dtype) -> None:
    """The module docstring's elementwise bound against reference_moe."""
    assert out.isnan().sum().item() == 0, f"{out.isnan().sum().item()} NaN (unwritten) elements"
    ref = reference_moe(a, w, ids, weights)
    mag = reference_moe(a.abs(), w.abs(), ids, None if weights is None else weights.abs())
    fin = torch.finfo(dtype)
    u, u32 = fin.eps / 2, torch.finfo(torch.float32).eps / 2
    bound = u * ref.abs() + 2 * a.shape[1] * u32 * mag + fin.smallest_normal * fin.eps
    ratio = ((out.double() - ref).abs() / bound).max().item()
    assert ratio <= 1.0, f"error reaches {ratio:.2f}x the bound; rel_err, max_abs_err = {errors(out, ref)}"


CASES = [
    # (M, top_k, routing, config, weighted)
    (1, 1, "uniform", C16, False),
    (1, 8, "uniform", C32_G4, True),
    (13, 2, "uniform", C16_G4, True),  # 26 slots: no multiple of 16 or 32
    (13, 2, "skewed", C32_G1, False),  # 13 of 26 slots on expert 0; experts 3, 7, 8, 9 empty
    (40, 2, "skewed", C16, True),  # 38 slots on expert 0: three blocks of one expert
    (40, 1, "skewed", C16_G4, False),  # 33 of 40 slots on expert 0; four experts empty
    (40, 8, "uniform", C32_G4, False),  # 320 slots, ~32 per expert
    (40, 1, "single", C16_G4, True),  # one expert takes all, nine are empty
    (21, 8, "skewed", C16, True),  # experts 8, 9 empty
]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("m,top_k,routing,config,weighted", CASES)
def test_matches_reference_in_guarded_buffers(m, top_k, routing, config, weighted, dtype):
    a, w, ids, weights = problem(m, top_k, routing, dtype, weighted)
    slots = m * top_k
    # out is a view into a larger NaN buffer: unwritten elements stay NaN inside it, and a store
    # of a sentinel row (index `slots`) or of a column past N lands in the NaN border
    buffer = poisoned((slots + 8, N + 8), dtype)
    out = buffer[:slots, :N]
    assert fused_moe(a, w, ids, weights, config=config, out=out) is out
    assert_within_bound(out, a, w, ids, weights, dtype)
    border = torch.ones(buffer.shape, dtype=torch.bool, device=DEVICE)
    border[:slots, :N] = False
    assert buffer[border].isnan().all(), "the kernel wrote outside out (a sentinel row or the N tail)"


def test_default_output_equals_poisoned_buffer_output():
    a, w, ids, weights = problem(13, 2, "skewed", DTYPES[0], True, seed=1)
    fresh = fused_moe(a, w, ids, weights, config=C16_G4)
    assert fresh.shape == (26, N) and fresh.dtype == DTYPES[0] and fresh.is_contiguous()
    assert torch.equal(fresh, fused_moe(a, w, ids, weights, config=C16_G4, out=poisoned((26, N), DTYPES[0])))


def test_a_call_without_the_id_check_computes_the_same_and_skips_only_that_check():
    # check_ids=False: a timed or captured call whose routing was checked once (no sync per call)
    a, w, ids, weights = problem(13, 2, "uniform", DTYPES[0], True, seed=2)
    checked = fused_moe(a, w, ids, weights, config=C32_G4)
    assert torch.equal(checked, fused_moe(a, w, ids, weights, config=C32_G4, check_ids=False))
    with pytest.raises(ValueError, match="topk_ids must lie"):
        fused_moe(a, w, ids + E, weights, config=C32_G4)
    with pytest.raises(ValueError, match="config keys must be exactly"):  # every other check stays
        fused_moe(a, w, ids, weights, config={**C32_G4, "SPLIT_K": 1}, check_ids=False)


def test_align_small_example():
    ids = torch.tensor([[2, 0], [2, 3]], device=DEVICE)
    sorted_ids, expert_of_block, padded = align(ids, 4, 2)
    # expert 0: slot 1 + pad; expert 1: none; expert 2: slots 0, 2; expert 3: slot 3 + pad;
    # capacity 4 slots + 4 experts * 1 pad = 8
    # within an expert, the order of its slots is the order its atomics landed (any on a GPU)
    got = sorted_ids.tolist()
    assert got[:2] == [1, 4] and sorted(got[2:4]) == [0, 2] and got[4:] == [3, 4, 4, 4]
    assert expert_of_block.tolist() == [0, 2, 3, -1]
    assert padded.tolist() == [6]


@pytest.mark.parametrize("block_m", [16, 32])
# (300, 8): 2,400 slots over three programs of the count and scatter kernels, and 150+ entry
# blocks over three steps of the offsets kernel's search
@pytest.mark.parametrize(
    "m,top_k,routing", [(1, 1, "uniform"), (37, 2, "skewed"), (50, 8, "uniform"), (300, 8, "skewed")]
)
def test_align_invariants(m, top_k, routing, block_m):
    ids = route(m, top_k, routing, torch.Generator().manual_seed(m)).to(DEVICE)
    sorted_ids, expert_of_block, padded_tokens = (t.cpu() for t in align(ids, E, block_m))
    flat, sentinel, padded = ids.cpu().reshape(-1), m * top_k, padded_tokens.item()
    assert len(sorted_ids) == len(expert_of_block) * block_m and padded % block_m == 0
    real = sorted_ids[sorted_ids != sentinel]
    assert torch.equal(real.sort().values, torch.arange(sentinel, dtype=torch.int32))  # each slot once
    assert (sorted_ids[padded:] == sentinel).all() and (expert_of_block[padded // block_m :] == -1).all()
    blocks, counts = sorted_ids[:padded].view(-1, block_m), torch.bincount(flat, minlength=E)
    for e in range(E):
        mine = blocks[expert_of_block[: padded // block_m] == e].reshape(-1)
        assert len(mine) == math.ceil(counts[e].item() / block_m) * block_m  # padded to block_m
        slots = mine[mine != sentinel]
        mine_sorted = slots.sort().values  # each of the expert's slots once, in any order
        assert torch.equal(mine_sorted, (flat == e).nonzero().squeeze(1).to(torch.int32))
        assert (mine[len(slots) :] == sentinel).all()  # padding at the group's end
    assert (expert_of_block[: padded // block_m].diff() >= 0).all()  # one contiguous group per expert


def _bad_inputs():
    """(id, change to the good arguments, expected message) for each check."""
    a, w, ids, weights = problem(3, 2, "uniform", DTYPES[0], True)

    def args(**change):
        good = dict(a=a, w=w, topk_ids=ids, topk_weights=weights, config=C16)
        return {**good, **change}

    def config(**change):
        return args(config={k: v for k, v in {**C16, **change}.items() if v is not None})

    return [
        ("a-1d", args(a=a[0]), r"a must be a \[M, K\] tensor, got shape \(40,\)"),
        ("w-k", args(w=w[:, :, :8]), r"w \[E, N, K\] has K=8 but a \[M, K\] has K=40"),
        ("ids-m", args(topk_ids=ids[:2]), r"topk_ids must be \[M=3, top_k >= 1\], got \(2, 2\)"),
        ("ids-high", args(topk_ids=ids + E), r"topk_ids must lie in \[0, 10\), got min"),
        ("ids-negative", args(topk_ids=ids - E), r"topk_ids must lie in \[0, 10\)"),
        ("ids-float", args(topk_ids=ids.float()), "topk_ids dtype must be int32 or int64"),
        ("a-dtype", args(a=a.double(), w=w.double()), "a dtype torch.float64 is not supported"),
        ("w-dtype", args(w=w.to(DTYPES[1])), "w dtype .* differs from a dtype"),
        ("no-tokens", args(a=a[:0], topk_ids=ids[:0], topk_weights=None), "must have no empty dimension"),
        ("weights-shape", args(topk_weights=weights[:, :1]), r"topk_weights must match topk_ids \(3, 2\)"),
        ("weights-dtype", args(topk_weights=weights.double()), "topk_weights dtype must be float32"),
        ("config-type", args(config=[16, 16]), "config must be a dict"),
        ("config-missing", config(GROUP_SIZE_M=None), r"missing \['GROUP_SIZE_M'\], unknown \[\]"),
        ("config-unknown", config(SPLIT_K=1), r"missing \[\], unknown \['SPLIT_K'\]"),
        ("config-not-pow2", config(BLOCK_SIZE_N=24), "BLOCK_SIZE_N must be a power of two >= 16"),
        ("config-small-k", config(BLOCK_SIZE_K=8), "BLOCK_SIZE_K must be a power of two >= 16"),
        ("config-warps", config(num_warps=3), "num_warps must be a power of two, got 3"),
        ("config-stages", config(num_stages=0), "num_stages must be a positive int, got 0"),
        ("config-bool", config(GROUP_SIZE_M=True), "GROUP_SIZE_M must be a positive int, got True"),
        ("out-shape", args(out=poisoned((3, N), DTYPES[0])), r"out must have shape \(6, 40\)"),
    ]


@pytest.mark.parametrize("case", _bad_inputs(), ids=lambda c: c[0])
def test_bad_input_gets_one_line_value_error(case):
    _, kwargs, match = case
    with pytest.raises(ValueError, match=match) as info:
        fused_moe(**kwargs)
    assert "\n" not in str(info.value)


# per-M configs in the shape of a tuned table (shared memory 80-110 KB: within the H200's 227 KB)
GPU_CONFIGS = {
    1: cfg(16, 64, 128, 1, num_stages=4),
    64: cfg(16, 128, 128, 1, num_stages=3),
    4096: cfg(64, 128, 64, 8, num_stages=4),
}


@pytest.mark.gpu
@pytest.mark.skipif(kernels.interpreted(), reason="kernels were imported for the interpreter")
@pytest.mark.parametrize("projection", ["gate_up", "down"])
@pytest.mark.parametrize("m", [1, 64, 4096])
def test_qwen3_moe_layer_bfloat16_on_gpu(m, projection):
    """Qwen3-MoE-like layer (128 experts, top-8, hidden 2048, expert intermediate 768), compiled
    in bfloat16, which the interpreter cannot check: gate-up (N 1536, K 2048) and down (N 2048,
    K 768, routing weights multiplied in). Tolerance: the studies' bfloat16 (rel, abs) table,
    meaningful because w ~ N(0, 1/K) keeps outputs of order 1."""
    experts, top_k, hidden, inter = 128, 8, 2048, 768
    n, k = (2 * inter, hidden) if projection == "gate_up" else (hidden, inter)
    gen = torch.Generator().manual_seed(m)
    a = torch.randn(m, k, generator=gen).to(torch.bfloat16).cuda()
    w = (torch.randn(experts, n, k, generator=gen) / math.sqrt(k)).to(torch.bfloat16).cuda()
    probs, ids = torch.randn(m, experts, generator=gen).softmax(-1).topk(top_k, dim=-1)
    weights = (probs / probs.sum(-1, keepdim=True)).cuda() if projection == "down" else None
    out = fused_moe(
        a, w, ids.cuda(), weights, config=GPU_CONFIGS[m], out=poisoned((m * top_k, n), torch.bfloat16)
    )
    assert out.isnan().sum().item() == 0
    rel, abs_ = errors(out, reference_moe(a, w, ids.cuda(), weights))
    rel_tol, abs_tol = TOLERANCES[torch.bfloat16]
    assert rel <= rel_tol and abs_ <= abs_tol, (rel, abs_)
