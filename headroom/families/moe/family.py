"""Fused MoE as a family: one projection of a Mixture-of-Experts layer (kernels/moe.py's grouped
GEMM) on every engine step's tokens, the candidates a per-M config table chooses among.

The question it answers is the one serving stacks settle with per-(experts, N, GPU) JSON tables
keyed by the token count M: does choosing the config per M pay over the best single config, net of
the switch and the compiles, in eager and graph modes?

- ``shapes(step)``: one call per engine step; M = the step's tokens (its decodes plus its prefill
  chunks; in the unchunked engine a prefill at arrival is a step whose M is its prompt). ``tokens``
  is capture-fixed and padded to the capture sizes up to ``capture_limit`` (vLLM captures graphs up
  to 512 tokens): what a graph-mode server bakes per captured size.
- ``inputs``: the layer's weights (one seeded draw per family and device, shared by every shape, as a
  model's are), the step's hidden states, and its routing drawn from the router distribution
  (``uniform``, or ``skewed``: expert popularity falling as rank^-skew), a fresh draw per input set,
  so expert loads vary as they do in serving.
- ``prepare``: the routing alignment runs inside the timed function on every call (it depends on
  the routing, which changes every forward), as servers run it; nothing is hoisted.
- ``candidates``: the configs of the family's table (a tuned table in the ecosystem's JSON format,
  ``headroom tune``'s or a user's), the best single config and the serving stacks' default for an
  untuned shape (space.default_config), plus the native ``torch._grouped_mm`` (PyTorch's grouped
  GEMM: tokens gathered by expert, one grouped matmul, scattered back).
- ``config_table``: the table itself, scored as a policy (nearest-M lookup, as servers do).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from headroom.families.contract import Candidate, Feature
from headroom.families.moe import space
from headroom.families.tables import ConfigTable, config_id, from_config_table

NAME = "moe"
#: Bump when the kernel or the native compute something else.
VERSION = "1"
NATIVE = "torch-grouped-mm"
ROUTINGS = ("uniform", "skewed")
#: Token counts vLLM captures CUDA graphs for, up to its default limit of 512.
CAPTURE_SIZES = (1, 2, 4, *range(8, 513, 8))
TABLES = Path(__file__).resolve().parent / "tables"
PROJECT_ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Layer:
    """One MoE projection: ``experts`` experts, ``top_k`` per token, hidden size ``hidden`` (K) and
    ``n`` output features per expert (the gate-up projection: 2 x the expert intermediate size)."""

    experts: int
    top_k: int
    hidden: int
    n: int
    dtype: str

    @property
    def elem_bytes(self) -> int:
        return 4 if self.dtype == "float32" else 2

    def table_name(self, device_name: str) -> str:
        """The ecosystem's file name for this layer's table on ``device_name``."""
        return f"E={self.experts},N={self.n},device_name={device_name.replace(' ', '_')}.json"


class MoEFamily:
    """A MoE projection as a headroom family (module docstring). ``table``: a JSON config table
    (None: the default configs only); ``single``: the best single config (headroom tune writes it
    beside the table); ``routing``/``skew``: the router distribution; ``capture_limit``: the
    largest token count a server captures graphs for."""

    name = NAME
    version = VERSION
    # Deployed, a step's MoE call replays a CUDA graph when its token count is at most the capture
    # limit (vLLM's piecewise graphs hold the MoE layer of decode and mixed steps alike), else eager
    captured_by = "tokens"

    def __init__(self, layer: Layer, *, table=None, single: dict | None = None, routing="uniform",
                 skew: float = 1.2, capture_limit: int = 512, native: bool = True):  # fmt: skip
        if routing not in ROUTINGS:
            raise ValueError(f"routing must be one of {ROUTINGS}, got {routing!r}")
        self.layer, self.routing, self.skew, self.native = layer, routing, float(skew), native
        self.config_table: ConfigTable | None = None if table is None else _read_table(table)
        pads = [c for c in CAPTURE_SIZES if c <= capture_limit]
        self.features = {
            "tokens": Feature("int", capture_fixed=True, pad_to=pads, min=1),
            "dtype": Feature("category", capture_fixed=True),
        }
        self._configs = _portfolio(layer, self.config_table, single)
        self._weights: dict[str, torch.Tensor] = {}

    def shapes(self, step) -> list[dict]:
        ly = self.layer
        return [{"tokens": int(step.tokens), "dtype": ly.dtype, "experts": ly.experts, "top_k": ly.top_k,
                 "hidden": ly.hidden, "n": ly.n, "routing": self.routing}]  # fmt: skip

    def candidates(self) -> list[Candidate]:
        out = [Candidate(cid, dict(cfg)) for cid, cfg in self._configs.items()]
        return out + [Candidate(NATIVE, {"native": "torch._grouped_mm"})] if self.native else out

    def supports(self, candidate, shape) -> bool:
        if candidate.id != NATIVE:
            return True
        # sm90's grouped GEMM takes bfloat16 with 16-aligned K and N; the CPU build (the framework
        # runs a family there under TRITON_INTERPRET=1) takes any float dtype
        on_cpu = os.environ.get("TRITON_INTERPRET") == "1"
        aligned = shape["hidden"] % 16 == 0 and shape["n"] % 16 == 0
        return hasattr(torch, "_grouped_mm") and (on_cpu or (shape["dtype"] == "bfloat16" and aligned))

    def inputs(self, shape, *, seed: int, device: str) -> dict:
        m, ly = shape["tokens"], self.layer
        dt = getattr(torch, ly.dtype)
        g = torch.Generator().manual_seed(seed)
        a = torch.randn(m, ly.hidden, generator=g).to(device=device, dtype=dt)
        ids = route(m, ly.experts, ly.top_k, self.routing, self.skew, g).to(device=device, dtype=torch.int32)
        out = torch.full((m * ly.top_k, ly.n), float("nan"), dtype=dt, device=device)
        return {"a": a, "w": self.weights(device), "ids": ids, "out": out}

    def weights(self, device: str) -> torch.Tensor:
        """The layer's [E, N, K] weights on ``device``, N(0, 1/K) so outputs are of order 1; drawn
        once per device and process (seed 0), as a model's weights are fixed, by the device's own
        generator: QWEN3's 402M draws took 13.9 s from the CPU's on a 2-core host, and every
        portfolio run, the correctness stage and each lifecycle cold-compile child draws them."""
        if device not in self._weights:
            ly = self.layer
            g = torch.Generator(device=device).manual_seed(0)
            w = torch.randn(ly.experts, ly.n, ly.hidden, generator=g, device=device) / math.sqrt(ly.hidden)
            self._weights[device] = w.to(dtype=getattr(torch, ly.dtype))
        return self._weights[device]

    def prepare(self, candidate, shape, inputs):
        if candidate.id == NATIVE:
            return _native(self.layer.experts)
        from kernels import fused_moe

        config = self._configs[candidate.id]

        def fn(inp):
            return fused_moe(inp["a"], inp["w"], inp["ids"], config=config, out=inp["out"], check_ids=False)

        return fn

    def reference(self, shape, inputs):
        from kernels import reference_moe

        return reference_moe(inputs["a"], inputs["w"], inputs["ids"])

    def tolerance(self, dtype: str) -> tuple[float, float]:
        # one rounding of order-1 outputs to the dtype after a float32 accumulation
        return {"float32": (1e-5, 1e-4), "float16": (2e-3, 1e-2), "bfloat16": (1e-2, 6e-2)}[dtype]

    def cost(self, shape) -> dict:
        """Useful FLOPs of the projection; compulsory bytes: the experts the routing touches
        (expected under uniform routing, E (1 - (1 - k/E)^M)), the tokens read and the slots written."""
        m, ly = shape["tokens"], self.layer
        slots = m * ly.top_k
        touched = ly.experts * (1.0 - (1.0 - ly.top_k / ly.experts) ** m)
        elems = touched * ly.n * ly.hidden + m * ly.hidden + slots * ly.n
        return {"flops": 2.0 * slots * ly.n * ly.hidden, "bytes": float(elems * ly.elem_bytes + slots * 4)}


def route(m: int, experts: int, top_k: int, routing: str, skew: float, g: torch.Generator) -> torch.Tensor:
    """[m, top_k] int64 expert ids, distinct per token as a router's top-k: uniform, or ``skewed``:
    expert popularity proportional to rank^-skew over a fixed random order of the experts."""
    probs = torch.ones(experts)
    if routing == "skewed":
        order = torch.randperm(experts, generator=torch.Generator().manual_seed(1))
        probs = torch.empty(experts).scatter_(
            0, order, torch.arange(1, experts + 1).double().pow(-skew).float()
        )
    return torch.multinomial(probs.expand(m, experts), top_k, replacement=False, generator=g)


def _native(experts: int):
    """PyTorch's grouped GEMM over the routed slots: sort by expert, gather the tokens, one
    ``torch._grouped_mm`` with the experts' offsets, scatter the rows back to their slots. No host
    sync (graph-capturable)."""

    def fn(inp):
        ids, a, w, out = inp["ids"], inp["a"], inp["w"], inp["out"]
        flat = ids.reshape(-1).long()
        order = torch.argsort(flat, stable=True)
        counts = torch.zeros(experts, dtype=torch.int64, device=flat.device).scatter_add_(
            0, flat, torch.ones_like(flat)
        )
        offs = counts.cumsum(0).to(torch.int32)
        rows = a.index_select(0, order // ids.shape[1])
        out.index_copy_(0, order, torch._grouped_mm(rows, w.transpose(-2, -1), offs=offs))
        return out

    return fn


def _read_table(path) -> ConfigTable:
    """The table at ``path``, its source recorded relative to the project when it lies in it (so
    the provenance of a study is the same on every machine)."""
    table = from_config_table(path)
    here = Path(path).resolve()
    if here.is_relative_to(PROJECT_ROOT):
        table = dataclasses.replace(table, source=str(here.relative_to(PROJECT_ROOT)))
    return table


def _portfolio(layer: Layer, table: ConfigTable | None, single: dict | None) -> dict[str, dict]:
    """{candidate id: config}: the table's distinct configs, the best single config, the default
    configs of an untuned shape; at most space.MAX_PORTFOLIO."""
    found: dict[str, dict] = {}
    chosen = [] if table is None else [dict(c) for _, c in table.configs]
    defaults = [
        space.default_config(1, layer.experts),
        space.default_config(layer.experts + 1, layer.experts),
    ]
    for config in [*chosen, *([single] if single else []), *defaults]:
        found.setdefault(config_id(config), dict(config))
    if len(found) > space.MAX_PORTFOLIO:
        raise ValueError(
            f"moe: {len(found)} distinct configs (table, single, defaults) exceed the portfolio's "
            f"{space.MAX_PORTFOLIO}"
        )
    return found


def tuned(layer: Layer, device_name: str, **kwargs) -> MoEFamily:
    """The family with ``headroom tune``'s table for ``layer`` on ``device_name`` from TABLES (and
    its best single config, ``<table>.single.json``), or with the default configs only when no
    table was committed for it."""
    import json

    path = TABLES / layer.table_name(device_name)
    if not path.exists():
        return MoEFamily(layer, **kwargs)
    single_path = path.with_suffix(".single.json")
    single = json.loads(single_path.read_text()) if single_path.exists() else None
    return MoEFamily(layer, table=path, single=single, **kwargs)


#: A Qwen3-MoE-like layer (Qwen3-30B-A3B: 128 experts, top-8, hidden 2048, expert intermediate
#: 768): its gate-up projection, N = 2 x 768, bfloat16, with its tuned H200 table.
QWEN3 = tuned(Layer(experts=128, top_k=8, hidden=2048, n=1536, dtype="bfloat16"), "NVIDIA H200")
#: A Mixtral-like layer (8 experts, top-2, hidden 4096, intermediate 14336): gate-up, N = 28672.
MIXTRAL = tuned(Layer(experts=8, top_k=2, hidden=4096, n=28672, dtype="bfloat16"), "NVIDIA H200")
#: A small float16 layer for the CPU interpreter (its bfloat16 tl.dot is wrong).
SMOKE = MoEFamily(Layer(experts=8, top_k=2, hidden=64, n=64, dtype="float16"), table=TABLES / "smoke.json")
