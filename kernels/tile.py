"""A tile: the launch shape that distinguishes one candidate kernel from another."""

from __future__ import annotations

from dataclasses import dataclass

# Block sizes are powers of two because tl.arange needs them; 16 is the smallest M/N/K a
# tensor-core tl.dot accepts, 256 the largest block that still fits one program's registers.
_BLOCK_SIZES = (16, 32, 64, 128, 256)
_NUM_WARPS = (1, 2, 4, 8, 16)
_MAX_STAGES = 8


@dataclass(frozen=True)
class Tile:
    """(block_m, block_n, num_warps, num_stages) of the attention kernels.

    block_m: query rows per program (decode: packed query heads, capped at the packed row count)
    block_n: keys per inner-loop step
    num_warps: warps per program
    num_stages: software-pipelining depth of the key/value loads
    """

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    def __post_init__(self) -> None:
        for name in ("block_m", "block_n"):
            value = getattr(self, name)
            if type(value) is not int or value not in _BLOCK_SIZES:
                raise ValueError(f"Tile.{name} must be one of {_BLOCK_SIZES}, got {value!r}")
        if type(self.num_warps) is not int or self.num_warps not in _NUM_WARPS:
            raise ValueError(f"Tile.num_warps must be one of {_NUM_WARPS}, got {self.num_warps!r}")
        if type(self.num_stages) is not int or not 1 <= self.num_stages <= _MAX_STAGES:
            raise ValueError(f"Tile.num_stages must be an int in 1..{_MAX_STAGES}, got {self.num_stages!r}")

    @property
    def name(self) -> str:
        """Stable short id, e.g. 'm128n64w8s3'."""
        return f"m{self.block_m}n{self.block_n}w{self.num_warps}s{self.num_stages}"

    @classmethod
    def from_mapping(cls, mapping) -> Tile:
        """Build from a config mapping with exactly the four tile keys."""
        keys = {"block_m", "block_n", "num_warps", "num_stages"}
        if not hasattr(mapping, "keys") or set(mapping.keys()) != keys:
            raise ValueError(f"tile must be a mapping with keys {sorted(keys)}, got {mapping!r}")
        return cls(**{k: mapping[k] for k in keys})
