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
