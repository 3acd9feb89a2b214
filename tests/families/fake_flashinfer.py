"""A stand-in for the three FlashInfer wrappers the FlashInfer candidates call, computing what
FlashInfer's documentation says they compute (token-major NHD tensors, CSR indptr/indices/last-page
lengths, causal masks aligned bottom-right, GQA by head groups) with plain torch on the CPU.

CI has no FlashInfer and no GPU: this checks our side of the seam (layouts, page tables, the RoPE
written into FlashInfer's buffers, plan before run, the output read back) against the SDPA natives.
FlashInfer itself is checked on the H200 (tests/families/test_flashinfer_gpu.py)."""

from __future__ import annotations

import math

import torch

calls: list[tuple[str, str]] = []  # (wrapper, method) in call order: tests look


def _attend(q, k, v, causal: bool) -> torch.Tensor:
    """q (Lq, Hq, D), k/v (Lkv, Hkv, D) -> (Lq, Hq, D), computed in float64."""
    lq, hq, d = q.shape
    group = hq // k.shape[1]
    k, v = (t.double().repeat_interleave(group, dim=1) for t in (k, v))
    scores = torch.einsum("qhd,khd->hqk", q.double(), k) / math.sqrt(d)
    if causal:
        offset = k.shape[0] - lq
        keep = torch.arange(k.shape[0])[None, :] <= torch.arange(lq)[:, None] + offset
        scores = scores.masked_fill(~keep, float("-inf"))
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v).to(q.dtype)


def _gather(cache, pages, last: int, page_size: int):
    return torch.cat([cache[int(p)] for p in pages])[: (len(pages) - 1) * page_size + last]


class _Wrapper:
    def __init__(self, workspace, kv_layout="NHD", use_cuda_graph=False, **buffers):
        assert kv_layout == "NHD" and workspace.dtype == torch.uint8
        self.graph = use_cuda_graph
        self.tensor_cores = buffers.pop("use_tensor_cores", False)
        self.plan_args = None

    def _planned(self):
        if self.plan_args is None:
            raise RuntimeError(f"{type(self).__name__}.run before plan")
        calls.append((type(self).__name__, "run"))
        return self.plan_args


class BatchPrefillWithRaggedKVCacheWrapper(_Wrapper):
    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim, *, causal, **types):
        calls.append((type(self).__name__, "plan"))
        self.plan_args = (qo_indptr.tolist(), kv_indptr.tolist(), causal)

    def run(self, q, k, v, out):
        qo, kv, causal = self._planned()
        for b in range(len(qo) - 1):
            out[qo[b] : qo[b + 1]] = _attend(
                q[qo[b] : qo[b + 1]], k[kv[b] : kv[b + 1]], v[kv[b] : kv[b + 1]], causal
            )
        return out


class BatchPrefillWithPagedKVCacheWrapper(_Wrapper):
    def plan(self, qo_indptr, indptr, indices, last, hq, hkv, d, page_size, *, causal, **types):
        calls.append((type(self).__name__, "plan"))
        self.plan_args = (
            qo_indptr.tolist(),
            indptr.tolist(),
            indices.tolist(),
            last.tolist(),
            page_size,
            causal,
        )

    def run(self, q, kv, out):
        qo, indptr, indices, last, ps, causal = self._planned()
        kc, vc = kv
        for b in range(len(qo) - 1):
            pages = indices[indptr[b] : indptr[b + 1]]
            k, v = (_gather(c, pages, last[b], ps) for c in (kc, vc))
            out[qo[b] : qo[b + 1]] = _attend(q[qo[b] : qo[b + 1]], k, v, causal)
        return out


class BatchDecodeWithPagedKVCacheWrapper(_Wrapper):
    def plan(self, indptr, indices, last, hq, hkv, d, page_size, **types):
        calls.append((type(self).__name__, "plan"))
        self.plan_args = (indptr.tolist(), indices.tolist(), last.tolist(), page_size)

    def run(self, q, kv, out):
        indptr, indices, last, ps = self._planned()
        kc, vc = kv
        for b in range(len(indptr) - 1):
            pages = indices[indptr[b] : indptr[b + 1]]
            k, v = (_gather(c, pages, last[b], ps) for c in (kc, vc))
            out[b : b + 1] = _attend(q[b : b + 1], k, v, causal=False)
        return out
