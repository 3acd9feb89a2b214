"""FlashInfer's attention as native candidates: the kernels vLLM and SGLang run on Hopper (issue 33).

Two candidates, each a serving stack's use of FlashInfer on every row of a trace:

- ``flashinfer-paged`` (vLLM's FlashInfer backend): prefills and chunks by
  ``BatchPrefillWithPagedKVCacheWrapper`` over the paged cache, decodes by
  ``BatchDecodeWithPagedKVCacheWrapper`` on CUDA cores (vLLM takes tensor cores only above a GQA
  group of 4);
- ``flashinfer-ragged`` (SGLang's): prefills and chunks by ``BatchPrefillWithRaggedKVCacheWrapper``
  over contiguous (ragged) keys and values, decodes by the paged decode wrapper with
  ``use_tensor_cores=True`` (SGLang's choice from a GQA group of 4).

So each wrapper FlashInfer offers for these steps is timed on the rows it serves: ragged and paged
prefill on prefills and chunks, paged decode with and without tensor cores on decodes; a per-shape
policy picks among them as it picks among our tiles.

Layout. Our kernels and the SDPA natives read a contiguous padded (B, H, S, D) cache; FlashInfer
reads token-major (NHD) storage: a paged cache of ``PAGE_SIZE`` tokens a page (vLLM's default 16),
each sequence's pages consecutive, or a ragged (B*S, H, D) one. Each input set is copied into that
layout once, untimed (``prepare``), as a server's cache already is; a decode row with ``kv_lens``
gets page tables over its real lengths (FlashInfer's varlen decode). RoPE is applied by the same
standalone Triton kernel as for the other natives, writing q (and, on a prefill from an empty cache,
k) straight into FlashInfer's layout; FlashInfer's in-kernel RoPE (``pos_encoding_mode``) rotates
cached keys at every read, which our rotated-cache semantics do not, so it is left out.

Plan and run. ``plan()`` is FlashInfer's per-batch host step (a server runs it once per step, for all
layers): made once per shape, outside the timed calls (``prepare``); the lifecycle times it as the
candidate's plan cost (:func:`plan_once`). ``run()`` is what the portfolio times. Every wrapper is
FlashInfer's CUDA-graph-safe form (``use_cuda_graph=True``, fixed index buffers), so the same call is
timed eager and under graph replay; one wrapper per (candidate, wrapper, shape) lives for the
process, as a server keeps one per captured batch size.

FlashInfer compiles its kernels on first use into its JIT cache (``FLASHINFER_WORKSPACE_BASE``,
default the home directory): the environment stage builds the study's modules there (:func:`warm`)
and records the version, the cache and its identity (headroom.measure.environment.flashinfer_facts).
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from headroom.families.attention.candidates import FLASHINFER_BACKENDS as BACKENDS

EXTRA = "flashinfer"  # pyproject's optional dependency group that installs it
PAGE_SIZE = 16  # tokens per page: vLLM's default block size
WORKSPACE_BYTES = 128 << 20  # FlashInfer's recommended float workspace (split-KV partials)
DTYPES = ("float16", "bfloat16")  # FlashInfer has no float32 attention
HEAD_DIMS = (64, 128, 256)  # head sizes its prebuilt and JIT prefill/decode kernels take


def available() -> bool:
    """Whether FlashInfer is installed (without importing it: the import is seconds long)."""
    return importlib.util.find_spec("flashinfer") is not None


def missing_message(names: list[str], key: str = "native_candidates") -> str:
    """The one-line error for a CUDA study that lists FlashInfer candidates where it is missing."""
    return (
        f"config key '{key}': {', '.join(names)} need FlashInfer, which is not installed: "
        f'pip install -e ".[pipeline,{EXTRA}]" (offline: docs/airgapped.md), or remove them from {key}'
    )


@dataclass(frozen=True)
class Row:
    """What a call's shape is, from its tensors: q (B, Hq, Sq, D), k/v (B, Hkv, Skv, D)."""

    batch: int
    heads_q: int
    heads_kv: int
    q_len: int
    kv_len: int
    head_dim: int
    decode: bool  # one query per sequence: the decode wrapper

    @classmethod
    def of(cls, q, k, kv_lens) -> Row:
        b, hq, sq, d = q.shape
        hkv, skv = k.shape[1], k.shape[2]
        return cls(b, hq, hkv, sq, skv, d, decode=sq == 1 and (kv_lens is not None or skv > 1))


def _check(backend: str, q, k) -> None:
    """FlashInfer's own limits as the correctness gate's 'unsupported' (no kernel for this input)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not one of {', '.join(BACKENDS)}")
    dtype = str(q.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise NotImplementedError(f"{backend}: no available kernel for {dtype} (FlashInfer takes {DTYPES})")
    if q.shape[3] not in HEAD_DIMS:
        raise NotImplementedError(f"{backend}: no available kernel for head_dim {q.shape[3]} ({HEAD_DIMS})")


# -- layouts --------------------------------------------------------------------------------------


def token_major(x, rows: int):
    """(storage, view): storage (B*rows, H, D) token-major (NHD), rows >= S; view (B, H, S, D) of it,
    the strided tensor our RoPE kernel and ``copy_`` write through."""
    import torch

    b, h, s, d = x.shape
    storage = torch.empty((b * rows, h, d), dtype=x.dtype, device=x.device)
    return storage, storage.view(b, rows, h, d).permute(0, 2, 1, 3)[:, :, :s]


def page_table(kv_len: int, lens: list[int], page_size: int = PAGE_SIZE) -> tuple[list, list, list]:
    """(indptr, indices, last_page_len) of sequences with ``lens`` tokens in a cache where sequence b
    owns pages b*P .. b*P+P-1, P = ceil(kv_len / page_size): FlashInfer's CSR page table."""
    per_seq = math.ceil(kv_len / page_size)
    indptr, indices, last = [0], [], []
    for b, n in enumerate(lens):
        if not 1 <= n <= kv_len:
            raise ValueError(f"kv_lens[{b}] = {n} is outside 1..{kv_len}")
        pages = math.ceil(n / page_size)
        indices += range(b * per_seq, b * per_seq + pages)
        indptr.append(indptr[-1] + pages)
        last.append(n - (pages - 1) * page_size)
    return indptr, indices, last


@dataclass
class _Set:
    """One input set in FlashInfer's layout: q and the output token-major, k and v paged or ragged."""

    q: Any  # (B*Sq, Hq, D)
    q_view: Any  # (B, Hq, Sq, D) view of q
    k: Any
    k_view: Any
    v: Any
    o: Any  # (B*Sq, Hq, D), the run's output
    o_view: Any
    keep: tuple  # the source tensors, so an id() key is never reused while this lives


def _layout(q, k, v, paged: bool) -> _Set:
    """Copies of k and v in FlashInfer's layout (paged: pages of PAGE_SIZE, each sequence's
    consecutive; else ragged), and q/output buffers token-major. Untimed, once per input set."""
    skv = k.shape[2]
    rows = math.ceil(skv / PAGE_SIZE) * PAGE_SIZE if paged else skv
    q_buf, q_view = token_major(q, q.shape[2])
    o_buf, o_view = token_major(q, q.shape[2])
    (k_buf, k_view), (v_buf, v_view) = token_major(k, rows), token_major(v, rows)
    k_view.copy_(k)
    v_view.copy_(v)
    if paged:  # (pages, PAGE_SIZE, H, D): the token-major storage cut in pages
        h, d = k.shape[1], k.shape[3]
        k_buf, v_buf = (t.view(-1, PAGE_SIZE, h, d) for t in (k_buf, v_buf))
    return _Set(q_buf, q_view, k_buf, k_view, v_buf, o_buf, o_view, (q, k, v))


# -- wrappers -------------------------------------------------------------------------------------

_WORKSPACE: dict[str, Any] = {}  # device -> the float workspace every wrapper of the process shares
_WRAPPERS: dict[tuple, Any] = {}  # (kind, tensor cores, batch, Sq, Skv, heads, dim, dtype) -> wrapper


def _workspace(device):
    import torch

    key = str(device)
    if key not in _WORKSPACE:  # zeroed for its first use, as FlashInfer asks
        _WORKSPACE[key] = torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
    return _WORKSPACE[key]


def _kind(backend: str, row: Row) -> tuple[str, bool]:
    """(wrapper kind, tensor cores) the candidate runs on this row."""
    if row.decode:
        return "decode", backend == "flashinfer-ragged"
    return ("ragged" if backend == "flashinfer-ragged" else "paged"), False


def _wrapper(kind: str, tensor_cores: bool, row: Row, dtype, device):
    """The process's CUDA-graph-safe wrapper for this kind and shape, made on first use."""
    key = (kind, tensor_cores, row, str(dtype), str(device))
    if key in _WRAPPERS:
        return _WRAPPERS[key]
    import flashinfer
    import torch

    ws, b = _workspace(device), row.batch
    i32 = dict(dtype=torch.int32, device=device)
    pages = b * math.ceil(row.kv_len / PAGE_SIZE)
    if kind == "ragged":
        w = flashinfer.BatchPrefillWithRaggedKVCacheWrapper(
            ws, "NHD", use_cuda_graph=True, qo_indptr_buf=torch.empty(b + 1, **i32),
            kv_indptr_buf=torch.empty(b + 1, **i32),
        )  # fmt: skip
    elif kind == "paged":
        w = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
            ws, "NHD", use_cuda_graph=True, qo_indptr_buf=torch.empty(b + 1, **i32),
            paged_kv_indptr_buf=torch.empty(b + 1, **i32), paged_kv_indices_buf=torch.empty(pages, **i32),
            paged_kv_last_page_len_buf=torch.empty(b, **i32),
        )  # fmt: skip
    else:
        w = flashinfer.BatchDecodeWithPagedKVCacheWrapper(
            ws, "NHD", use_cuda_graph=True, use_tensor_cores=tensor_cores,
            paged_kv_indptr_buffer=torch.empty(b + 1, **i32), paged_kv_indices_buffer=torch.empty(pages, **i32),
            paged_kv_last_page_len_buffer=torch.empty(b, **i32),
        )  # fmt: skip
    _WRAPPERS[key] = w
    return w


def _plan(w, kind: str, row: Row, lens: list[int], dtype, device) -> None:
    """FlashInfer's plan() for one batch: causal, bottom-right aligned (query i of a chunk sees the
    cache and the chunk up to itself), as our kernels and the SDPA natives."""
    import torch

    def i32(values):
        return torch.tensor(values, dtype=torch.int32, device=device)

    b, heads = row.batch, (row.heads_q, row.heads_kv, row.head_dim)
    types = {"q_data_type": dtype, "kv_data_type": dtype}
    qo = i32([i * row.q_len for i in range(b + 1)])
    if kind == "ragged":
        w.plan(qo, i32([i * row.kv_len for i in range(b + 1)]), *heads, causal=True, **types)
        return
    indptr, indices, last = (i32(x) for x in page_table(row.kv_len, lens))
    if kind == "paged":
        w.plan(qo, indptr, indices, last, *heads, PAGE_SIZE, causal=True, **types)
    else:
        w.plan(indptr, indices, last, *heads, PAGE_SIZE, **types)


def plan_once(backend: str, q, k, kv_lens=None) -> Any:
    """Plan this batch (the lifecycle's plan cost): the wrapper it runs, planned."""
    _check(backend, q, k)
    row = Row.of(q, k, kv_lens)
    kind, tc = _kind(backend, row)
    lens = [row.kv_len] * row.batch if kv_lens is None else [int(n) for n in kv_lens.tolist()]
    w = _wrapper(kind, tc, row, q.dtype, q.device)
    _plan(w, kind, row, lens, q.dtype, q.device)
    return w


# -- the candidate --------------------------------------------------------------------------------


def candidate(backend: str, rope_q: Callable, rope_k: Callable | None, kv_lens=None) -> Callable:
    """fn(q, k, v, out=None) for one FlashInfer candidate on one shape. ``rope_q(q, kv_len, out)``
    rotates q (its last query at position kv_len - 1) into ``out``; ``rope_k(k, out)`` rotates the new keys of a prefill from an empty cache (None
    elsewhere: the cache holds keys rotated when written). ``fn.prepare(sets)``: the layouts and the
    plan, untimed (the timing harness calls it first; a call on an unprepared set prepares it)."""
    sets: dict[int, _Set] = {}
    planned: list = []  # [(wrapper, kind)] once planned

    def prepare_one(q, k, v) -> _Set:
        if not planned:
            w = plan_once(backend, q, k, kv_lens)
            planned.append((w, _kind(backend, Row.of(q, k, kv_lens))[0]))
        if id(k) not in sets:
            sets[id(k)] = _layout(q, k, v, paged=planned[0][1] != "ragged")
        return sets[id(k)]

    def fn(q, k, v, out=None):
        s = sets.get(id(k)) or prepare_one(q, k, v)
        w, kind = planned[0]
        rope_q(q, k.shape[2], s.q_view)
        if rope_k is not None:
            rope_k(k, s.k_view)
        if kind == "ragged":
            w.run(s.q, s.k, s.v, out=s.o)
        else:
            w.run(s.q, (s.k, s.v), out=s.o)
        return s.o_view if out is None else out.copy_(s.o_view)

    fn.prepare = lambda input_sets: [prepare_one(*t[:3]) for t in input_sets]
    return fn


# -- the environment ------------------------------------------------------------------------------


def warm(partition: dict[str, Any], backends: list[str], rope_base: float) -> float:
    """Build FlashInfer's JIT modules the study's candidates run (a prefill, a chunk over a cache and a
    ragged decode on small shapes of the partition), once per environment, into its JIT cache;
    returns the seconds (149 s on the H200 with an empty cache, 0.0 s from it: data/checks/h200/
    2026-12-04-session18). The environment stage runs it, so no measuring stage pays the JIT."""
    import time
    from types import SimpleNamespace

    import torch

    from headroom.families.attention.runner import runner, tables

    hq, hkv, d = int(partition["heads_q"]), int(partition["heads_kv"]), int(partition["head_dim"])
    dtype = getattr(torch, str(partition["dtype"]))
    cos, sin = tables(64, d, str(partition["dtype"]), rope_base, "cuda")
    shapes = ((1, 16, 16, None), (1, 8, 32, None), (2, 1, 32, [32, 17]))  # (B, Sq, Skv, kv_lens)
    t0 = time.perf_counter()
    for backend in backends:
        for b, sq, skv, lens in shapes:
            q = torch.randn(b, hq, sq, d, device="cuda", dtype=dtype)
            k, v = (torch.randn(b, hkv, skv, d, device="cuda", dtype=dtype) for _ in range(2))
            kv_lens = None if lens is None else torch.tensor(lens, dtype=torch.int32, device="cuda")
            cand = SimpleNamespace(backend=backend, candidate=f"native-{backend}")
            runner(cand, cos, sin, sq == skv, kv_lens)(q, k, v)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def require(study: dict[str, Any]) -> None:
    """ValueError (one line) when a CUDA study lists FlashInfer candidates and FlashInfer is not
    installed: the plan fails before any job, naming the extra and the key that leaves them out."""
    names = [n for n in study.get("native_candidates") or () if n in BACKENDS]
    if names and study.get("family") is None and study.get("device") == "cuda" and not available():
        raise ValueError(missing_message(names))
