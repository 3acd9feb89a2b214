"""Candidates: every tile crossed with every fusion setting. A candidate id names both."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

COLUMNS = ["candidate", "tile", "block_m", "block_n", "num_warps", "num_stages", "fused"]


def candidate_id(tile: int, t: dict[str, int], fused: bool) -> str:
    """e.g. 't0-128x64-w8s3-fused': readable in SQL and in the report."""
    return (
        f"t{tile}-{t['block_m']}x{t['block_n']}-w{t['num_warps']}s{t['num_stages']}-"
        f"{'fused' if fused else 'unfused'}"
    )


def build(tiles: Sequence[dict[str, Any]], fusion: Sequence[bool]) -> pd.DataFrame:
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
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS)
