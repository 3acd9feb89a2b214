"""A chosen candidate (``headroom.dispatch``'s ``choose``, or any mapping with its fields) as a
``kernels.plan``, and run.

    from kernels import deploy
    p = deploy.plan_for(candidate, q, k, v, cos, sin, rotate_k=True)   # checks, compiles
    out = p.run(q, k, v, cos, sin)                                       # or deploy.run(...)

A candidate carries block_m, block_n, num_warps, num_stages (its ``Tile``), its generation, its RoPE
placement (generation 2 and later: ``rope=``) or fused flag (generation 1: ``fused=``, the recorded
kernels) and its backend. Only this package's kernels (backend 'triton') have a plan; a native
candidate (a torch SDPA backend, FlexAttention) is refused with the reason: a server runs those
through torch.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

from . import Plan, Tile, plan  # the package's public API only

TILE_FIELDS = ("block_m", "block_n", "num_warps", "num_stages")


def _get(candidate, name: str):
    if isinstance(candidate, Mapping):
        return candidate.get(name)
    return getattr(candidate, name, None)


def tile_of(candidate) -> Tile:
    """The candidate's launch shape; ValueError naming a missing field."""
    values = {f: _get(candidate, f) for f in TILE_FIELDS}
    missing = [f for f, v in values.items() if v is None]
    if missing:
        raise ValueError(f"candidate {_get(candidate, 'id')!r}: no {missing} (not one of our kernels?)")
    return Tile(**{f: int(v) for f, v in values.items()})


def plan_for(candidate, q, k, v, cos, sin, *, rotate_k: bool, out: torch.Tensor | None = None) -> Plan:
    """``kernels.plan`` of the candidate for tensors like these (shapes as in ``kernels.plan``)."""
    cid, backend = _get(candidate, "id") or _get(candidate, "candidate"), _get(candidate, "backend")
    if backend not in (None, "triton"):
        raise ValueError(
            f"candidate {cid!r} is a native {backend!r} kernel: run it through torch, not kernels.plan"
        )
    generation = int(_get(candidate, "generation") or 1)
    if generation == 1:
        fused = _get(candidate, "fused")
        if fused is None:
            raise ValueError(f"candidate {cid!r}: generation 1 needs its fused flag")
        return plan(q, k, v, cos, sin, tile=tile_of(candidate), rotate_k=rotate_k, fused=bool(fused), out=out)
    rope = _get(candidate, "rope")
    if rope is None:
        raise ValueError(f"candidate {cid!r}: generation {generation} needs its RoPE placement (rope)")
    return plan(q, k, v, cos, sin, tile=tile_of(candidate), rotate_k=rotate_k, rope=str(rope), out=out)


def run(candidate, q, k, v, cos, sin, *, rotate_k: bool, out: torch.Tensor | None = None) -> torch.Tensor:
    """Plan the candidate for these tensors and run it once; returns the output."""
    return plan_for(candidate, q, k, v, cos, sin, rotate_k=rotate_k, out=out).run(q, k, v, cos, sin, out=out)
