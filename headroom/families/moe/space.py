"""The fused-MoE config space the tuner searches, the token counts it tunes, and the serving stacks'
default config for an untuned shape: pure Python, no torch.

The grid is the one vLLM's and SGLang's tuning scripts search (BLOCK_SIZE_M 16-256, BLOCK_SIZE_N
32-256, BLOCK_SIZE_K 64-256, GROUP_SIZE_M 1-64, 4 or 8 warps, 2-5 stages: 1,920 configs) narrowed
to the values their shipped H100/H200 tables mostly pick, so that a tune stays under 8 minutes on
one H200: BLOCK_SIZE_M 16-128, BLOCK_SIZE_N 64-256, BLOCK_SIZE_K 64 or 128, GROUP_SIZE_M 1 or 16,
4 or 8 warps, 3 or 4 stages (192 configs), then pruned by shared memory (a config whose pipelined
tiles do not fit cannot launch).
"""

from __future__ import annotations

from itertools import product

#: The grid: each key's values, in the ecosystem's key order.
GRID = {
    "BLOCK_SIZE_M": (16, 32, 64, 128),
    "BLOCK_SIZE_N": (64, 128, 256),
    "BLOCK_SIZE_K": (64, 128),
    "GROUP_SIZE_M": (1, 16),
    "num_warps": (4, 8),
    "num_stages": (3, 4),
}
#: Shared memory per block on sm90 (H100/H200): 227 KiB.
SMEM_BYTES = 227 * 1024
#: The token counts the ecosystem's tuning scripts tune and its tables are keyed by.
STANDARD_M = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096)
#: At most this many configs in a study's portfolio (the tuner's distinct winners plus the best
#: single config).
MAX_PORTFOLIO = 24


def smem_bytes(config: dict, elem_bytes: int) -> int:
    """Shared memory of a config's pipelined A and W tiles: stages x (M x K + K x N) elements."""
    m, n, k = config["BLOCK_SIZE_M"], config["BLOCK_SIZE_N"], config["BLOCK_SIZE_K"]
    return config["num_stages"] * (m * k + k * n) * elem_bytes


def configs(elem_bytes: int = 2, smem: int = SMEM_BYTES) -> list[dict]:
    """The grid's configs that fit in ``smem`` bytes of shared memory, in grid order."""
    keys = tuple(GRID)
    every = (dict(zip(keys, values, strict=True)) for values in product(*GRID.values()))
    return [c for c in every if smem_bytes(c, elem_bytes) <= smem]


def default_config(m: int, experts: int) -> dict:
    """The config a serving stack runs for a shape its tables lack (vLLM's fallback heuristic for
    16-bit weights): small tiles while each expert sees about one token, 64x64 tiles above."""
    if m <= experts:
        return {"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 64, "GROUP_SIZE_M": 1,
                "num_warps": 4, "num_stages": 3}  # fmt: skip
    return {"BLOCK_SIZE_M": 64, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 8,
            "num_warps": 4, "num_stages": 3}  # fmt: skip
