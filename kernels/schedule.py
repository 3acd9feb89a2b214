"""Which kernels one run of a candidate launches, in which order, with which switches: pure Python
(no torch, no triton), so the roofline counts the launches kernels.plan builds without importing
either. plans.py builds a plan's launches from rotation() and the decode launcher adds its
reduction launch by separate_reduce(); launch_sequence() is the same rules as a list of steps.

A candidate is (tile, rope placement) plus its generation:
  generation 1 (fused=True/False): the recorded kernels, placements 'fused' and 'unfused';
  generation 2 (rope=...): placements ROPE_MODES, kernel switches Variant (DEFAULT_VARIANT).
"""

from __future__ import annotations

from dataclasses import dataclass

# RoPE placements (the candidate's `rope`): where q and k are rotated.
#   "unfused": the standalone RoPE kernel writes rotated q (and k when rotate_k), then attention;
#   "fused":   attention rotates q, and k when rotate_k, as tiles load (one launch; k is
#              re-rotated by every query block that visits it);
#   "q_fused": k is rotated once by the standalone kernel (as a KV-cache write does), q inside
#              attention. With rotate_k=False (decode over a rotated cache) it is "fused".
ROPE_MODES = ("unfused", "fused", "q_fused")
GENERATION_1_MODES = ("unfused", "fused")
#: the steps of a run, in the order they launch
ROPE_Q, ROPE_K, PREFILL, DECODE, REDUCE = "rope_q", "rope_k", "prefill", "decode", "reduce"


@dataclass(frozen=True)
class Variant:
    """Switches of the generation-2 kernels; each measured in BENCHMARKS.md.

    tma: K/V tiles through TMA tensor descriptors (needs unit last stride, 16-byte aligned
        base and strides; otherwise the plan falls back to pointer loads and says so)
    warp_specialize: ask Triton for producer/consumer warp specialisation of the key loops
    pack_gqa: one program serves every query head of a KV group (K/V tile loaded once per group)
    (those three switch the prefill kernel, kernels/jit/prefill.py)
    decode_reduce_in_kernel: split-KV decode merges its splits in the last split program of
        each row block (one launch) instead of a second, reduction launch (kernels/jit/decode.py)
    """

    tma: bool = False
    warp_specialize: bool = False
    pack_gqa: bool = False
    decode_reduce_in_kernel: bool = True

    @property
    def name(self) -> str:
        switches = (("tma", self.tma), ("ws", self.warp_specialize), ("pack", self.pack_gqa))
        parts = [n for n, on in switches if on] + ([] if self.decode_reduce_in_kernel else ["2launch"])
        return "+".join(parts) or "ptr"


#: the variant generation-2 candidates use unless a caller names another, chosen from the H200
#: run in BENCHMARKS.md: TMA loads were fastest or within 2% for the best q_fused candidate on
#: 3 of the 4 prefill shapes; the in-kernel decode merge saves one launch of host time (15 vs
#: 22 us) but its serial merge made graph-replayed decode slower (B1 Skv8192: 18.8 vs 11.4 us)
DEFAULT_VARIANT = Variant(tma=True, decode_reduce_in_kernel=False)


def rope_mode(rope: str | None, fused: bool | None) -> tuple[str, int]:
    """(rope placement, kernel generation) from the two ways of naming a candidate's RoPE:
    fused=True/False (generation 1: the recorded kernels) or rope='unfused'|'fused'|'q_fused'
    (generation 2). Exactly one must be given."""
    if (rope is None) == (fused is None):
        raise ValueError(
            "give exactly one of fused= (bool: generation-1 kernels) or rope= "
            f"(one of {ROPE_MODES}: generation-2 kernels); got fused={fused!r}, rope={rope!r}"
        )
    if fused is not None:
        if type(fused) is not bool:
            raise ValueError(f"fused must be a bool, got {fused!r}")
        return ("fused" if fused else "unfused"), 1
    if rope not in ROPE_MODES:
        raise ValueError(f"rope must be one of {ROPE_MODES}, got {rope!r}")
    return rope, 2


@dataclass(frozen=True)
class Rotation:
    """Where a placement rotates: `standalone` names the tensors ('q', 'k') the standalone RoPE
    kernel rotates first, in launch order; rotate_q / rotate_k: the attention kernel rotates q / k
    as its tiles load."""

    standalone: tuple[str, ...]
    rotate_q: bool
    rotate_k: bool


def rotation(rope: str, rotate_k: bool) -> Rotation:
    """The rotations of placement `rope` (ROPE_MODES) when k is un-rotated (rotate_k) or not."""
    if rope not in ROPE_MODES:
        raise ValueError(f"rope must be one of {ROPE_MODES}, got {rope!r}")
    if rope == "unfused":
        return Rotation(("q", "k") if rotate_k else ("q",), False, False)
    if rope == "q_fused" and rotate_k:
        return Rotation(("k",), True, False)
    return Rotation((), True, rotate_k)


def attention_step(q_len: int) -> str:
    """PREFILL or DECODE: Sq == 1 takes the split-KV decode kernel, Sq > 1 the prefill kernel."""
    return DECODE if q_len == 1 else PREFILL


def reduce_in_kernel(num_splits: int, variant: Variant | None) -> bool:
    """Decode merges its splits in the decode kernel: generation 2 (a Variant) asking for it, and
    more than one split to merge. Generation 1 (variant None) always launches the reduction."""
    return num_splits > 1 and variant is not None and variant.decode_reduce_in_kernel


def separate_reduce(num_splits: int, in_kernel: bool) -> bool:
    """Decode launches the reduction kernel after the decode kernel: splits merged outside it."""
    return num_splits > 1 and not in_kernel


def launch_sequence(
    rope: str, generation: int, *, rotate_k: bool, q_len: int, num_splits: int, variant: Variant | None = None
) -> tuple[str, ...]:
    """The steps one run launches, in order, e.g. ('rope_q', 'rope_k', 'prefill') for an unfused
    prefill candidate. num_splits: the decode split plan's (1 for prefill; see split.py);
    variant: generation 2's switches (DEFAULT_VARIANT when None), ignored for generation 1.
    Generation 3 (the varlen decode family) launches generation 2's sequence: it runs generation 2's
    plans on rows without kv_lens; on a ragged decode its split launches a separate merge kernel
    (kernels/decode_varlen.py), which this sequence does not model (the roofline has no kv_lens)."""
    if generation not in (1, 2, 3):
        raise ValueError(f"generation must be 1, 2 or 3, got {generation!r}")
    if generation == 3:
        if rope != "q_fused":
            raise ValueError(f"generation 3 has placement q_fused only, got {rope!r}")
        generation = 2
    if generation == 1 and rope not in GENERATION_1_MODES:
        raise ValueError(f"generation 1 has placements {GENERATION_1_MODES}, got {rope!r}")
    if generation == 2:
        variant = DEFAULT_VARIANT if variant is None else variant
    else:
        variant = None
    steps = tuple(ROPE_Q if name == "q" else ROPE_K for name in rotation(rope, rotate_k).standalone)
    step = attention_step(q_len)
    steps += (step,)
    if step == DECODE and separate_reduce(num_splits, reduce_in_kernel(num_splits, variant)):
        steps += (REDUCE,)
    return steps
