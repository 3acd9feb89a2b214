"""One way to run a candidate, for every stage: the correctness gate, the portfolio runs, the
lifecycle costs and the graph sweep execute exactly the same code for the same candidate row.

Decode rows with kv_lens (ragged serving batches; input sets in the padded layout of
headroom.families.attention.inputs.input_sets, the lengths passed here as `kv_lens`):
    generation 3 (the varlen decode) reads the lengths there; on every other row (prefills, chunks,
        decodes without kv_lens) a generation-3 candidate runs generation 2's q_fused plan of its
        tile, as a server with a varlen decode kernel runs its other steps, so the family is a
        complete candidate: timed on every invocation, it stays in the analysis' matrix;
    native candidates read them too: the SDPA backends through a (B, 1, 1, Skv) boolean length
        mask (a backend with no kernel for a mask raises "No available kernel", which the
        correctness gate records as `unsupported`), FlexAttention through a length mask_mod;
        their q is rotated at kv_lens[b] - 1 by our standalone RoPE kernel over tables gathered
        once per lengths (one launch, as on other rows);
    generations 1 and 2 run on the padded batch, every sequence as long as the longest: a kernel
        that takes no lengths can only attend over the whole cache, which is what a server
        without varlen kernels pays (and what the traces' `kv_summary: max` modelled). Their
        answer is the padded problem's, and the correctness gate checks it against that
        (takes_lengths() says which reference a candidate answers).
Every candidate runs on every row, so the portfolio's matrix stays complete.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

from headroom.families.attention.candidates import (
    FLASHINFER_BACKENDS,
    SDPA_BACKENDS,
    VARLEN_GENERATION,
    placement,
)


def is_native(cand: Any) -> bool:
    return str(getattr(cand, "backend", "triton") or "triton") != "triton"


def is_varlen(cand: Any) -> bool:
    """A candidate of the variable-length decode family (generation 3)."""
    return not is_native(cand) and placement(cand)[1] == VARLEN_GENERATION


def takes_lengths(cand: Any) -> bool:
    """Whether the candidate reads kv_lens (varlen and native) rather than the padded batch."""
    return is_native(cand) or is_varlen(cand)


def _sdpa_backend(name: str):
    from torch.nn.attention import SDPBackend

    return {
        "cudnn": SDPBackend.CUDNN_ATTENTION,
        "flash": SDPBackend.FLASH_ATTENTION,
        "efficient": SDPBackend.EFFICIENT_ATTENTION,
        "math": SDPBackend.MATH,
    }[name]


def _causal_sdpa(backend: str) -> Callable:
    """attend(q, k, v, kv_lens=None) by PyTorch SDPA with one backend forced, causal mask aligned
    bottom-right (torch's is_causal is top-left aligned when Sq != Skv: causal_lower_right
    there); with kv_lens (decode), a boolean length mask per sequence."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right

    which = _sdpa_backend(backend)
    length_masks: dict[tuple, tuple] = {}  # (id(kv_lens), Skv) -> (kv_lens, mask); holds kv_lens alive

    def length_mask(kv_lens, skv: int, device):
        """(B, 1, 1, Skv) bool, key j visible to sequence b when j < kv_lens[b]: built once per
        lengths, as a server builds its batch metadata once per step."""
        key = (id(kv_lens), skv)
        if key not in length_masks:
            visible = torch.arange(skv, device=device) < kv_lens[:, None].to(torch.int64)  # (B, Skv)
            length_masks[key] = (kv_lens, visible[:, None, None, :])
        return length_masks[key][1]

    def forced(q, k, v, kv_lens=None):
        sq, skv = q.shape[2], k.shape[2]
        if kv_lens is not None:  # one query per sequence: keys below its length
            mask = length_mask(kv_lens, skv, q.device)
            return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
        if sq == skv:
            return F.scaled_dot_product_attention(q, k, v, is_causal=sq > 1, enable_gqa=True)
        if sq == 1:  # bottom-right causal: the one new query sees every cached key
            return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=causal_lower_right(sq, skv), enable_gqa=True)

    def attend(q, k, v, kv_lens=None):
        if which in _HELD:  # the timing harness holds the backend around the whole measurement
            return forced(q, k, v, kv_lens)
        with sdpa_kernel(which):
            return forced(q, k, v, kv_lens)

    attend.hold = lambda: hold(which)
    return attend


# SDPA backends whose choice is held around a whole measurement (``hold``): a server chooses its
# attention backend once, not per call, and `sdpa_kernel` entered per call costs ~45 µs of host time
# (H200, issue 35), which would be charged to the native and not to ours.
_HELD: set = set()


@contextmanager
def hold(which):
    """The SDPA backend ``which`` chosen once for everything inside (the harness's measurement)."""
    from torch.nn.attention import sdpa_kernel

    with sdpa_kernel(which):
        _HELD.add(which)
        try:
            yield
        finally:
            _HELD.discard(which)


# FlexAttention is compiled once per process with dynamic shapes (a trace holds tens of shapes:
# one graph per shape would pass dynamo's recompile limit of 8 and fall back to eager, silently
# timing the unfused path); its block masks depend on the shape only, so one per (Sq, Skv, device)
# is built at first use and reused, as a serving engine builds it once per batch.
_FLEX_MASKS: dict[tuple, Any] = {}  # (Sq, Skv, device) -> block mask
_FLEX_FNS: dict[bool, Callable] = {}  # on CUDA -> the compiled (True) or eager (False) function
FLEX_BLOCK = 128  # create_block_mask's default block size, in both dimensions


def flex_block_mask(visible, mask_mod: Callable, sq: int, skv: int):
    """The BlockMask ``create_block_mask(mask_mod, B, H, sq, skv, device=visible.device)`` builds,
    from ``visible``: mask_mod's answer on every (b, h, q, kv), a boolean tensor broadcastable to
    (B, H, sq, skv), computed by the caller with a few tensor operations. create_block_mask gets
    the same answer by calling mask_mod under four nested vmaps, tens of milliseconds of host
    work per mask (a new mask every invocation of a run, in its first call); from there on both
    take the same steps (blocks padded with False to a multiple of FLEX_BLOCK, full blocks apart
    from partial ones, each row's blocks in stable descending order), so the kernel reads the
    same tensors: tests/families/test_flex_mask.py holds the two equal on the CPU and on CUDA."""
    import torch
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import BlockMask

    mask = visible.reshape((1,) * (4 - visible.dim()) + tuple(visible.shape))
    pad_q, pad_kv = -sq % FLEX_BLOCK, -skv % FLEX_BLOCK
    mask = F.pad(mask.expand(*mask.shape[:2], sq, skv), (0, pad_kv, 0, pad_q))
    b, h, nq, nkv = mask.shape[0], mask.shape[1], mask.shape[2] // FLEX_BLOCK, mask.shape[3] // FLEX_BLOCK
    sums = mask.reshape(b, h, nq, FLEX_BLOCK, nkv, FLEX_BLOCK).sum(dim=(3, 5))
    full = sums == FLEX_BLOCK * FLEX_BLOCK
    partial = (sums > 0) & ~full

    def ordered(dense):  # what create_block_mask's _dense_to_ordered computes, by public operations
        dense = dense.to(torch.int32)
        order = torch.argsort(dense, dim=-1, descending=True, stable=True)
        return dense.sum(dim=-1).to(torch.int32), order.to(torch.int32)

    return BlockMask.from_kv_blocks(
        *ordered(partial), *ordered(full), BLOCK_SIZE=(FLEX_BLOCK, FLEX_BLOCK), mask_mod=mask_mod,
        seq_lengths=(sq, skv),
    )  # fmt: skip


def _causal_flex() -> Callable:
    """attend(q, k, v, kv_lens=None) by FlexAttention with a bottom-right causal block mask, or with
    kv_lens (decode) a length mask (key j visible to sequence b when j < kv_lens[b]), built once
    per lengths tensor: the varlen decode's native peer. On CUDA it runs the compiled kernel;
    elsewhere (the interpreter's CPU runs) eager FlexAttention, which is correct but materializes
    the scores: there it is a correctness check, not a timing."""
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    length_masks: dict[int, tuple] = {}  # id(kv_lens) -> (kv_lens, block mask); holds kv_lens alive

    def mask_for(q, k, kv_lens):
        sq, skv = q.shape[2], k.shape[2]
        if kv_lens is not None:
            if id(kv_lens) not in length_masks:

                def within(b, h, q_idx, kv_idx):
                    return kv_idx < kv_lens[b]

                cols = torch.arange(skv, device=q.device)
                visible = (cols < kv_lens.to(q.device)[:, None]).view(-1, 1, 1, skv)
                length_masks[id(kv_lens)] = (kv_lens, flex_block_mask(visible, within, sq, skv))
            return length_masks[id(kv_lens)][1]
        key = (sq, skv, str(q.device))
        if key not in _FLEX_MASKS:
            offset = skv - sq

            def causal(b, h, q_idx, kv_idx):
                return kv_idx <= q_idx + offset

            rows, cols = torch.arange(sq, device=q.device), torch.arange(skv, device=q.device)
            _FLEX_MASKS[key] = flex_block_mask(cols[None, :] <= rows[:, None] + offset, causal, sq, skv)
        return _FLEX_MASKS[key]

    def attend(q, k, v, kv_lens=None):
        if q.is_cuda not in _FLEX_FNS:
            _FLEX_FNS[q.is_cuda] = _compiled_flex(flex_attention) if q.is_cuda else flex_attention
        return _FLEX_FNS[q.is_cuda](q, k, v, block_mask=mask_for(q, k, kv_lens), enable_gqa=True)

    return attend


def _compiled_flex(flex_attention) -> Callable:
    import torch
    import torch._dynamo

    # Decode (Sq = 1) and prefill specialize apart; raise the limits so no shape falls back to eager.
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 256)
    torch._dynamo.config.accumulated_recompile_limit = max(
        torch._dynamo.config.accumulated_recompile_limit, 4096
    )
    return torch.compile(flex_attention, dynamic=True)


def _native_fn(backend: str, cos, sin, rotate_k: bool, kv_lens=None) -> Callable:
    """RoPE by our standalone kernel (q at positions Skv-Sq+i, k at j when rotate_k), then the native
    attention (an SDPA backend or FlexAttention) with the causal mask aligned bottom-right. With
    kv_lens (a ragged decode) q is rotated at kv_lens[b] - 1 (_rope_per_sequence) and the keys
    are masked past each sequence's length."""
    from kernels import rope

    if backend in FLASHINFER_BACKENDS:
        return _flashinfer_fn(backend, cos, sin, rotate_k, kv_lens)
    if backend == "flex":
        attend = _causal_flex()
    elif backend.startswith("sdpa-") and backend[5:] in SDPA_BACKENDS:
        attend = _causal_sdpa(backend[5:])
    else:
        raise ValueError(f"backend {backend!r} is not a native candidate backend")

    rotate_q = None if kv_lens is None else _rope_per_sequence(cos, sin, kv_lens)

    def fn(q, k, v, out=None):
        sq, skv = q.shape[2], k.shape[2]
        if kv_lens is None:
            res = attend(rope(q, cos, sin, skv - sq), rope(k, cos, sin, 0) if rotate_k else k, v)
        else:
            res = attend(rotate_q(q), k, v, kv_lens)
        return res if out is None else out.copy_(res)

    if hasattr(attend, "hold"):
        fn.hold = attend.hold
    return fn


def _rope_per_sequence(cos, sin, kv_lens) -> Callable:
    """rotate(q, out=None) for one query per sequence, q (B, H, 1, D), at positions kv_lens[b] - 1:
    our standalone RoPE kernel (one launch, as on other rows) over q viewed (1, H, B, D), the batch
    axis as positions 0..B-1 of tables gathered once per lengths: row b = row kv_lens[b] - 1."""
    import torch

    from kernels import rope

    positions = (kv_lens - 1).to(torch.int64)
    cos_b, sin_b = cos[positions].contiguous(), sin[positions].contiguous()  # (B, D/2)

    def rotate(q, out=None):
        out = torch.empty_like(q) if out is None else out
        rope(q.permute(2, 1, 0, 3), cos_b, sin_b, 0, out=out.permute(2, 1, 0, 3))
        return out

    return rotate


def _flashinfer_fn(backend: str, cos, sin, rotate_k: bool, kv_lens=None) -> Callable:
    """A FlashInfer candidate (headroom.families.attention.flashinfer): RoPE by our standalone
    kernel written into FlashInfer's layout, as for the other natives."""
    from headroom.families.attention import flashinfer
    from kernels import rope

    if kv_lens is None:

        def rope_q(q, skv, out):
            rope(q, cos, sin, skv - q.shape[2], out=out)

    else:
        per_sequence = _rope_per_sequence(cos, sin, kv_lens)

        def rope_q(q, skv, out):
            per_sequence(q, out)

    rope_k = (lambda k, out: rope(k, cos, sin, 0, out=out)) if rotate_k else None
    return flashinfer.candidate(backend, rope_q, rope_k, kv_lens)


def runner(cand: Any, cos, sin, rotate_k: bool, kv_lens=None) -> Callable:
    """fn(q, k, v, out=None) -> out for one candidate row (a namedtuple/Series with the COLUMNS).
    out: an optional output buffer (the correctness gate passes poisoned ones). kv_lens: the
    (B,) int32 lengths of a ragged decode row (inputs.kv_lens_tensor), None for other rows; see
    the module docstring for what each family does with them.

    Generation 1 calls kernels.attention(fused=...) as the first studies recorded it (inputs
    checked on every call). Generations 2 and 3 time what a serving engine runs: a plan made once
    per batch shape (kernels.plan / kernels.plan_decode_varlen: checks, split plan, scratch,
    compiled launchers) and its run per call; a call whose tensors differ from the plan's
    (another shape or layout) makes a new plan."""
    if is_native(cand):
        return _native_fn(str(cand.backend), cos, sin, rotate_k, kv_lens)
    from kernels import Tile, attention

    tile = Tile(int(cand.block_m), int(cand.block_n), int(cand.num_warps), int(cand.num_stages))
    rope, generation = placement(cand)
    if generation == VARLEN_GENERATION and kv_lens is not None:
        if rotate_k:
            raise ValueError(
                f"{cand.candidate}: the varlen decode (generation {VARLEN_GENERATION}) reads a cache "
                "already rotated (rotate_k=False): kv_lens come with decode rows only"
            )
        return _varlen_fn(tile, cos, sin, kv_lens)
    if generation == VARLEN_GENERATION:  # a row without lengths: generation 2's plan of the tile
        return _planned_fn(tile, rope, cos, sin, rotate_k)
    if generation == 1:
        fused = rope == "fused"

        def fn(q, k, v, out=None):
            return attention(q, k, v, cos, sin, tile=tile, fused=fused, rotate_k=rotate_k, out=out)

        return fn
    return _planned_fn(tile, rope, cos, sin, rotate_k)


def _varlen_fn(tile, cos, sin, kv_lens) -> Callable:
    from kernels import plan_decode_varlen

    current: list = [None]  # the plan of the last layout seen

    def fn(q, k, v, out=None):
        p = current[0]
        if p is not None:
            try:
                return p.run(q, k, v, cos, sin, kv_lens, out=out)
            except ValueError:
                pass  # other tensors than the plan's: plan again (which names what is invalid)
        current[0] = p = plan_decode_varlen(q, k, v, cos, sin, kv_lens, tile=tile, out=out)
        return p.run(q, k, v, cos, sin, kv_lens, out=out)

    return fn


def _planned_fn(tile, rope: str, cos, sin, rotate_k: bool) -> Callable:
    from kernels import plan

    current: list = [None]  # the plan of the last shape seen

    def fn(q, k, v, out=None):
        p = current[0]
        if p is not None:
            try:
                return p.run(q, k, v, cos, sin, out=out)
            except ValueError:
                pass  # other tensors than the plan's: plan again (plan() names what is invalid)
        current[0] = p = plan(q, k, v, cos, sin, tile=tile, rope=rope, rotate_k=rotate_k, out=out)
        return p.run(q, k, v, cos, sin, out=out)

    return fn


def has_plan(cand: Any) -> bool:
    """Whether the candidate builds a plan per batch shape (build_plan returns one)."""
    if is_native(cand):
        return str(cand.backend) in FLASHINFER_BACKENDS
    return placement(cand)[1] != 1


def build_plan(cand: Any, cos, sin, rotate_k: bool, q, k, v, out=None, kv_lens=None):
    """The plan a generation-2 or -3 candidate runs for these tensors, a FlashInfer candidate's
    planned wrapper (None for generation 1 and the other natives, which have no plan): what the
    lifecycle times as the plan's build cost.
    A generation-3 (varlen) candidate builds the varlen plan for a row with kv_lens, generation 2's
    plan of its tile and placement otherwise."""
    if str(cand.backend) in FLASHINFER_BACKENDS:  # FlashInfer's plan(): its per-batch host step
        from headroom.families.attention.flashinfer import plan_once

        return plan_once(str(cand.backend), q, k, kv_lens)
    if is_native(cand):
        return None
    rope, generation = placement(cand)
    if generation == 1:
        return None
    from kernels import Tile, plan, plan_decode_varlen

    tile = Tile(int(cand.block_m), int(cand.block_n), int(cand.num_warps), int(cand.num_stages))
    if generation == VARLEN_GENERATION and kv_lens is not None:
        return plan_decode_varlen(q, k, v, cos, sin, kv_lens, tile=tile, out=out)
    return plan(q, k, v, cos, sin, tile=tile, rope=rope, rotate_k=rotate_k, out=out)


def tables(max_pos: int, head_dim: int, dtype: str, base: float, device: str):
    """cos/sin tables for every stage, in the data's dtype as serving stacks keep them (HF, vLLM
    cast their caches to the model dtype). The choice matters: the fused kernel loads table tiles
    beside q/k tiles, and float32 tables made fused prefill 8-55% slower on the H200 (BENCHMARKS.md)."""
    import torch

    from kernels import rope_tables

    return rope_tables(
        int(max_pos), int(head_dim), base=float(base), dtype=getattr(torch, str(dtype)), device=device
    )
