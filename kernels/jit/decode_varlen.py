"""Triton code of the variable-length decode (generation 3): one query per sequence over a padded
cache whose sequence b holds kv_lens[b] valid keys. The launcher is kernels/decode_varlen.py.

Split-KV over the cache's capacity: split s of sequence b covers keys [s * split_len,
min((s + 1) * split_len, kv_lens[b])); a split that starts past kv_lens[b] loads nothing and
stores nothing, and varlen_merge_kernel reads only the cdiv(kv_lens[b], split_len) splits that
hold keys, so the work and the bytes read follow sum(kv_lens), not B * capacity.

Numerics as the generation-2 decode: float32 scores, base-2 softmax with the 1/sqrt(D) scale
folded into qk_scale, q rotated in float32 and rounded once to the input dtype before the dots.
"""

import triton
import triton.language as tl

from .decode import split_keys


@triton.jit
def varlen_decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    out_ptr,
    part_o_ptr,
    part_lse_ptr,
    cos_ptr,
    sin_ptr,
    kv_lens_ptr,
    q_strides,
    k_strides,
    v_strides,
    o_strides,
    stride_tab,
    Hkv,
    group,
    split_len,
    qk_scale,
    HEAD_DIM: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    ROTATE_Q: tl.constexpr,
    SPLIT: tl.constexpr,
):
    """Grid (cdiv(group, BLOCK_M), B * Hkv, num_splits). The group query heads sharing one KV head
    are packed along M (row r = query head hkv * group + r), so each K/V tile is read once for
    all of them. k holds rotated keys (a cache); q is rotated at position kv_lens[b] - 1 when
    ROTATE_Q. SPLIT=False: write the output; SPLIT=True: write the normalised partial output and
    its base-2 log-sum-exp per (sequence, KV head, split, row) for varlen_merge_kernel."""
    tl.static_assert(HEAD_DIM % 32 == 0, "head_dim halves must be multiples of 16 for tl.dot")
    HALF: tl.constexpr = HEAD_DIM // 2
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    split = tl.program_id(2)
    b = (pid_bh // Hkv).to(tl.int64)  # 64-bit: b * stride_kb passes 2**31 on long caches
    hkv = pid_bh % Hkv
    kv_len = tl.load(kv_lens_ptr + b)  # this sequence's valid keys, 1 <= kv_len <= capacity

    offs_r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = offs_r < group
    hq = hkv * group + offs_r  # (BLOCK_M,) query heads
    d_lo = tl.arange(0, HALF)
    stride_qb, stride_qh, stride_qd = q_strides  # of q (B, Hq, 1, D): batch, head, dim
    q_rows = q_ptr + b * stride_qb + hq[:, None] * stride_qh  # (BLOCK_M, 1)
    q1 = tl.load(q_rows + d_lo[None, :] * stride_qd, mask=row_ok[:, None], other=0.0)  # (M, D/2)
    q2 = tl.load(q_rows + (d_lo[None, :] + HALF) * stride_qd, mask=row_ok[:, None], other=0.0)
    if ROTATE_Q:
        pos = kv_len - 1  # the new token's position: one cos/sin row for every head
        c = tl.load(cos_ptr + pos * stride_tab + d_lo).to(tl.float32)[None, :]  # (1, D/2)
        s = tl.load(sin_ptr + pos * stride_tab + d_lo).to(tl.float32)[None, :]
        q1f, q2f = q1.to(tl.float32), q2.to(tl.float32)
        q1, q2 = (q1f * c - q2f * s).to(q1.dtype), (q2f * c + q1f * s).to(q2.dtype)

    stride_kb, stride_kh, stride_ks, stride_kd = k_strides  # of k (B, Hkv, capacity, D)
    stride_vb, stride_vh, stride_vs, stride_vd = v_strides  # of v (B, Hkv, capacity, D)
    k_base = k_ptr + b * stride_kb + hkv * stride_kh
    v_base = v_ptr + b * stride_vb + hkv * stride_vh
    offs_d = tl.arange(0, HEAD_DIM)
    lo, hi = split_keys(split, split_len, kv_len)
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        keep = offs_n < hi  # (BLOCK_N,) keys of this split and sequence
        kt_ptrs = k_base + offs_n[None, :] * stride_ks  # K^T halves (D/2, BLOCK_N)
        k1 = tl.load(kt_ptrs + d_lo[:, None] * stride_kd, mask=keep[None, :], other=0.0)
        k2 = tl.load(kt_ptrs + (d_lo[:, None] + HALF) * stride_kd, mask=keep[None, :], other=0.0)
        qk = tl.dot(q2, k2, tl.dot(q1, k1)) * qk_scale  # (M, N), base-2 logits
        qk = tl.where(keep[None, :], qk, float("-inf"))
        v = tl.load(
            v_base + offs_n[:, None] * stride_vs + offs_d[None, :] * stride_vd, mask=keep[:, None], other=0.0
        )  # (N, D)
        # the first block of a split holds a valid key, so m_new is finite on every row
        m_new = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_new[:, None])
        scale = tl.math.exp2(m_i - m_new)
        l_i = l_i * scale + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * scale[:, None])
        m_i = m_new

    if SPLIT:
        # splits past kv_len saw no key: nothing stored, and the merge never reads them
        stored = row_ok & (lo + 0 * offs_r < kv_len)  # (BLOCK_M,)
        part_row = (pid_bh * tl.num_programs(2) + split) * group + offs_r
        part = acc / tl.where(l_i > 0.0, l_i, 1.0)[:, None]
        lse = m_i + tl.math.log2(tl.where(l_i > 0.0, l_i, 1.0))
        tl.store(part_o_ptr + part_row[:, None] * HEAD_DIM + offs_d[None, :], part, mask=stored[:, None])
        tl.store(part_lse_ptr + part_row, lse, mask=stored)
    else:
        stride_ob, stride_oh, stride_od = o_strides  # of out (B, Hq, 1, D): batch, head, dim
        o_ptrs = out_ptr + b * stride_ob + hq[:, None] * stride_oh + offs_d[None, :] * stride_od
        tl.store(o_ptrs, (acc / l_i[:, None]).to(out_ptr.dtype.element_ty), mask=row_ok[:, None])


@triton.jit
def varlen_merge_kernel(
    part_o_ptr,
    part_lse_ptr,
    out_ptr,
    kv_lens_ptr,
    stride_ob,
    stride_oh,
    stride_od,
    Hkv,
    group,
    num_splits,
    split_len,
    HEAD_DIM: tl.constexpr,
    BLOCK_S: tl.constexpr,
):
    """Grid (B * Hkv * group,): one query head's output from the splits of its sequence that hold
    keys (the first cdiv(kv_lens[b], split_len)), weighted by their log-sum-exp."""
    pid = tl.program_id(0)
    r = pid % group
    pid_bh = pid // group
    b = (pid_bh // Hkv).to(tl.int64)  # 64-bit offsets, as in the split kernel
    hkv = pid_bh % Hkv
    used = tl.cdiv(tl.load(kv_lens_ptr + b), split_len)  # >= 1: split 0 holds key 0
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, HEAD_DIM)
    s_ok = offs_s < used
    part_row = (pid_bh * num_splits + offs_s) * group + r  # (BLOCK_S,)
    lse = tl.load(part_lse_ptr + part_row, mask=s_ok, other=float("-inf"))
    weight = tl.math.exp2(lse - tl.max(lse, 0))
    weight = tl.where(s_ok, weight, 0.0)
    part = tl.load(part_o_ptr + part_row[:, None] * HEAD_DIM + offs_d[None, :], mask=s_ok[:, None], other=0.0)
    out = tl.sum(part * weight[:, None], 0) / tl.sum(weight, 0)  # (D,)
    hq = hkv * group + r
    tl.store(out_ptr + b * stride_ob + hq * stride_oh + offs_d * stride_od, out.to(out_ptr.dtype.element_ty))
