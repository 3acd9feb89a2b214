"""Triton code of the FA2 online-softmax step that the prefill and decode kernels share.

Scores are accumulated in float32; softmax runs in base 2 (exp2) with the 1/sqrt(D) scale folded
into LOG2E (kernels/launch.py's attention_scale), which saves a multiply per score and maps to the
hardware's ex2.
"""

import triton
import triton.language as tl


@triton.jit
def online_softmax_step(acc, l_i, m_i, qk, v, qk_scale, GUARD_EMPTY: tl.constexpr):
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
