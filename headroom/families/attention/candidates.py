"""Candidates: every tile crossed with every fusion setting, plus optional native backends.

A candidate id names what it is: 't0-128x64-w8s3-fused' is tile 0 with RoPE fused into the
attention kernel; 'native-sdpa-cudnn' is PyTorch's cuDNN SDPA backend after our standalone RoPE
kernel, 'native-flex' PyTorch's FlexAttention after the same kernel. headroom/families/attention/runner.py
turns a candidate row into the callable every stage checks and times.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from headroom.core import contracts

COLUMNS = list(contracts.CANDIDATES.names)
#: RoPE placements (kernels.ROPE_MODES): `fused` in the artifact is True when RoPE runs inside the
#: attention kernel (fused, q_fused), which is what the policies' fusion arms split on.
ROPE_PLACEMENTS = ("unfused", "fused", "q_fused")
GENERATION_1_PLACEMENTS = ("unfused", "fused")
#: native backends, RoPE applied by the same standalone Triton kernel the unfused candidates use:
#: PyTorch SDPA with one backend forced (enable_gqa=True), and `flex`, PyTorch's FlexAttention
#: (torch.compile'd once per process, causal block mask). `math` is PyTorch's reference SDPA:
#: slow, but it runs anywhere (tests use it on the CPU).
SDPA_BACKENDS = ("cudnn", "flash", "efficient", "math")
#: and FlashInfer's wrappers as vLLM (paged) and SGLang (ragged) use them
#: (headroom.families.attention.flashinfer, which imports FlashInfer only when a candidate runs)
FLASHINFER_BACKENDS = ("flashinfer-paged", "flashinfer-ragged")
NATIVE_BACKENDS = (*SDPA_BACKENDS, "flex", *FLASHINFER_BACKENDS)
NATIVE_TILE = -1  # native candidates have no tile of ours
#: the variable-length decode family (kernels.decode_varlen, kernels.VARLEN_GENERATION): one
#: candidate per tile, q rotated in the kernel over a rotated cache (placement q_fused), on decode
#: rows with kv_lens; on every other row generation 2's q_fused plan of the tile
#: (headroom.families.attention.runner)
VARLEN_GENERATION = 3
VARLEN_PLACEMENT = "q_fused"


def candidate_id(tile: int, t: dict[str, int], rope: str) -> str:
    """e.g. 't0-128x64-w8s3-fused': readable in SQL and in the report."""
    return f"t{tile}-{t['block_m']}x{t['block_n']}-w{t['num_warps']}s{t['num_stages']}-{rope}"


def _native_row(name: str, generation: int) -> dict[str, Any]:
    if name not in NATIVE_BACKENDS:
        raise ValueError(f"native_candidates: {name!r} is not one of {', '.join(NATIVE_BACKENDS)}")
    backend = name if name in ("flex", *FLASHINFER_BACKENDS) else f"sdpa-{name}"
    return {
        "candidate": f"native-{backend}",
        "tile": NATIVE_TILE,
        "block_m": 0,
        "block_n": 0,
        "num_warps": 0,
        "num_stages": 0,
        "fused": False,
        "backend": backend,
        "rope": "unfused",  # our standalone kernel, then the native attention
        "generation": generation,
    }


def build(
    tiles: Sequence[dict[str, Any]],
    rope: Sequence[str],
    native: Sequence[str] = (),
    generation: int = 2,
    varlen: bool = False,
) -> pd.DataFrame:
    """Every tile crossed with every RoPE placement, then the native candidates. Generation 1 is
    the first studies' kernels (placements unfused and fused only). varlen: add the varlen decode
    family (generation 3), one candidate per tile, id 't{i}-...-varlen'."""
    if not tiles:
        raise ValueError("tiles: at least one tile is needed")
    if not rope:
        raise ValueError(f"rope: at least one of {', '.join(ROPE_PLACEMENTS)} is needed")
    if generation not in (1, 2):
        raise ValueError(f"generation: {generation!r} is not 1 or 2")
    allowed = GENERATION_1_PLACEMENTS if generation == 1 else ROPE_PLACEMENTS
    for r in rope:
        if r not in allowed:
            raise ValueError(f"rope: {r!r} is not a generation-{generation} placement ({', '.join(allowed)})")
    rows = []
    for i, t in enumerate(tiles):
        for r in rope:
            rows.append(
                {
                    "candidate": candidate_id(i, t, r),
                    "tile": i,
                    "block_m": int(t["block_m"]),
                    "block_n": int(t["block_n"]),
                    "num_warps": int(t["num_warps"]),
                    "num_stages": int(t["num_stages"]),
                    "fused": r != "unfused",
                    "backend": "triton",
                    "rope": r,
                    "generation": int(generation),
                }
            )
    if type(varlen) is not bool:
        raise ValueError(f"varlen: must be true or false, got {varlen!r}")
    if varlen:
        rows += [_varlen_row(i, t) for i, t in enumerate(tiles)]
    rows += [_native_row(name, generation) for name in native]
    return pd.DataFrame(rows, columns=COLUMNS)


def _varlen_row(i: int, t: dict[str, Any]) -> dict[str, Any]:
    return {
        "candidate": candidate_id(i, t, "varlen"),
        "tile": i,
        **{key: int(t[key]) for key in ("block_m", "block_n", "num_warps", "num_stages")},
        "fused": True,  # RoPE (of q) inside the attention kernel: the policies' fusion arm 'on'
        "backend": "triton",
        "rope": VARLEN_PLACEMENT,
        "generation": VARLEN_GENERATION,
    }


def placement(cand: Any) -> tuple[str, int]:
    """(rope placement, generation) of a candidate row; artifacts recorded before generation 2
    have neither column: they are generation 1, placement from `fused`."""
    generation = getattr(cand, "generation", None)
    generation = 1 if generation is None or pd.isna(generation) else int(generation)
    rope = getattr(cand, "rope", None)
    if rope is None or (not isinstance(rope, str) and pd.isna(rope)):
        rope = "fused" if bool(cand.fused) else "unfused"
    return str(rope), generation
