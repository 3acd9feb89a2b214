"""Triton candidate kernels of the study: causal GQA attention (prefill and split-KV decode)
with rotate-half RoPE fused into the kernel or applied by a standalone kernel. Beside them,
kernels/moe.py: a fused Mixture-of-Experts grouped GEMM with the serving stacks' config keys
(``fused_moe``, ``reference_moe``, ``compile_moe``; the MoE family's candidates, headroom/families/moe).

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
    1: the kernels the first studies recorded, frozen in kernels/gen1/ (kernels and launchers
       copied there; tools/bit_identity.py checks outputs and compiled IR against the recorded
       tree); selected with fused=True/False: pass fused= to reproduce them.
    2: this package's current kernels; selected with rope= (a RoPE placement):
         "unfused"  standalone RoPE kernel on q (and k when rotate_k), then attention;
         "fused"    attention rotates q, and k when rotate_k, as tiles load (one launch);
         "q_fused"  k rotated once by the standalone kernel (as a KV-cache write does), q in
                    the attention kernel -- no per-query-block re-rotation of K.
       Prefill runs kernels/jit/prefill.py and decode the split-KV kernels of kernels/jit/decode.py,
       under Variant switches (TMA, warp specialisation, GQA packing; in-kernel merge of the
       decode splits) -- DEFAULT_VARIANT unless a caller names one. With rotate_k=False (decode
       over a rotated cache), "q_fused" and "fused" are one launch.
    A candidate is (tile, rope) plus its generation; exactly one of fused= or rope= is given.
    3: the variable-length decode (decode_varlen.py): one query per sequence over a padded,
       rotated cache with per-sequence kv_lens; q rotated in the kernel (placement q_fused);
       plan_decode_varlen / VarlenPlan.run. Generations 1 and 2 are untouched by it.
    Which kernels a candidate launches, in order, is kernels/schedule.py (pure Python, which the
    roofline reads): e.g. unfused prefill = rope_q, rope_k, prefill; split decode adds reduce
    unless the variant merges in the kernel.

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
    - Without torch and triton (the analysis environment) only the pure-Python modules import:
      kernels.split (the decode split plan) and kernels.schedule (placements, launch sequence).

Where things live (by family; kernels/jit/ holds only @triton.jit code, one floor up launchers
that allocate, build the grid and launch with keyword arguments):
    jit/prefill.py, jit/decode.py, jit/rope.py, jit/softmax.py   generation-2 Triton kernels
    prefill.py, decode.py, rope.py   their launchers (launches as data: launch.Launches)
    gen1/          generation 1, frozen (kernels and launchers)
    attention.py   the checked calls attention() / attention_unrotated()
    plans.py       plan/run: launches from schedule.py's rotations and FAMILIES' launchers
    launch.py      LaunchSpec / CompiledLaunch (launches as data, compiled replay), Launches
    schedule.py    placements, generations, Variant, the launch sequence (pure Python)
    split.py       the decode split plan and row-block rule (pure Python)
    mode.py        interpreter vs GPU, SM count, input checks; tile.py Tile; reference.py float64
                   references (chunked for long caches)
    decode_varlen.py, jit/decode_varlen.py   generation 3: the varlen decode (launcher, kernels)
"""

from . import schedule, split  # noqa: F401  (pure Python: import without torch and triton)

try:
    import torch  # noqa: F401
    import triton  # noqa: F401
except ModuleNotFoundError as exc:  # the analysis environment: the pure-Python modules only
    if exc.name not in ("torch", "triton"):
        raise
    _MISSING = exc.name
else:
    _MISSING = None

if _MISSING is None:
    from .attention import attention, attention_unrotated
    from .decode import decode_block_m
    from .decode_varlen import VarlenPlan, decode_varlen, plan_decode_varlen
    from .mode import SUPPORTED_DTYPES, SUPPORTED_HEAD_DIMS, decode_split_plan, interpreted
    from .moe import compile_moe, fused_moe, reference_moe
    from .plans import Plan, plan
    from .reference import reference_attention, reference_attention_chunked, reference_rope
    from .rope import empty_kernel_launch, rope, rope_tables
    from .schedule import DEFAULT_VARIANT, ROPE_MODES, Variant
    from .tile import Tile

#: generation of the kernels that rope= selects (fused= selects generation 1); recorded with
#: the candidates so studies of different generations stay apart
GENERATION = 2
VARLEN_GENERATION = 3  # decode_varlen's family

if _MISSING is not None:

    def __getattr__(name: str):
        raise ImportError(
            f"kernels.{name} needs torch and triton ({_MISSING} is not installed: the pipeline extra); "
            "without them only kernels.split and kernels.schedule import"
        )


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
    "compile_moe",
    "decode_block_m",
    "decode_split_plan",
    "decode_varlen",
    "empty_kernel_launch",
    "fused_moe",
    "interpreted",
    "plan",
    "plan_decode_varlen",
    "reference_attention",
    "reference_attention_chunked",
    "reference_moe",
    "reference_rope",
    "rope",
    "rope_tables",
]
