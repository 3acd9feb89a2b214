"""Helpers for the kernel tests: the device and dtypes of the kernels as imported (interpreted or
compiled), random inputs (never zeros), NaN-poisoned outputs, and per-dtype tolerances against
float64.

Under TRITON_INTERPRET=1 (CI, this repo's CPU machines) kernels run on CPU in float16/float32;
on a CUDA machine without it the same tests run compiled in float16/bfloat16.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st

import kernels
from headroom.core import defaults
from headroom.measure import correctness

DEVICE = "cpu" if kernels.interpreted() else "cuda"
DTYPES = kernels.SUPPORTED_DTYPES

# (rel, abs) bounds on ||out - ref|| / ||ref|| and max |out - ref| against the float64 reference:
# the studies' own table, config `correctness.tolerances` (float32, float16, bfloat16), the one the
# correctness gate and the benchmark read
TOLERANCES = {
    getattr(torch, d): tol for d, tol in correctness.tolerances(defaults.section("correctness")).items()
}


def random_qkv(batch, heads_q, heads_kv, q_len, kv_len, head_dim, dtype, generator, *, strided=False):
    """Fresh N(0, 1) q (B, Hq, Sq, D) and k, v (B, Hkv, Skv, D) on DEVICE.

    strided=True returns views with non-contiguous strides (a (B, S, H, D) buffer transposed,
    the layout a fused QKV projection produces) so the kernels must honour strides."""

    def make(heads, seq):
        shape = (batch, seq, heads, head_dim) if strided else (batch, heads, seq, head_dim)
        t = torch.randn(shape, generator=generator, dtype=torch.float32).to(dtype).to(DEVICE)
        return t.transpose(1, 2) if strided else t

    return make(heads_q, q_len), make(heads_kv, kv_len), make(heads_kv, kv_len)


def problem_shape(case: dict) -> tuple[int, int, int, int, int, int]:
    """A drawn case's (batch, heads_q, heads_kv, q_len, kv_len, head_dim): random_qkv's first six
    arguments."""
    return tuple(case[k] for k in ("batch", "heads_q", "heads_kv", "q_len", "kv_len", "head_dim"))


def seeded_inputs(seed: int, shape: tuple[int, ...], table_len: int, dtype=DTYPES[0]) -> tuple:
    """q, k, v (random_qkv of ``shape`` from a generator seeded with ``seed``) and the cos, sin
    tables of ``table_len`` positions for its head_dim, all on DEVICE."""
    q, k, v = random_qkv(*shape, dtype, torch.Generator().manual_seed(seed))
    return (q, k, v, *kernels.rope_tables(table_len, shape[-1], device=DEVICE))


def poisoned(shape, dtype):
    """An output buffer full of NaN: any element the kernel fails to write stays NaN."""
    return torch.full(shape, float("nan"), dtype=dtype, device=DEVICE)


def errors(out: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(rel_err, max_abs_err) of out against the float64 ref; NaN anywhere makes both NaN."""
    diff = out.to(torch.float64) - ref
    return float(diff.norm() / ref.norm()), float(diff.abs().max())


def assert_close(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype, what: str = "") -> None:
    assert out.isnan().sum().item() == 0, f"{what}: {out.isnan().sum().item()} NaN (unwritten) elements"
    rel, abs_ = errors(out, ref)
    rel_tol, abs_tol = TOLERANCES[dtype]
    assert rel <= rel_tol and abs_ <= abs_tol, (
        f"{what}: rel_err {rel:.3e} (tol {rel_tol:.0e}), max_abs_err {abs_:.3e} (tol {abs_tol:.0e})"
    )


def draw_shape(draw, groups) -> dict:
    """A random attention problem for the hypothesis cases: GQA group from `groups`, q_len from 1
    to kv_len (often an edge), head_dim, dtype, rotate_k, strided inputs and a seed."""
    heads_kv = draw(st.integers(1, 2))
    group = draw(st.sampled_from(groups))
    kv_len = draw(st.integers(1, 40))
    q_len = draw(st.sampled_from([1, draw(st.integers(1, kv_len)), kv_len]))
    return dict(
        batch=draw(st.integers(1, 2)),
        heads_q=heads_kv * group,
        heads_kv=heads_kv,
        q_len=q_len,
        kv_len=kv_len,
        head_dim=draw(st.sampled_from([32, 64])),
        dtype=draw(st.sampled_from(DTYPES)),
        rotate_k=draw(st.booleans()),
        strided=draw(st.booleans()),
        seed=draw(st.integers(0, 2**31 - 1)),
    )
