"""float64 torch references for the kernels in this package (plain torch, no Triton)."""

from __future__ import annotations

import math

import torch


def reference_rope(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, positions_offset: int = 0
) -> torch.Tensor:
    """Rotate-half RoPE in float64. x (B, H, S, D); tables (max_pos, D // 2).
    Returns (B, H, S, D) float64 on x's device."""
    seq, half = x.shape[2], x.shape[3] // 2
    c = cos[positions_offset : positions_offset + seq].to(torch.float64)  # (S, D/2)
    s = sin[positions_offset : positions_offset + seq].to(torch.float64)
    x = x.to(torch.float64)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def reference_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, rotate_k: bool
) -> torch.Tensor:
    """What kernels.attention computes, in float64 on q's device: (B, Hq, Sq, D) float64.

    q rotated at positions Skv - Sq + i; k rotated at positions j when rotate_k; causal mask
    bottom-right (query i sees keys j <= i + Skv - Sq); GQA by repeating each KV head
    Hq // Hkv times."""
    q_len, kv_len, head_dim = q.shape[2], k.shape[2], q.shape[3]
    group = q.shape[1] // k.shape[1]
    qr = reference_rope(q, cos, sin, kv_len - q_len)  # (B, Hq, Sq, D)
    kr = reference_rope(k, cos, sin, 0) if rotate_k else k.to(torch.float64)  # (B, Hkv, Skv, D)
    kr = kr.repeat_interleave(group, dim=1)  # (B, Hq, Skv, D)
    vr = v.to(torch.float64).repeat_interleave(group, dim=1)
    scores = qr @ kr.transpose(-1, -2) / math.sqrt(head_dim)  # (B, Hq, Sq, Skv)
    i = torch.arange(q_len, device=q.device)[:, None]
    j = torch.arange(kv_len, device=q.device)[None, :]
    scores = scores.masked_fill(j > i + (kv_len - q_len), float("-inf"))
    return torch.softmax(scores, dim=-1) @ vr


#: score elements (query rows x keys, all heads of a group) one chunk of the chunked reference
#: holds: 2**24 float64 scores = 128 MiB, whatever the shape
REFERENCE_CHUNK_ELEMENTS = 2**24


def reference_attention_chunked(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    rotate_k: bool,
    kv_lens: torch.Tensor | None = None,
    chunk_elements: int = REFERENCE_CHUNK_ELEMENTS,
) -> torch.Tensor:
    """reference_attention in float64 without materialising the score matrix: per sequence and KV
    head, query blocks x key chunks of at most `chunk_elements` scores, merged by an online
    (max, sum) softmax in float64. Returns (B, Hq, Sq, D) float64 on q's device.

    kv_lens: optional (B,) lengths; sequence b has keys [0, kv_lens[b]) of the (B, Hkv, Skv, D)
    cache (None: every sequence has Skv). Query i of sequence b sits at position
    kv_lens[b] - Sq + i (RoPE there) and sees keys j <= that position (bottom-right causal)."""
    batch, heads_q, q_len, head_dim = q.shape
    heads_kv, capacity = k.shape[1], k.shape[2]
    group = heads_q // heads_kv
    lens = [capacity] * batch if kv_lens is None else [int(n) for n in kv_lens.cpu()]
    if any(not q_len <= n <= capacity for n in lens):
        raise ValueError(f"kv_lens {lens} must lie in {q_len}..{capacity} (Sq..Skv)")
    q_block = max(1, min(q_len, chunk_elements // (group * 64)))
    key_chunk = max(64, chunk_elements // (group * q_block))
    out = torch.empty((batch, heads_q, q_len, head_dim), dtype=torch.float64, device=q.device)
    for b in range(batch):
        qr = reference_rope(q[b : b + 1], cos, sin, lens[b] - q_len)[0]  # (Hq, Sq, D)
        for h in range(heads_kv):
            heads = slice(h * group, (h + 1) * group)
            for qs in range(0, q_len, q_block):
                qe = min(q_len, qs + q_block)
                out[b, heads, qs:qe] = _chunked_rows(
                    qr[heads, qs:qe], k[b, h], v[b, h], cos, sin, rotate_k,
                    first_pos=lens[b] - q_len + qs, kv_len=lens[b], key_chunk=key_chunk,
                )  # fmt: skip
    return out


def _chunked_rows(qr, k, v, cos, sin, rotate_k, *, first_pos, kv_len, key_chunk) -> torch.Tensor:
    """softmax(qr k^T / sqrt(D)) v for rotated float64 queries qr (G, M, D) at positions
    first_pos.., over keys [0, min(kv_len, last position + 1)) of k, v (Skv, D), in key chunks."""
    group, rows, head_dim = qr.shape
    pos = first_pos + torch.arange(rows, device=qr.device)  # (M,)
    m = torch.full((group, rows, 1), float("-inf"), dtype=torch.float64, device=qr.device)
    denom = torch.zeros((group, rows, 1), dtype=torch.float64, device=qr.device)
    acc = torch.zeros((group, rows, head_dim), dtype=torch.float64, device=qr.device)
    for ks in range(0, min(kv_len, first_pos + rows), key_chunk):
        ke = min(kv_len, first_pos + rows, ks + key_chunk)
        kc = k[ks:ke][None]  # (1, N, D)
        kc = reference_rope(kc[None], cos, sin, ks)[0] if rotate_k else kc.to(torch.float64)
        scores = qr @ kc.transpose(-1, -2) / math.sqrt(head_dim)  # (G, M, N)
        visible = torch.arange(ks, ke, device=qr.device)[None, :] <= pos[:, None]  # (M, N)
        scores = scores.masked_fill(~visible, float("-inf"))
        m_new = torch.maximum(m, scores.amax(-1, keepdim=True))  # finite: key ks <= first_pos
        scale = torch.exp(m - m_new)
        p = torch.exp(scores - m_new)
        denom = denom * scale + p.sum(-1, keepdim=True)
        acc = acc * scale + p @ v[ks:ke].to(torch.float64)
        m = m_new
    return acc / denom
