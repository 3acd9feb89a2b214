"""Triton candidate kernels of the study: causal GQA attention (prefill and split-KV decode)
with rotate-half RoPE fused into the kernel or applied by a standalone kernel.

    from kernels import Tile, attention, rope, reference_attention, rope_tables
    cos, sin = rope_tables(max_pos, head_dim, dtype=torch.float32, device=q.device)
    out = attention(q, k, v, cos, sin, tile=Tile(64, 64, 4, 3), fused=True, rotate_k=True)
    ref = reference_attention(q, k, v, cos, sin, rotate_k=True)  # float64

Interpreter vs GPU -- what callers must do:
    Triton fixes each kernel's mode when `@triton.jit` runs, which is when this package is
    imported: TRITON_INTERPRET=1 in the environment at that moment gives interpreted kernels
    (CPU tensors; float16/float32), otherwise compiled ones (CUDA tensors; float16/bfloat16).
    Changing the variable after the import changes nothing, so set it BEFORE the first
    `import kernels` (in the shell, or in os.environ at the very top of the entry script,
    before any import that may import kernels). `interpreted()` says which mode was taken;
    a launch after the variable changed raises RuntimeError rather than running in the
    wrong mode.

Generations (GENERATION, the tag recorded with the candidates):
    1: the kernels the first studies recorded; selected with fused=True/False and kept
       bit-for-bit (the same kernels, tiles and launches): pass fused= to reproduce them.
    2: this package's current kernels; selected with rope= (a RoPE placement):
         "unfused"  standalone RoPE kernel on q (and k when rotate_k), then attention;
         "fused"    attention rotates q, and k when rotate_k, as tiles load (one launch);
         "q_fused"  k rotated once by the standalone kernel (as a KV-cache write does), q in
                    the attention kernel -- no per-query-block re-rotation of K.
       Prefill runs the generation-2 kernel (_prefill.py) and decode the split-KV kernel of
       generation 1, under Variant switches (TMA, warp specialisation, GQA packing; in-kernel
       merge of the decode splits) -- DEFAULT_VARIANT unless a caller names one. With
       rotate_k=False (decode over a rotated cache), "q_fused" and "fused" are one launch.
    A candidate is (tile, rope) plus its generation; exactly one of fused= or rope= is given.
    3: the variable-length decode (decode_varlen.py): one query per sequence over a padded,
       rotated cache with per-sequence kv_lens; q rotated in the kernel (placement q_fused);
       plan_decode_varlen / VarlenPlan.run. Generations 1 and 2 are untouched by it.

Plan/run (the host path a runner should time; see plans.py):
    p = plan(q, k, v, cos, sin, tile=tile, rope="q_fused", rotate_k=True)   # checks, compiles
    out = p.run(q, k, v, cos, sin, out=out)   # checks layouts only, launches compiled kernels
    plan() accepts fused= too (generation-1 kernels through the fast host path). Plan.run raises
    ValueError for tensors whose shape, strides, dtype, device or 16-byte alignment differ from
    the plan's examples. attention(..., rope=...) runs a cached plan; attention(..., fused=...)
    keeps generation 1's per-call checks and Triton JIT launches.

Notes for callers:
    - cos/sin tables are (max_pos, head_dim // 2), float32 by default. Their dtype is a speed
      choice for the fused prefill kernel, which reads a cos/sin tile per key block: on the H200,
      float32 tables made fused prefill 8-55% slower than bfloat16 tables (what HF uses)
      (BENCHMARKS.md). Fused and unfused candidates read the same tables, so they stay comparable.
    - Decode (Sq == 1) uses block_n, num_warps, num_stages of the tile; block_m is capped at the
      packed query-head count (decode_block_m). The split-KV plan (decode_split_plan) depends on
      the shape and the SM count only, never on the tile.
    - attention(..., out=buf) writes into a caller's buffer (the correctness gate poisons it).

Modules: tile.py (Tile), rope.py / _rope.py (host / Triton RoPE), attention.py / _attention.py
(host / Triton attention; generation-1 prefill and both generations' decode), _prefill.py
(generation-2 prefill), plans.py (plan/run), _launch.py (launches as data, compiled replay),
split.py (the torch-free decode split plan), reference.py (float64 torch references, chunked for
long caches), decode_varlen.py / jit/decode_varlen.py (host / Triton generation-3 varlen decode).
"""

from . import _mode
from ._rope import noop_kernel
from .attention import (
    DEFAULT_VARIANT,
    ROPE_MODES,
    Variant,
    attention,
    attention_unrotated,
    decode_block_m,
    decode_split_plan,
)
from .decode_varlen import VarlenPlan, decode_varlen, plan_decode_varlen
from .plans import Plan, plan
from .reference import reference_attention, reference_attention_chunked, reference_rope
from .rope import rope, rope_tables
from .tile import Tile

#: generation of the kernels that rope= selects (fused= selects generation 1); recorded with
#: the candidates so studies of different generations stay apart
GENERATION = 2
VARLEN_GENERATION = 3  # decode_varlen's family
SUPPORTED_HEAD_DIMS = _mode.SUPPORTED_HEAD_DIMS
SUPPORTED_DTYPES = _mode.SUPPORTED_DTYPES


def interpreted() -> bool:
    """True when the kernels were built for the Triton interpreter (TRITON_INTERPRET=1 at import)."""
    return _mode.INTERPRET


def empty_kernel_launch(anchor) -> None:
    """Launch a Triton kernel that does nothing, grid (1,): the floor of any launch's cost.

    anchor: any tensor on the kernels' device (CUDA, or CPU under the interpreter); it is passed
    as the one pointer argument so the launch binds an argument like real kernels do.
    """
    _mode.check_device("anchor", anchor)
    noop_kernel[(1,)](anchor)


__all__ = [
    "DEFAULT_VARIANT",
    "GENERATION",
    "ROPE_MODES",
    "Plan",
    "VARLEN_GENERATION",
    "Variant",
    "VarlenPlan",
    "SUPPORTED_DTYPES",
    "SUPPORTED_HEAD_DIMS",
    "Tile",
    "attention",
    "attention_unrotated",
    "decode_block_m",
    "decode_split_plan",
    "decode_varlen",
    "empty_kernel_launch",
    "interpreted",
    "plan",
    "plan_decode_varlen",
    "reference_attention",
    "reference_attention_chunked",
    "reference_rope",
    "rope",
    "rope_tables",
]
