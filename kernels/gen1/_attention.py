"""Triton code for causal GQA attention: the prefill kernel, the split-KV decode kernel and the
reduction that merges decode splits. Host launchers live in attention.py.

Numerics shared by every kernel here:
- scores are accumulated in float32; softmax runs in base 2 (exp2) with the 1/sqrt(D) scale
  folded into LOG2E, which saves a multiply per score and maps to the hardware's ex2;
- when a kernel rotates, q and k enter tl.dot as two halves of head_dim / 2 (two chained dots),
  because rotate-half RoPE pairs element d with d + D/2: loading the halves lets the fused
  kernels rotate in registers with no gather. The un-rotated prefill kernel (unfused candidates'
  second launch) uses one full-width dot.
"""

import triton
import triton.language as tl

from ._rope import load_halves


@triton.jit
def _online_softmax_step(acc, l_i, m_i, qk, v, qk_scale, GUARD_EMPTY: tl.constexpr):
    """One key block of the FA2 online softmax. qk: (M, N) raw scores, masked ones -inf.

    GUARD_EMPTY: a row may have seen no valid key yet (decode splits); keep it at
    m = -inf, l = 0, acc = 0 instead of producing exp2(-inf - -inf) = NaN.
    """
    m_ij = tl.maximum(m_i, tl.max(qk, 1) * qk_scale)
    if GUARD_EMPTY:
        m_ref = tl.where(m_ij == float("-inf"), 0.0, m_ij)
    else:
        m_ref = m_ij
    p = tl.math.exp2(qk * qk_scale - m_ref[:, None])
    alpha = tl.math.exp2(m_i - m_ref)
    l_i = l_i * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_ij


@triton.jit
def _prefill_key_loop(
    acc,
    l_i,
    m_i,
    q1,
    q2,
    q_pos,
    k_base,
    v_base,
    stride_kn,
    stride_kd,
    stride_vn,
    stride_vd,
    cos_ptr,
    sin_ptr,
    stride_tab,
    lo,
    hi,
    Skv,
    qk_scale,
    HALF: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT_D: tl.constexpr,
    ROTATE_K: tl.constexpr,
    MASKED: tl.constexpr,
):
    """Keys [lo, hi) in BLOCK_N steps. MASKED=False: every row of the tile sees every key
    (no causal or bounds mask, so the loads are unpredicated); MASKED=True: the diagonal.

    SPLIT_D=False (nothing rotates in this kernel): q1 is the whole (M, D) q tile and K^T is one
    (D, N) tile, one dot. SPLIT_D=True: q1, q2 are the (M, D/2) halves and K^T comes as two
    (D/2, N) halves, rotated in registers when ROTATE_K.

    ROTATE_K rotates each K^T half-tile with cos/sin tiles of the key positions, read from the
    tables like the standalone RoPE kernel does, so fused and unfused candidates round the same
    values the same way. (Tried on the H200 and dropped: advancing the rotation by angle
    addition from registers instead of reading table tiles -- no faster with 8 warps, and 2.4x
    slower for 4-warp, block_n=128 tiles, whose registers then spill.)
    """
    offs_half = tl.arange(0, HALF)
    offs_d = tl.arange(0, HEAD_DIM)
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_bounds = offs_n < Skv
        k_cols = k_base + offs_n[None, :] * stride_kn
        if SPLIT_D:
            # K^T halves (HALF, BLOCK_N), rotated at key positions when ROTATE_K
            k1, k2 = load_halves(
                k_cols,
                offs_half,
                stride_kd,
                offs_n,
                in_bounds[None, :],
                cos_ptr,
                sin_ptr,
                stride_tab,
                HALF,
                ROTATE_K,
                True,
                MASKED,
            )
            qk = tl.dot(q1, k1)
            qk = tl.dot(q2, k2, qk)
        else:
            k_ptrs = k_cols + offs_d[:, None] * stride_kd
            if MASKED:
                kt = tl.load(k_ptrs, mask=in_bounds[None, :], other=0.0)
            else:
                kt = tl.load(k_ptrs)
            qk = tl.dot(q1, kt)
        v_ptrs = v_base + offs_n[:, None] * stride_vn + offs_d[None, :] * stride_vd
        if MASKED:
            visible = (offs_n[None, :] <= q_pos[:, None]) & in_bounds[None, :]
            qk = tl.where(visible, qk, float("-inf"))
            v = tl.load(v_ptrs, mask=in_bounds[:, None], other=0.0)
        else:
            v = tl.load(v_ptrs)
        acc, l_i, m_i = _online_softmax_step(acc, l_i, m_i, qk, v, qk_scale, False)
    return acc, l_i, m_i


@triton.jit
def prefill_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    cos_ptr,
    sin_ptr,
    stride_qb,
    stride_qh,
    stride_qs,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vs,
    stride_vd,
    stride_ob,
    stride_oh,
    stride_os,
    stride_od,
    stride_tab,
    Hq,
    group,
    Sq,
    Skv,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROTATE_Q: tl.constexpr,
    ROTATE_K: tl.constexpr,
):
    """Grid (B * Hq, cdiv(Sq, BLOCK_M)). One program: BLOCK_M query rows of one query head.

    Heads vary fastest so the programs reading one KV head run together (L2 reuse under GQA);
    query blocks run last-first because the last ones see the most keys (less tail imbalance).
    """
    tl.static_assert(HEAD_DIM % 32 == 0, "head_dim halves must be multiples of 16 for tl.dot")
    HALF: tl.constexpr = HEAD_DIM // 2
    # Without rotation the kernel is a plain FA2 loop with one K = D dot per block.
    SPLIT_D: tl.constexpr = ROTATE_Q or ROTATE_K
    pid_bh = tl.program_id(0)
    pid_m = tl.num_programs(1) - 1 - tl.program_id(1)
    b = pid_bh // Hq
    hq = pid_bh % Hq
    hkv = hq // group
    offset = Skv - Sq  # bottom-right causal alignment: query i sits at absolute position i + offset

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    q_pos = offs_m + offset
    q_rows = q_ptr + b * stride_qb + hq * stride_qh + offs_m[:, None] * stride_qs
    row_ok = (offs_m < Sq)[:, None]
    offs_half = tl.arange(0, HALF)
    if SPLIT_D:
        q1, q2 = load_halves(
            q_rows,
            offs_half,
            stride_qd,
            q_pos,
            row_ok,
            cos_ptr,
            sin_ptr,
            stride_tab,
            HALF,
            ROTATE_Q,
            False,
            True,
        )
    else:
        q1 = tl.load(q_rows + tl.arange(0, HEAD_DIM)[None, :] * stride_qd, mask=row_ok, other=0.0)
        q2 = q1
    k_base = k_ptr + b * stride_kb + hkv * stride_kh
    v_base = v_ptr + b * stride_vb + hkv * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)

    # Keys [0, full_hi) are visible to every row of this tile; [full_hi, causal_hi) need the
    # causal mask; keys past causal_hi are masked for all rows and never loaded.
    first_pos = pid_m * BLOCK_M + offset
    full_hi = (first_pos + 1) // BLOCK_N * BLOCK_N
    causal_hi = tl.minimum(Skv, first_pos + BLOCK_M)
    acc, l_i, m_i = _prefill_key_loop(
        acc,
        l_i,
        m_i,
        q1,
        q2,
        q_pos,
        k_base,
        v_base,
        stride_ks,
        stride_kd,
        stride_vs,
        stride_vd,
        cos_ptr,
        sin_ptr,
        stride_tab,
        0,
        full_hi,
        Skv,
        qk_scale,
        HALF,
        HEAD_DIM,
        BLOCK_N,
        SPLIT_D,
        ROTATE_K,
        False,
    )
    acc, l_i, m_i = _prefill_key_loop(
        acc,
        l_i,
        m_i,
        q1,
        q2,
        q_pos,
        k_base,
        v_base,
        stride_ks,
        stride_kd,
        stride_vs,
        stride_vd,
        cos_ptr,
        sin_ptr,
        stride_tab,
        full_hi,
        causal_hi,
        Skv,
        qk_scale,
        HALF,
        HEAD_DIM,
        BLOCK_N,
        SPLIT_D,
        ROTATE_K,
        True,
    )
    # every row saw key 0, so l_i > 0
    out = acc / l_i[:, None]
    offs_d = tl.arange(0, HEAD_DIM)
    o_ptrs = out_ptr + b * stride_ob + hq * stride_oh + offs_m[:, None] * stride_os
    tl.store(o_ptrs + offs_d[None, :] * stride_od, out.to(out_ptr.dtype.element_ty), mask=row_ok)


@triton.jit
def decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    part_o_ptr,
    part_lse_ptr,
    cos_ptr,
    sin_ptr,
    counter_ptr,
    stride_qb,
    stride_qh,
    stride_qs,
    stride_qd,
    stride_kb,
    stride_kh,
    stride_ks,
    stride_kd,
    stride_vb,
    stride_vh,
    stride_vs,
    stride_vd,
    stride_ob,
    stride_oh,
    stride_os,
    stride_od,
    stride_tab,
    Hkv,
    group,
    Sq,
    Skv,
    split_len,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROTATE_Q: tl.constexpr,
    ROTATE_K: tl.constexpr,
    SPLIT: tl.constexpr,
    REDUCE_IN_KERNEL: tl.constexpr,
):
    """Grid (cdiv(group * Sq, BLOCK_M), B * Hkv, num_splits).

    The group * Sq query rows that share one KV head are packed along M (row r = query head
    hkv * group + r // Sq, query position r % Sq), so each K/V tile is read once for all of
    them. Split s covers keys [s * split_len, (s + 1) * split_len). SPLIT=False (one split):
    write the output. SPLIT=True: write the normalised partial output and its base-2
    log-sum-exp for reduce_kernel, or, with REDUCE_IN_KERNEL (generation 2), merge them in the
    last split program of each (batch, KV head, row block) to finish: one launch instead of two.
    counter_ptr: B * Hkv * row-block int32 arrival counters, zero before the launch and left
    zero after it (only read with REDUCE_IN_KERNEL).
    """
    tl.static_assert(HEAD_DIM % 32 == 0, "head_dim halves must be multiples of 16 for tl.dot")
    HALF: tl.constexpr = HEAD_DIM // 2
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    split = tl.program_id(2)
    b = pid_bh // Hkv
    hkv = pid_bh % Hkv
    rows = group * Sq
    offset = Skv - Sq

    offs_r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_r < rows
    hq = hkv * group + offs_r // Sq
    qi = offs_r % Sq
    q_pos = qi + offset
    q_rows = q_ptr + b * stride_qb + hq[:, None] * stride_qh + qi[:, None] * stride_qs
    offs_half = tl.arange(0, HALF)
    q1, q2 = load_halves(
        q_rows,
        offs_half,
        stride_qd,
        q_pos,
        row_ok[:, None],
        cos_ptr,
        sin_ptr,
        stride_tab,
        HALF,
        ROTATE_Q,
        False,
        True,
    )
    k_base = k_ptr + b * stride_kb + hkv * stride_kh
    v_base = v_ptr + b * stride_vb + hkv * stride_vh
    offs_d = tl.arange(0, HEAD_DIM)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    lo = split * split_len
    hi = tl.minimum(Skv, lo + split_len)
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_split = offs_n < hi
        k1, k2 = load_halves(
            k_base + offs_n[None, :] * stride_ks,
            offs_half,
            stride_kd,
            offs_n,
            in_split[None, :],
            cos_ptr,
            sin_ptr,
            stride_tab,
            HALF,
            ROTATE_K,
            True,
            True,
        )
        qk = tl.dot(q1, k1)
        qk = tl.dot(q2, k2, qk)
        visible = (offs_n[None, :] <= q_pos[:, None]) & in_split[None, :]
        qk = tl.where(visible, qk, float("-inf"))
        v = tl.load(
            v_base + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd,
            mask=in_split[:, None],
            other=0.0,
        )
        acc, l_i, m_i = _online_softmax_step(acc, l_i, m_i, qk, v, qk_scale, True)

    if SPLIT:
        # a row may see no key of this split (chunks with Sq > 1): weight 0 in the reduction
        empty = l_i == 0.0
        part = acc / tl.where(empty, 1.0, l_i)[:, None]
        lse = tl.where(empty, float("-inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))
        num_splits = tl.num_programs(2)
        part_row = (pid_bh * num_splits + split) * rows + offs_r
        tl.store(part_o_ptr + part_row[:, None] * HEAD_DIM + offs_d[None, :], part, mask=row_ok[:, None])
        tl.store(part_lse_ptr + part_row, lse, mask=row_ok)
        if REDUCE_IN_KERNEL:
            # bar.sync orders every thread's partial stores before the atomic; its acq_rel
            # semantics publish them to, and acquire the other splits' for, the last arrival
            tl.debug_barrier()
            counter = counter_ptr + pid_bh * tl.num_programs(0) + pid_m
            arrived = tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")
            if arrived == num_splits - 1:
                tl.store(counter, 0)  # ready for the next launch (and CUDA Graph replays)
                m_all = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
                for s in range(0, num_splits):
                    row_s = (pid_bh * num_splits + s) * rows + offs_r
                    # .cg: read the other programs' partials from L2, never a stale L1 line
                    lse_s = tl.load(
                        part_lse_ptr + row_s, mask=row_ok, other=float("-inf"), cache_modifier=".cg"
                    )
                    m_all = tl.maximum(m_all, lse_s)
                # split 0 holds key 0, which every row sees: m_all is finite on valid rows
                m_all = tl.where(row_ok, m_all, 0.0)
                merged = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
                weight_sum = tl.zeros([BLOCK_M], dtype=tl.float32)
                for s in range(0, num_splits):
                    row_s = (pid_bh * num_splits + s) * rows + offs_r
                    lse_s = tl.load(
                        part_lse_ptr + row_s, mask=row_ok, other=float("-inf"), cache_modifier=".cg"
                    )
                    weight = tl.math.exp2(lse_s - m_all)
                    part_s = tl.load(
                        part_o_ptr + row_s[:, None] * HEAD_DIM + offs_d[None, :],
                        mask=row_ok[:, None],
                        other=0.0,
                        cache_modifier=".cg",
                    )
                    merged += weight[:, None] * part_s
                    weight_sum += weight
                out = merged / tl.where(row_ok, weight_sum, 1.0)[:, None]
                o_ptrs = out_ptr + b * stride_ob + hq[:, None] * stride_oh + qi[:, None] * stride_os
                tl.store(
                    o_ptrs + offs_d[None, :] * stride_od,
                    out.to(out_ptr.dtype.element_ty),
                    mask=row_ok[:, None],
                )
    else:
        out = acc / l_i[:, None]
        o_ptrs = out_ptr + b * stride_ob + hq[:, None] * stride_oh + qi[:, None] * stride_os
        tl.store(o_ptrs + offs_d[None, :] * stride_od, out.to(out_ptr.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def reduce_kernel(
    part_o_ptr,
    part_lse_ptr,
    out_ptr,
    stride_ob,
    stride_oh,
    stride_os,
    stride_od,
    Hkv,
    group,
    Sq,
    num_splits,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """Grid (B * Hkv * group * Sq,): merge one query row's decode splits by their log-sum-exp."""
    pid = tl.program_id(0)
    rows = group * Sq
    r = pid % rows
    pid_bh = pid // rows
    b = pid_bh // Hkv
    hkv = pid_bh % Hkv
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    s_ok = offs_s < num_splits
    part_row = (pid_bh * num_splits + offs_s) * rows + r
    lse = tl.load(part_lse_ptr + part_row, mask=s_ok, other=float("-inf"))
    # split 0 holds key 0, which every row sees: the maximum is finite
    weight = tl.math.exp2(lse - tl.max(lse, 0))
    weight = weight / tl.sum(weight, 0)
    part = tl.load(part_o_ptr + part_row[:, None] * HEAD_DIM + offs_d[None, :], mask=s_ok[:, None], other=0.0)
    out = tl.sum(part * weight[:, None], 0)
    hq = hkv * group + r // Sq
    qi = r % Sq
    tl.store(
        out_ptr + b * stride_ob + hq * stride_oh + qi * stride_os + offs_d * stride_od,
        out.to(out_ptr.dtype.element_ty),
    )
