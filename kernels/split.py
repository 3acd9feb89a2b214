"""The split-KV plan of decode launches: pure Python (no torch, no triton), so the roofline and
other analysis code can compute the same plan the kernels launch without importing either.

Without splits a decode launch has B * Hkv * row-block programs; a memory-bound loop needs
several resident programs per SM to keep enough loads in flight, so the keys are split until
there are DECODE_WAVES programs per SM, but never into splits shorter than MIN_SPLIT_KEYS (below
that the reduction pass costs more than the parallelism gains). Split lengths are multiples of
SPLIT_ALIGN_KEYS = the largest block_n, so only a sequence's last block is partial. The plan
depends on the shape and the SM count only, never on the tile: every candidate gets the same one.
decode_block_m is the row-block rule the decode launchers (both generations) and the roofline use.
"""

from __future__ import annotations

#: the smallest M of a tensor-core tl.dot: decode's packed row blocks are never smaller
MIN_BLOCK_M = 16
DECODE_WAVES = 4
MIN_SPLIT_KEYS = 256
SPLIT_ALIGN_KEYS = 256


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def decode_split_plan(
    programs: int,
    kv_len: int,
    sm_count: int,
    *,
    min_split_keys: int = MIN_SPLIT_KEYS,
    align_keys: int = SPLIT_ALIGN_KEYS,
    waves: int = DECODE_WAVES,
) -> tuple[int, int]:
    """(num_splits, split_len) for a decode launch of `programs` (B * Hkv * row blocks) over
    kv_len keys on a GPU of sm_count SMs. The keyword arguments exist for the Triton
    interpreter's small shapes (kernels.attention passes 16-key splits there) and for studies
    of the heuristic; the GPU plan uses the defaults."""
    wanted = _cdiv(waves * sm_count, programs)
    most = max(1, kv_len // min_split_keys)
    splits = max(1, min(wanted, most))
    split_len = _cdiv(_cdiv(kv_len, splits), align_keys) * align_keys
    return _cdiv(kv_len, split_len), split_len


def decode_block_m(block_m: int, rows: int) -> int:
    """Decode packs the group * Sq rows sharing a KV head along M; a tile's block_m is capped at
    that count rounded up to a power of two (at least MIN_BLOCK_M) so no program computes empty
    rows."""
    return min(block_m, max(MIN_BLOCK_M, 1 << max(0, rows - 1).bit_length()))
