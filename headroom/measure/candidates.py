"""Candidates: every tile crossed with every fusion setting, plus optional native backends.

A candidate id names what it is: 't0-128x64-w8s3-fused' is tile 0 with RoPE fused into the
attention kernel; 'native-sdpa-cudnn' is PyTorch's cuDNN SDPA backend after our standalone RoPE
kernel. headroom/measure/runner.py turns a candidate row into the callable every stage checks and times.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from headroom.core import contracts

COLUMNS = list(contracts.CANDIDATES.names)
#: native backends: PyTorch SDPA with one backend forced (enable_gqa=True), RoPE applied by the
#: same standalone Triton kernel the unfused candidates use. `math` is PyTorch's reference
#: implementation: slow, but it runs anywhere (tests use it on the CPU).
NATIVE_BACKENDS = ("cudnn", "flash", "efficient", "math")
NATIVE_TILE = -1  # native candidates have no tile of ours


def candidate_id(tile: int, t: dict[str, int], fused: bool) -> str:
    """e.g. 't0-128x64-w8s3-fused': readable in SQL and in the report."""
    return (
        f"t{tile}-{t['block_m']}x{t['block_n']}-w{t['num_warps']}s{t['num_stages']}-"
        f"{'fused' if fused else 'unfused'}"
    )


def build(
    tiles: Sequence[dict[str, Any]], fusion: Sequence[bool], native: Sequence[str] = ()
) -> pd.DataFrame:
    if not tiles:
        raise ValueError("tiles: at least one tile is needed")
    if not fusion:
        raise ValueError("fusion: at least one of false/true is needed")
    rows = []
    for i, t in enumerate(tiles):
        for fused in fusion:
            rows.append(
                {
                    "candidate": candidate_id(i, t, bool(fused)),
                    "tile": i,
                    "block_m": int(t["block_m"]),
                    "block_n": int(t["block_n"]),
                    "num_warps": int(t["num_warps"]),
                    "num_stages": int(t["num_stages"]),
                    "fused": bool(fused),
                    "backend": "triton",
                }
            )
    for name in native:
        if name not in NATIVE_BACKENDS:
            raise ValueError(f"native_candidates: {name!r} is not one of {', '.join(NATIVE_BACKENDS)}")
        rows.append(
            {
                "candidate": f"native-sdpa-{name}",
                "tile": NATIVE_TILE,
                "block_m": 0,
                "block_n": 0,
                "num_warps": 0,
                "num_stages": 0,
                "fused": False,
                "backend": f"sdpa-{name}",
            }
        )
    return pd.DataFrame(rows, columns=COLUMNS)
