"""The prefix-cache model: how many prompt tokens of each request a serving engine's prefix cache
already holds when the request arrives.

A request log with `hash_ids` (trace.columns.hash_ids) names each prompt's prefix blocks: hash i
covers prompt tokens [i * block_tokens, (i + 1) * block_tokens), and equal hashes are reusable
KV-cache blocks (the hashes chain, so equal ids mean equal prefixes). The model, in full:

- One cache of `capacity` blocks, least recently used evicted first, filled from the log's first
  request: the requests before the trace's window warm it.
- At each arrival, in log order: the cached prefix is the longest run of the prompt's leading
  blocks that are in the cache; the request then touches all its blocks (the hits become the most
  recently used, the misses are inserted, evicting the least recently used while over capacity).
- Cached tokens = min(hit blocks x block_tokens, context - 1): at least one prompt token is always
  computed (the one whose logits give the first output token), as in vLLM.

Not modelled (stated simplifications): blocks of running requests are pinned in a real engine
(here any block may be evicted); a block is cached from its request's arrival, not from when its
prefill computed it; the cache shares memory with running sequences' KV in a real engine (here
capacity is fixed).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from headroom.core.contracts import dtype_bytes


def kv_bytes_per_token(partition: dict[str, Any], layers: int) -> int:
    """K and V of one token across all layers: 2 x heads_kv x head_dim x dtype bytes x layers."""
    try:
        item = dtype_bytes(str(partition["dtype"]))
    except ValueError as e:
        raise ValueError(f"config key 'partition.dtype': {e}") from None
    return 2 * int(partition["heads_kv"]) * int(partition["head_dim"]) * item * int(layers)


def capacity_blocks(cache_cfg: dict[str, Any], partition: dict[str, Any]) -> int:
    """trace.prefix_cache.capacity_blocks, or (null) the KV budget over the bytes of one block."""
    if cache_cfg["capacity_blocks"] is not None:
        return int(cache_cfg["capacity_blocks"])
    per_block = kv_bytes_per_token(partition, cache_cfg["layers"]) * int(cache_cfg["block_tokens"])
    blocks = int(cache_cfg["kv_budget_gb"] * 1e9 // per_block)
    if blocks < 1:
        raise ValueError(
            f"config key 'trace.prefix_cache.kv_budget_gb': {cache_cfg['kv_budget_gb']!r} GB holds no block "
            f"of {cache_cfg['block_tokens']} tokens ({per_block:,} bytes); raise it or set capacity_blocks"
        )
    return blocks


def cached_tokens(
    blocks: np.ndarray, block_start: np.ndarray, context: np.ndarray, block_tokens: int, capacity: int | None
) -> np.ndarray:
    """Per request (log order), the prompt tokens the cache serves at its arrival (int64, < context).
    capacity None: an unbounded cache (nothing is ever evicted)."""
    cache: OrderedDict[int, None] = OrderedDict()
    out = np.zeros(len(context), np.int64)
    ids = blocks.tolist()
    for r in range(len(context)):
        mine = ids[block_start[r] : block_start[r + 1]]
        hits = 0
        while hits < len(mine) and mine[hits] in cache:
            hits += 1
        for block in mine:
            cache[block] = None
            cache.move_to_end(block)
        while capacity is not None and len(cache) > capacity:
            cache.popitem(last=False)
        out[r] = min(hits * block_tokens, int(context[r]) - 1)
    return out


def hit_rate(cached: np.ndarray, context: np.ndarray) -> float:
    """Share of prompt tokens served from the cache (0 for no tokens)."""
    total = int(np.sum(context))
    return float(np.sum(cached)) / total if total else 0.0
