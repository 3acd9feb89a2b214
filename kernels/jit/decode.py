"""Triton code of the generation-2 split-KV decode: the decode kernel (one program per KV head,
block of packed query rows and key split) and the reduction kernel that merges the splits.
Launcher: kernels/decode.py. Numerics as in softmax.py (float32 scores, base-2 online softmax);
q and k enter tl.dot as two head_dim / 2 halves so RoPE rotates them in registers (rope.py).
"""

import triton
import triton.language as tl

from .rope import load_kt_halves, load_q_halves
from .softmax import online_softmax_step


@triton.jit
def split_keys(split, split_len, end):
    """Keys [lo, hi) of decode split `split`: [split * split_len, min(end, (split + 1) * split_len))."""
    lo = split * split_len
    hi = tl.minimum(end, lo + split_len)
    return lo, hi


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
    q_strides,
    k_strides,
    v_strides,
    o_strides,
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
    stride_qb, stride_qh, stride_qs, stride_qd = q_strides  # of q (B, Hq, Sq, D)
    stride_kb, stride_kh, stride_ks, stride_kd = k_strides  # of k (B, Hkv, Skv, D)
    stride_vb, stride_vh, stride_vs, stride_vd = v_strides  # of v (B, Hkv, Skv, D)
    stride_ob, stride_oh, stride_os, stride_od = o_strides  # of out (B, Hq, Sq, D)
    pid_bh = tl.program_id(1)
    split = tl.program_id(2)
    b = (pid_bh // Hkv).to(tl.int64)  # 64-bit: b * stride_kb passes 2**31 on long caches
    hkv = pid_bh % Hkv
    rows = group * Sq
    offset = Skv - Sq

    # (BLOCK_M,) packed rows: query head hkv * group + r // Sq, position r % Sq
    offs_r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_r < rows
    hq = hkv * group + offs_r // Sq
    qi = offs_r % Sq
    q_pos = qi + offset
    q_rows = q_ptr + b * stride_qb + hq[:, None] * stride_qh + qi[:, None] * stride_qs
    offs_half = tl.arange(0, HALF)
    tables = (cos_ptr, sin_ptr, stride_tab)  # the RoPE tables (max_pos, D/2) and their row stride
    q1, q2 = load_q_halves(
        q_rows, offs_half, stride_qd, q_pos, row_ok, tables, HALF, ROTATE_Q
    )  # (BLOCK_M, D/2)
    k_base = k_ptr + b * stride_kb + hkv * stride_kh
    v_base = v_ptr + b * stride_vb + hkv * stride_vh
    offs_d = tl.arange(0, HEAD_DIM)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # (BLOCK_M,) running max, base 2
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # (BLOCK_M,) running sum
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)  # (BLOCK_M, D)
    lo, hi = split_keys(split, split_len, Skv)
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        in_split = offs_n < hi
        k1, k2 = load_kt_halves(
            k_base, offs_n, in_split, offs_half, stride_ks, stride_kd, tables, HALF, ROTATE_K, True
        )
        qk = tl.dot(q1, k1)
        qk = tl.dot(q2, k2, qk)  # (BLOCK_M, BLOCK_N)
        visible = (offs_n[None, :] <= q_pos[:, None]) & in_split[None, :]
        qk = tl.where(visible, qk, float("-inf"))
        v = tl.load(  # (BLOCK_N, D)
            v_base + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd,
            mask=in_split[:, None],
            other=0.0,
        )
        acc, l_i, m_i = online_softmax_step(acc, l_i, m_i, qk, v, qk_scale, True)

    if SPLIT:
        # a row may see no key of this split (chunks with Sq > 1): weight 0 in the reduction
        empty = l_i == 0.0
        part = acc / tl.where(empty, 1.0, l_i)[:, None]  # (BLOCK_M, D) normalised partial output
        lse = tl.where(empty, float("-inf"), m_i + tl.math.log2(tl.where(empty, 1.0, l_i)))  # (BLOCK_M,)
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
                merged = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)  # (BLOCK_M, D)
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
        out = acc / l_i[:, None]  # (BLOCK_M, D)
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
    b = (pid_bh // Hkv).to(tl.int64)  # 64-bit offsets, as in the split kernel
    hkv = pid_bh % Hkv
    offs_s = tl.arange(0, BLOCK_S)  # (BLOCK_S,) splits
    offs_d = tl.arange(0, HEAD_DIM)
    s_ok = offs_s < num_splits
    part_row = (pid_bh * num_splits + offs_s) * rows + r
    lse = tl.load(part_lse_ptr + part_row, mask=s_ok, other=float("-inf"))
    # split 0 holds key 0, which every row sees: the maximum is finite
    weight = tl.math.exp2(lse - tl.max(lse, 0))
    weight = weight / tl.sum(weight, 0)
    part = tl.load(
        part_o_ptr + part_row[:, None] * HEAD_DIM + offs_d[None, :], mask=s_ok[:, None], other=0.0
    )  # (BLOCK_S, D)
    out = tl.sum(part * weight[:, None], 0)  # (D,)
    hq = hkv * group + r // Sq
    qi = r % Sq
    tl.store(
        out_ptr + b * stride_ob + hq * stride_oh + qi * stride_os + offs_d * stride_od,
        out.to(out_ptr.dtype.element_ty),
    )
