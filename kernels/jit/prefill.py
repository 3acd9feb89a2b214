"""Triton code of the generation-2 prefill kernel (launcher: kernels/prefill.py).

Generation 1's prefill (kernels/gen1/_attention.py) stays as it was recorded; this kernel adds, as
constexpr switches measured one by one in BENCHMARKS.md:
- ROTATE_Q without ROTATE_K ("q_fused" RoPE: keys were rotated once, as a KV-cache write does):
  q is rotated at load as one full-width (M, D) tile (_load_rotated_full), so the key loop is
  the same single full-width dot as attention alone -- the rotation costs once per program,
  not once per key block;
- GROUP_ROWS > 1 (GQA packing): one program holds BLOCK_M // GROUP_ROWS query positions of each
  of the group's query heads (rows head-major), so each K/V tile it loads serves every head of
  the group;
- TMA: K and V tiles come through host-built tensor descriptors (Hopper's bulk copy engine)
  instead of pointer loads;
- WARP_SPECIALIZE: the key loops ask Triton for producer/consumer warp specialisation.
Numerics are generation 1's: float32 scores, base-2 online softmax (online_softmax_step), RoPE
in float32 rounded once (load_halves).
"""

import triton
import triton.language as tl

from .rope import load_kt_halves, load_q_halves
from .softmax import online_softmax_step


@triton.jit
def _key_loop(
    acc,
    l_i,
    m_i,
    q1,
    q2,
    q_pos,
    k_base,
    v_base,
    k_desc,
    v_desc,
    b,
    hkv,
    stride_kn,
    stride_kd,
    stride_vn,
    stride_vd,
    tables,
    lo,
    hi,
    Skv,
    qk_scale,
    HALF: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROTATE_K: tl.constexpr,
    TMA: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
    MASKED: tl.constexpr,
):
    """Keys [lo, hi) in BLOCK_N steps. MASKED=False: every row of the tile sees every key (no causal
    or bounds mask, so the loads are unpredicated); MASKED=True: the diagonal.

    ROTATE_K: q1, q2 are (M, D/2) halves and K^T comes as two rotated (D/2, N) halves (pointer
    loads: the rotation needs the halves in registers anyway). Otherwise q1 is the (M, D) tile
    and K is one (N, D) tile, through the descriptor when TMA (rows past Skv read as zeros).
    """
    offs_half = tl.arange(0, HALF)
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=WARP_SPECIALIZE):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_bounds = offs_n < Skv
        if ROTATE_K:
            k1, k2 = load_kt_halves(  # (D/2, BLOCK_N) each
                k_base, offs_n, in_bounds, offs_half, stride_kn, stride_kd, tables, HALF, True, MASKED
            )
            qk = tl.dot(q1, k1)
            qk = tl.dot(q2, k2, qk)  # (BLOCK_M, BLOCK_N)
        elif TMA:
            k = k_desc.load([b, hkv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)  # (BLOCK_N, D)
            qk = tl.dot(q1, tl.trans(k))
        else:
            k_ptrs = k_base + offs_n[None, :] * stride_kn + offs_d[:, None] * stride_kd
            if MASKED:
                kt = tl.load(k_ptrs, mask=in_bounds[None, :], other=0.0)  # (D, BLOCK_N)
            else:
                kt = tl.load(k_ptrs)  # (D, BLOCK_N)
            qk = tl.dot(q1, kt)
        if MASKED:
            visible = (offs_n[None, :] <= q_pos[:, None]) & in_bounds[None, :]
            qk = tl.where(visible, qk, float("-inf"))
        if TMA:
            v = v_desc.load([b, hkv, start_n, 0]).reshape(BLOCK_N, HEAD_DIM)  # (BLOCK_N, D)
        else:
            v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
            if MASKED:
                v = tl.load(v_ptrs, mask=in_bounds[:, None], other=0.0)  # (BLOCK_N, D)
            else:
                v = tl.load(v_ptrs)  # (BLOCK_N, D)
        acc, l_i, m_i = online_softmax_step(acc, l_i, m_i, qk, v, qk_scale, False)
    return acc, l_i, m_i


@triton.jit
def _load_rotated_full(rows, offs_d, stride_d, pos, mask, tables, HALF: tl.constexpr):
    """(M, D) rows rotated at `pos` as one full-width tile: x and its half-swapped partner are
    two plain loads, so the rotated tile keeps a loaded tile's layout on its way into the dot.
    (The first H200 run joined two rotated halves with tl.join/permute/reshape instead: correct,
    but 1.14-1.21x attention alone, against 1.03-1.08x for the unfused placement.)
    Same float32 arithmetic as load_halves: [x1 c - x2 s, x2 c + x1 s], rounded once."""
    cos_ptr, sin_ptr, stride_tab = tables
    first = offs_d < HALF
    partner = tl.where(first, offs_d + HALF, offs_d - HALF)
    freq = tl.where(first, offs_d, offs_d - HALF)
    x = tl.load(rows + offs_d[None, :] * stride_d, mask=mask, other=0.0)  # (M, D)
    xp = tl.load(rows + partner[None, :] * stride_d, mask=mask, other=0.0).to(tl.float32)
    c = tl.load(cos_ptr + pos[:, None] * stride_tab + freq[None, :], mask=mask, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + pos[:, None] * stride_tab + freq[None, :], mask=mask, other=0.0).to(tl.float32)
    return (x.to(tl.float32) * c + tl.where(first[None, :], -xp, xp) * s).to(x.dtype)


@triton.jit
def prefill2_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    cos_ptr,
    sin_ptr,
    k_desc,
    v_desc,
    q_strides,
    k_strides,
    v_strides,
    o_strides,
    stride_tab,
    Hq,
    Hkv,
    group,
    Sq,
    Skv,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    GROUP_ROWS: tl.constexpr,
    ROTATE_Q: tl.constexpr,
    ROTATE_K: tl.constexpr,
    TMA: tl.constexpr,
    WARP_SPECIALIZE: tl.constexpr,
):
    """GROUP_ROWS == 1: grid (B * Hq, cdiv(Sq, BLOCK_M)), one program = BLOCK_M positions of one
    query head. GROUP_ROWS > 1 (a power of two >= group): grid (B * Hkv, cdiv(Sq, BLOCK_M //
    GROUP_ROWS)), row r = head hkv * group + r // (BLOCK_M // GROUP_ROWS); rows of heads >= group
    are computed and never stored. Query blocks run last-first (they see the most keys)."""
    tl.static_assert(HEAD_DIM % 32 == 0, "head_dim halves must be multiples of 16 for tl.dot")
    tl.static_assert(BLOCK_M % GROUP_ROWS == 0, "GROUP_ROWS must divide BLOCK_M")
    HALF: tl.constexpr = HEAD_DIM // 2
    POSITIONS: tl.constexpr = BLOCK_M // GROUP_ROWS  # query positions per program
    stride_qb, stride_qh, stride_qs, stride_qd = q_strides  # of q (B, Hq, Sq, D)
    stride_kb, stride_kh, stride_ks, stride_kd = k_strides  # of k (B, Hkv, Skv, D)
    stride_vb, stride_vh, stride_vs, stride_vd = v_strides  # of v (B, Hkv, Skv, D)
    stride_ob, stride_oh, stride_os, stride_od = o_strides  # of out (B, Hq, Sq, D)
    pid_bh = tl.program_id(0)
    pid_m = tl.num_programs(1) - 1 - tl.program_id(1)
    offs_r = tl.arange(0, BLOCK_M)  # (BLOCK_M,) rows of the program
    if GROUP_ROWS > 1:
        b = pid_bh // Hkv
        hkv = pid_bh % Hkv
        head_in_group = offs_r // POSITIONS
        hq = hkv * group + head_in_group  # (BLOCK_M,)
        offs_m = pid_m * POSITIONS + offs_r % POSITIONS
        row_ok = (offs_m < Sq) & (head_in_group < group)
    else:
        b = pid_bh // Hq
        hq = pid_bh % Hq
        hkv = hq // group
        offs_m = pid_m * BLOCK_M + offs_r
        row_ok = offs_m < Sq
    b64 = b.to(tl.int64)  # pointer offsets in 64 bits: b * stride_kb passes 2**31 on long caches
    offset = Skv - Sq  # bottom-right causal alignment
    q_pos = offs_m + offset
    q_rows = (q_ptr + b64 * stride_qb + hq * stride_qh + offs_m * stride_qs)[:, None]
    offs_half = tl.arange(0, HALF)
    offs_d = tl.arange(0, HEAD_DIM)
    tables = (cos_ptr, sin_ptr, stride_tab)  # the RoPE tables (max_pos, D/2) and their row stride
    if ROTATE_K:
        q1, q2 = load_q_halves(
            q_rows, offs_half, stride_qd, q_pos, row_ok, tables, HALF, ROTATE_Q
        )  # (M, D/2)
    elif ROTATE_Q:
        q1 = _load_rotated_full(q_rows, offs_d, stride_qd, q_pos, row_ok[:, None], tables, HALF)  # (M, D)
        q2 = q1
    else:
        q1 = tl.load(q_rows + offs_d[None, :] * stride_qd, mask=row_ok[:, None], other=0.0)  # (BLOCK_M, D)
        q2 = q1
    k_base = k_ptr + b64 * stride_kb + hkv * stride_kh
    v_base = v_ptr + b64 * stride_vb + hkv * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)  # (BLOCK_M, D)
    # [0, full_hi): visible to every row; [full_hi, causal_hi): the diagonal, masked
    first_pos = pid_m * POSITIONS + offset
    full_hi = (first_pos + 1) // BLOCK_N * BLOCK_N
    causal_hi = tl.minimum(Skv, first_pos + POSITIONS)
    for masked in tl.static_range(2):  # unrolled: [0, full_hi) unmasked, then the diagonal
        acc, l_i, m_i = _key_loop(
            acc=acc,
            l_i=l_i,
            m_i=m_i,
            q1=q1,
            q2=q2,
            q_pos=q_pos,
            k_base=k_base,
            v_base=v_base,
            k_desc=k_desc,
            v_desc=v_desc,
            b=b,
            hkv=hkv,
            stride_kn=stride_ks,
            stride_kd=stride_kd,
            stride_vn=stride_vs,
            stride_vd=stride_vd,
            tables=tables,
            lo=full_hi if masked else 0,
            hi=causal_hi if masked else full_hi,
            Skv=Skv,
            qk_scale=qk_scale,
            HALF=HALF,
            HEAD_DIM=HEAD_DIM,
            BLOCK_N=BLOCK_N,
            ROTATE_K=ROTATE_K,
            TMA=TMA,
            WARP_SPECIALIZE=WARP_SPECIALIZE,
            MASKED=masked == 1,
        )
    out = acc / l_i[:, None]  # every row saw key 0, so l_i > 0
    o_rows = (out_ptr + b64 * stride_ob + hq * stride_oh + offs_m * stride_os)[:, None]
    tl.store(o_rows + offs_d[None, :] * stride_od, out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])
