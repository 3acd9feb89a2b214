"""Fused Mixture-of-Experts grouped GEMM: one projection of every routed token through its expert,
one Triton launch, the layout and tuning keys of the serving stacks' fused-MoE config tables.

What it computes (one projection, e.g. the experts' gate-up or down matrix):
    out[slot, :] = A[slot // top_k, :] @ W[topk_ids.flat[slot]].T   (* topk_weights.flat[slot])
    a:           [M, K]       the tokens' hidden states
    w:           [E, N, K]    every expert's weight, rows = output features (nn.Linear layout)
    topk_ids:    [M, top_k]   integer expert index of each routed slot; slot = token * top_k + j
    topk_weights [M, top_k]   optional routing weights, multiplied in when given
    out:         [M * top_k, N], a's dtype, slot-major (the caller reduces over top_k)

How: align() groups the slots by expert and pads each expert's group to a multiple of
BLOCK_SIZE_M with the sentinel M * top_k, so every block of BLOCK_SIZE_M sorted entries belongs
to one expert. The kernel runs one program per (entry block, BLOCK_SIZE_N columns): it gathers
its rows of A, multiplies them by its expert's W tile over K in float32, and scatters the rows
back to their slots; sentinel rows are masked, never read or written.

Config (a dict, one entry of a vLLM/SGLang fused-MoE JSON table, keyed there by M), exactly:
    BLOCK_SIZE_M, BLOCK_SIZE_N, BLOCK_SIZE_K  tile sizes (powers of two >= 16, tl.dot's minimum)
    GROUP_SIZE_M   entry blocks per group of the swizzled program order (the Triton matmul
                   tutorial's L2 reuse: a group of M-blocks sweeps N before the next group)
    num_warps, num_stages   Triton launch options (ignored by the interpreter)

The alignment runs inside every fused_moe call, never cached: routing changes every forward, so
a server pays for it on every call, and a dispatch study that timed the kernel alone would
flatter small-M configs whose cost is mostly that host-side work. align() is five launches without
a host-device sync (its buffers are sized by an upper bound). fused_moe's check that expert ids
are in range reads their min and max back, one sync per call, which a server does not pay and a
CUDA Graph capture cannot hold: a caller that checked its routing once passes check_ids=False.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from . import mode

CONFIG_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
_BLOCK_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K")
_ID_DTYPES = (torch.int32, torch.int64)


def align(
    topk_ids: torch.Tensor, num_experts: int, block_m: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Slots grouped by expert, each group padded to a multiple of block_m.

    topk_ids: [M, top_k] integers in [0, num_experts) (not checked here: fused_moe checks them).
    Returns, on topk_ids' device:
      sorted_ids       int32 [capacity]: expert 0's slots, padded with the sentinel M * top_k to a
                       multiple of block_m, then expert 1's, ...; the sentinel also fills
                       everything past padded_tokens. Within an expert the slots' order is the
                       order their atomic increments landed: slot order on the interpreter, any
                       order on a GPU (a row's output does not depend on its place in its tile)
      expert_of_block  int32 [capacity // block_m]: the expert of each block_m entries, -1 for
                       blocks past padded_tokens
      padded_tokens    int32 [1]: the padded length, a tensor so that nothing syncs with the host
    capacity bounds padded_tokens for any routing: each of at most min(E, M * top_k) non-empty
    experts adds under block_m padding; it is rounded up to a multiple of block_m.

    Five launches (two fills and three small Triton kernels: count, offsets, scatter), as a
    server's alignment is one or two kernels; a chain of torch ops here was ~30 launches, most
    of a small-M call's time.
    """
    flat = topk_ids.reshape(-1)
    num_slots, device = flat.numel(), flat.device
    capacity = triton.cdiv(num_slots + min(num_experts, num_slots) * (block_m - 1), block_m) * block_m
    num_blocks = capacity // block_m
    counts = torch.zeros(num_experts + 1, dtype=torch.int32, device=device)  # [E]: padded_tokens
    rank = torch.empty(num_slots, dtype=torch.int32, device=device)
    start = torch.empty(num_experts, dtype=torch.int32, device=device)
    sorted_ids = torch.full((capacity,), num_slots, dtype=torch.int32, device=device)
    expert_of_block = torch.empty(num_blocks, dtype=torch.int32, device=device)
    grid = (triton.cdiv(num_slots, _SLOT_BLOCK),)
    _count_kernel[grid](flat, counts, rank, num_slots, BLOCK=_SLOT_BLOCK)
    _offsets_kernel[(1,)](counts, start, expert_of_block, num_experts, num_blocks, block_m,
                          E_POW2=max(16, triton.next_power_of_2(num_experts)), BLOCK=_BLOCK_BLOCK)  # fmt: skip
    _scatter_kernel[grid](flat, rank, start, sorted_ids, num_slots, BLOCK=_SLOT_BLOCK)
    return sorted_ids, expert_of_block, counts[num_experts:]


_SLOT_BLOCK = 1024  # slots per program of the count and scatter kernels
_BLOCK_BLOCK = 64  # entry blocks per step of the offsets kernel's expert search


@triton.jit(do_not_specialize=["num_slots"])
def _count_kernel(ids_ptr, counts_ptr, rank_ptr, num_slots, BLOCK: tl.constexpr):
    """counts[e] += 1 per slot routed to e; rank[slot] = the count before its increment."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < num_slots
    expert = tl.load(ids_ptr + offs, mask=ok, other=0)
    rank = tl.atomic_add(counts_ptr + expert, 1, mask=ok)
    tl.store(rank_ptr + offs, rank, mask=ok)


@triton.jit(do_not_specialize=["num_blocks"])
def _offsets_kernel(counts_ptr, start_ptr, expert_of_block_ptr, num_experts, num_blocks, block_m,
                    E_POW2: tl.constexpr, BLOCK: tl.constexpr):  # fmt: skip
    """One program: each expert's padded start, the padded total (into counts[num_experts]) and
    each entry block's expert (the number of experts whose padded group ends at or before it)."""
    e = tl.arange(0, E_POW2)
    count = tl.load(counts_ptr + e, mask=e < num_experts, other=0)
    padded = (count + block_m - 1) // block_m * block_m
    end = tl.cumsum(padded, 0)
    tl.store(start_ptr + e, end - padded, mask=e < num_experts)
    tl.store(counts_ptr + num_experts, tl.sum(padded, 0))
    for b0 in range(0, num_blocks, BLOCK):
        b = b0 + tl.arange(0, BLOCK)
        before = tl.sum((end[None, :] <= (b * block_m)[:, None]).to(tl.int32), 1)
        tl.store(expert_of_block_ptr + b, tl.where(before < num_experts, before, -1), mask=b < num_blocks)


@triton.jit(do_not_specialize=["num_slots"])
def _scatter_kernel(ids_ptr, rank_ptr, start_ptr, sorted_ptr, num_slots, BLOCK: tl.constexpr):
    """sorted_ids[start[e] + rank[slot]] = slot."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ok = offs < num_slots
    expert = tl.load(ids_ptr + offs, mask=ok, other=0)
    dest = tl.load(start_ptr + expert, mask=ok, other=0) + tl.load(rank_ptr + offs, mask=ok, other=0)
    tl.store(sorted_ptr + dest, offs.to(tl.int32), mask=ok)


# num_slots and num_pid_m change with every token count: left unspecialized, each config compiles
# once per layer rather than once per divisibility class of M (the tuner compiles ~190 configs)
@triton.jit(do_not_specialize=["num_slots", "num_pid_m"])
def moe_kernel(
    a_ptr,
    w_ptr,
    out_ptr,
    weights_ptr,  # [M * top_k] routing weights; read only when MUL_ROUTED_WEIGHT
    sorted_ids_ptr,
    expert_of_block_ptr,
    N,
    K,
    num_slots,
    top_k,
    num_pid_m,
    stride_am,
    stride_ak,
    stride_we,
    stride_wn,
    stride_wk,
    stride_om,
    stride_on,
    MUL_ROUTED_WEIGHT: tl.constexpr,
    BLOCK_SIZE_M: tl.constexpr,
    BLOCK_SIZE_N: tl.constexpr,
    BLOCK_SIZE_K: tl.constexpr,
    GROUP_SIZE_M: tl.constexpr,
):
    """out[slot] = a[slot // top_k] @ w[e].T for the BLOCK_SIZE_M sorted entries of one expert e
    and BLOCK_SIZE_N output columns; grid (num_pid_m * cdiv(N, BLOCK_SIZE_N),)."""
    # Swizzle: consecutive programs walk GROUP_SIZE_M entry blocks down one column of N blocks,
    # so the expert tiles of W they share stay in L2 (Triton matmul tutorial ordering).
    pid = tl.program_id(0)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    expert = tl.load(expert_of_block_ptr + pid_m)
    if expert < 0:  # past the padded end: align sized the grid for the worst routing
        return
    offs_m = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    slots = tl.load(sorted_ids_ptr + offs_m)
    row_ok = slots < num_slots  # False on the sentinel padding
    tokens = slots // top_k
    offs_n = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    col_ok = offs_n < N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + tokens.to(tl.int64)[:, None] * stride_am + offs_k[None, :] * stride_ak
    # W[e] is [N, K]; index it as a [K, N] tile so tl.dot gets A @ W[e].T without a transpose.
    # int64: E * N * K of a large MoE layer overflows int32 offsets.
    w_ptrs = (
        w_ptr + expert.to(tl.int64) * stride_we + offs_n[None, :] * stride_wn + offs_k[:, None] * stride_wk
    )
    acc = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_SIZE_K):
        k_ok = offs_k < K - k0
        a = tl.load(a_ptrs, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        w = tl.load(w_ptrs, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc = tl.dot(a, w, acc)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        w_ptrs += BLOCK_SIZE_K * stride_wk
    if MUL_ROUTED_WEIGHT:
        routed = tl.load(weights_ptr + slots, mask=row_ok, other=0.0)
        acc = acc * routed.to(tl.float32)[:, None]
    out_ptrs = out_ptr + slots.to(tl.int64)[:, None] * stride_om + offs_n[None, :] * stride_on
    tl.store(out_ptrs, acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


def fused_moe(
    a: torch.Tensor,
    w: torch.Tensor,
    topk_ids: torch.Tensor,
    topk_weights: torch.Tensor | None = None,
    *,
    config: dict,
    out: torch.Tensor | None = None,
    check_ids: bool = True,
) -> torch.Tensor:
    """out[M * top_k, N] = each routed slot's token row of a times its expert's w, (times its
    routing weight when topk_weights is given); align and one kernel launch, every call.

    a [M, K], w [E, N, K] of one dtype (mode's: float16/bfloat16 compiled, float16/float32
    interpreted), any strides; topk_ids [M, top_k] int32/int64 in [0, E); topk_weights None or
    [M, top_k] float32 or a's dtype; config: CONFIG_KEYS; out: optional [M * top_k, N] buffer of
    a's dtype and device (the tests poison it), a new torch.empty one otherwise; check_ids: False
    skips the range check of topk_ids (module docstring: a timed or captured call whose routing
    the caller checked once). ValueError (one line) on any bad input."""
    num_tokens, hidden, num_experts, n_out, top_k = _check_inputs(a, w, topk_ids, topk_weights, config)
    if check_ids:
        _check_ids(topk_ids, num_experts)
    num_slots = num_tokens * top_k
    if out is None:
        out = torch.empty((num_slots, n_out), dtype=a.dtype, device=a.device)
    else:
        mode.check_out(out, (num_slots, n_out), a.dtype, a.device)
    sorted_ids, expert_of_block, _ = align(topk_ids, num_experts, config["BLOCK_SIZE_M"])
    num_pid_m = expert_of_block.numel()
    grid = (num_pid_m * triton.cdiv(n_out, config["BLOCK_SIZE_N"]),)
    weights = topk_weights.reshape(-1) if topk_weights is not None else a  # a: never read
    moe_kernel[grid](
        a,
        w,
        out,
        weights,
        sorted_ids,
        expert_of_block,
        n_out,
        hidden,
        num_slots,
        top_k,
        num_pid_m,
        *a.stride(),
        *w.stride(),
        *out.stride(),
        MUL_ROUTED_WEIGHT=topk_weights is not None,
        **config,
    )
    return out


def compile_moe(dtype: torch.dtype, hidden: int, n_out: int, top_k: int, config: dict) -> None:
    """Compile moe_kernel for a [*, hidden] x [E, n_out, hidden] projection of ``dtype`` (contiguous,
    no routing weights) under ``config`` into Triton's cache without launching it: what fused_moe
    then finds compiled (a tuner warms its configs in parallel processes with it). Raises Triton's
    OutOfResources for a config the GPU cannot hold."""
    check_config(config)
    k, n = hidden, n_out
    # pointers as dtypes (JITFunction.warmup), the ints fused_moe passes; num_slots and num_pid_m
    # are not specialized, so any value compiles the kernel every M runs
    moe_kernel.warmup(dtype, dtype, dtype, dtype, torch.int32, torch.int32, n, k, top_k, top_k, 1,
                      k, 1, n * k, k, 1, n, 1, MUL_ROUTED_WEIGHT=False, grid=(1,), **config)  # fmt: skip


def reference_moe(
    a: torch.Tensor, w: torch.Tensor, topk_ids: torch.Tensor, topk_weights: torch.Tensor | None = None
) -> torch.Tensor:
    """What fused_moe computes, in float64 on a's device: [M * top_k, N] float64, expert by
    expert with index_select and matmul."""
    flat = topk_ids.reshape(-1)
    tokens = torch.arange(flat.numel(), device=a.device) // topk_ids.shape[1]
    a64, w64 = a.to(torch.float64), w.to(torch.float64)
    ref = torch.zeros((flat.numel(), w.shape[1]), dtype=torch.float64, device=a.device)
    for expert in range(w.shape[0]):
        slots = (flat == expert).nonzero().squeeze(1)
        ref[slots] = a64.index_select(0, tokens[slots]) @ w64[expert].T
    if topk_weights is not None:
        ref *= topk_weights.reshape(-1, 1).to(torch.float64)
    return ref


def check_config(config) -> None:
    """ValueError unless config has exactly CONFIG_KEYS with valid values."""
    if not isinstance(config, dict):
        raise ValueError(f"config must be a dict with keys {CONFIG_KEYS}, got {type(config).__name__}")
    missing = [k for k in CONFIG_KEYS if k not in config]
    unknown = [k for k in config if k not in CONFIG_KEYS]
    if missing or unknown:
        raise ValueError(f"config keys must be exactly {CONFIG_KEYS}: missing {missing}, unknown {unknown}")
    for key in CONFIG_KEYS:
        value = config[key]
        if type(value) is not int or value < 1:
            raise ValueError(f"config {key} must be a positive int, got {value!r}")
        if key in _BLOCK_KEYS and (value < 16 or value & (value - 1)):
            raise ValueError(f"config {key} must be a power of two >= 16 (tl.dot's minimum), got {value}")
        if key == "num_warps" and value & (value - 1):
            raise ValueError(f"config num_warps must be a power of two, got {value}")


def _check_inputs(a, w, topk_ids, topk_weights, config) -> tuple[int, int, int, int, int]:
    """(M, K, E, N, top_k) after ValueError checks of fused_moe's arguments."""
    for name, t, dims in (("a", a, "[M, K]"), ("w", w, "[E, N, K]"), ("topk_ids", topk_ids, "[M, top_k]")):
        if not isinstance(t, torch.Tensor) or t.dim() != len(dims.split(",")):
            raise ValueError(f"{name} must be a {dims} tensor, got {_describe(t)}")
    mode.check_dtype("a", a)
    mode.check_device("a", a)
    if w.dtype != a.dtype:
        raise ValueError(f"w dtype {w.dtype} differs from a dtype {a.dtype}")
    num_tokens, hidden = a.shape
    num_experts, n_out, w_hidden = w.shape
    if w_hidden != hidden:
        raise ValueError(f"w [E, N, K] has K={w_hidden} but a [M, K] has K={hidden}")
    if num_tokens < 1 or hidden < 1 or num_experts < 1 or n_out < 1:
        raise ValueError(f"a {tuple(a.shape)} and w {tuple(w.shape)} must have no empty dimension")
    if topk_ids.dtype not in _ID_DTYPES:
        raise ValueError(f"topk_ids dtype must be int32 or int64, got {topk_ids.dtype}")
    if topk_ids.shape[0] != num_tokens or topk_ids.shape[1] < 1:
        raise ValueError(f"topk_ids must be [M={num_tokens}, top_k >= 1], got {tuple(topk_ids.shape)}")
    for name, t in (("w", w), ("topk_ids", topk_ids)):
        if t.device != a.device:
            raise ValueError(f"{name} is on {t.device} but a is on {a.device}")
    _check_weights(topk_weights, topk_ids, a)
    check_config(config)
    return num_tokens, hidden, num_experts, n_out, topk_ids.shape[1]


def _check_ids(topk_ids: torch.Tensor, num_experts: int) -> None:
    low, high = torch.stack(torch.aminmax(topk_ids)).tolist()  # the call's one host-device sync
    if low < 0 or high >= num_experts:
        raise ValueError(f"topk_ids must lie in [0, {num_experts}), got min {low}, max {high}")


def _check_weights(topk_weights, topk_ids, a) -> None:
    if topk_weights is None:
        return
    if not isinstance(topk_weights, torch.Tensor) or topk_weights.shape != topk_ids.shape:
        raise ValueError(
            f"topk_weights must match topk_ids {tuple(topk_ids.shape)}, got {_describe(topk_weights)}"
        )
    if topk_weights.dtype not in (torch.float32, a.dtype):
        raise ValueError(f"topk_weights dtype must be float32 or a's {a.dtype}, got {topk_weights.dtype}")
    if topk_weights.device != a.device:
        raise ValueError(f"topk_weights is on {topk_weights.device} but a is on {a.device}")


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"shape {tuple(x.shape)}"
    return type(x).__name__
