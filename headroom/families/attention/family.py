"""Attention as a family (issue 32): the built-in candidates, the engine's calls and the float64
reference behind the ``headroom.families.Family`` protocol.

``ATTENTION`` is the default study's attention (config/config.yaml: its partition, tiles, RoPE
placements, natives and generation); ``AttentionFamily.from_config(study)`` is any study's. Every
member answers with the code the attention stages run, not a second copy of it:

- ``shapes(step)``: one prefill call per prefill chunk (batch 1, q_len new tokens over kv_len) and one
  decode call per step with decoding sequences (batch = their number, kv_len = the longest, as the
  trace's ``kv_summary: max``; with ``per_sequence`` the shape carries every length, comma-joined, in
  ``kv_lens``). Over a trace window's steps these are the trace engine's invocations, in order
  (tests/families/test_attention_family.py holds them to it).
- ``candidates()``: the candidates table (headroom.families.attention.candidates), each row's
  columns as the candidate's params.
- ``inputs``/``reference``/``tolerance``: the correctness gate's random q, k, v and RoPE tables, its
  float64 reference and the study's tolerances.
- ``prepare``: the runner every attention stage times (headroom.families.attention.runner), so a
  candidate's output through the protocol is bit for bit the pipeline's (a GPU test checks it).
- ``cost``: the roofline's useful FLOPs and compulsory bytes (headroom.analysis.roofline.work).

A ragged decode (``kv_lens`` in the shape) asks for each sequence's own answer: the candidates that
read lengths (the varlen decode, the natives) support it; generations 1 and 2, which the attention
stages time on the padded batch (what a server without varlen kernels pays), do not answer it and
say so through ``supports``. ``trace.batching.kv_summary: mean`` has no family form (a mean of
lengths rounded per sequence is not the trace's rounded mean): ``from_config`` refuses it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from headroom.families.contract import Candidate, Feature, Step

NAME = "attention"
KV_SUMMARIES = ("max", "per_sequence")
#: vLLM's default CUDA Graph capture sizes: a decode batch replays the graph of the smallest size >= it
CAPTURE_SIZES = (1, 2, 4, *range(8, 513, 8))


def _default(section: str) -> Any:
    from headroom.core import defaults

    return defaults.section(section)


@dataclass(frozen=True)
class AttentionFamily:
    """Causal GQA attention with RoPE over one partition (heads, head_dim, dtype)."""

    partition: Mapping[str, Any] = field(default_factory=lambda: _default("partition"))
    tiles: tuple = field(default_factory=lambda: tuple(_default("tiles")))
    rope: tuple = field(default_factory=lambda: tuple(_default("rope")))
    native: tuple = field(default_factory=lambda: tuple(_default("native_candidates")))
    generation: int = field(default_factory=lambda: int(_default("generation")))
    varlen: bool = field(default_factory=lambda: bool(_default("varlen_decode")))
    tolerances: Mapping[str, Any] = field(default_factory=lambda: _default("correctness")["tolerances"])
    kv_summary: str = "max"
    name: str = NAME
    features: dict = field(
        default_factory=lambda: {
            "phase": Feature("category", capture_fixed=True),
            "batch": Feature("int", capture_fixed=True, pad_to=list(CAPTURE_SIZES), min=1),
            "q_len": Feature("int", min=1),
            "kv_len": Feature("int", min=1),
        }
    )

    def __post_init__(self) -> None:
        if self.kv_summary not in KV_SUMMARIES:
            raise ValueError(
                f"trace.batching.kv_summary {self.kv_summary!r}: the attention family expands engine steps "
                f"with one of {', '.join(KV_SUMMARIES)} (a mean of lengths rounded per sequence is not the "
                "trace's rounded mean)"
            )

    @classmethod
    def from_config(cls, study: Mapping[str, Any]) -> AttentionFamily:
        """The attention family of a study's config (keys it leaves out: the default study's)."""
        get = study.get
        batching = (get("trace") or {}).get("batching") or {}
        return cls(
            partition={**_default("partition"), **(get("partition") or {})},
            **({"tiles": tuple(get("tiles"))} if get("tiles") else {}),
            **({"rope": tuple(get("rope"))} if get("rope") else {}),
            **({"native": tuple(get("native_candidates") or ())} if "native_candidates" in study else {}),
            **({"generation": int(get("generation"))} if get("generation") is not None else {}),
            **({"varlen": bool(get("varlen_decode"))} if get("varlen_decode") is not None else {}),
            **(
                {"tolerances": get("correctness")["tolerances"]}
                if (get("correctness") or {}).get("tolerances")
                else {}
            ),
            kv_summary=batching.get("kv_summary") or "max",
        )

    @property
    def version(self) -> str:
        """The kernel generation the candidates run (a candidate's tile and placement are its params)."""
        return f"generation-{self.generation}"

    # -- the engine's calls -----------------------------------------------------------------------

    def _shape(self, phase: str, batch: int, q_len: int, kv_len: int) -> dict:
        p = self.partition
        return {
            "phase": phase,
            "batch": int(batch),
            "q_len": int(q_len),
            "kv_len": int(kv_len),
            "heads_q": int(p["heads_q"]),
            "heads_kv": int(p["heads_kv"]),
            "head_dim": int(p["head_dim"]),
            "dtype": str(p["dtype"]),
        }

    def shapes(self, step: Step) -> list[dict]:
        out = [self._shape("prefill", 1, q, kv) for q, kv in step.prefill_chunks]
        if step.decode_kv_lens:
            lens = [int(n) for n in step.decode_kv_lens]
            shape = self._shape("decode", len(lens), 1, max(lens))
            if self.kv_summary == "per_sequence":
                shape["kv_lens"] = ",".join(map(str, lens))
            out.append(shape)
        return out

    # -- candidates ---------------------------------------------------------------------------------

    def _table(self):
        from headroom.families.attention.candidates import build

        return build(list(self.tiles), list(self.rope), list(self.native), self.generation, self.varlen)

    def candidates(self) -> list[Candidate]:
        rows = self._table().to_dict("records")
        return [Candidate(id=row.pop("candidate"), params=plain(row)) for row in rows]

    @staticmethod
    def _row(candidate: Candidate) -> SimpleNamespace:
        """The candidate as the runner reads a candidates-table row."""
        return SimpleNamespace(candidate=candidate.id, **candidate.params)

    def supports(self, candidate: Candidate, shape: dict) -> bool:
        from headroom.families.attention.runner import takes_lengths

        return "kv_lens" not in shape or takes_lengths(self._row(candidate))

    def unsupported(self, candidate: Candidate, exc: BaseException) -> str | None:
        """Optional member: why a call that raised means the candidate has no kernel for the shape (a
        native backend's "No available kernel", a tile over the device's resources), as attention's
        own correctness gate says (headroom.families.attention.correctness.unsupported_reason)."""
        from headroom.families.attention.correctness import unsupported_reason
        from headroom.families.attention.runner import is_native

        return unsupported_reason(exc, native=is_native(self._row(candidate)))

    # -- inputs, the call, the answer ---------------------------------------------------------------

    def inputs(self, shape: dict, *, seed: int, device: str) -> dict:
        """The correctness gate's q, k, v (drawn from ``seed``) and RoPE tables for ``shape``, with
        the lengths of a ragged decode and whether the keys are rotated in the call."""
        import torch

        from headroom.families.attention.correctness import check_inputs
        from headroom.families.attention.inputs import rotate_k

        row = SimpleNamespace(**shape)
        tdev = "cuda" if device == "cuda" else "cpu"
        q, k, v, cos, sin = check_inputs(row, seed, tdev, float(self.partition["rope_base"]))
        lens = shape.get("kv_lens")
        kv_lens = None if lens is None else torch.tensor(_lengths(lens), dtype=torch.int32, device=tdev)
        return {"q": q, "k": k, "v": v, "cos": cos, "sin": sin, "kv_lens": kv_lens, "rotate_k": rotate_k(row)}

    def prepare(self, candidate: Candidate, shape: dict, inputs: dict):
        """The runner's callable for this candidate over these inputs' tables and lengths."""
        from headroom.families.attention.runner import runner

        x = inputs
        fn = runner(self._row(candidate), x["cos"], x["sin"], x["rotate_k"], x["kv_lens"])

        def call(inputs: dict):
            return fn(inputs["q"], inputs["k"], inputs["v"])

        return call

    def reference(self, shape: dict, inputs: dict):
        from headroom.families.attention.correctness import reference

        x = inputs
        return reference(
            x["q"], x["k"], x["v"], x["cos"], x["sin"], rotate_k=x["rotate_k"], kv_lens=x["kv_lens"]
        )

    def tolerance(self, dtype: str) -> tuple[float, float]:
        tol = self.tolerances[str(dtype)]
        return float(tol["rel"]), float(tol["abs"])

    def cost(self, shape: dict) -> dict:
        from headroom.analysis.roofline import work

        w = work(shape)
        return {"flops": w["flops"], "bytes": w["compulsory_bytes"]}


def _lengths(text: str) -> list[int]:
    return [int(n) for n in str(text).split(",")]


def plain(row: dict) -> dict:
    """A table row's values as JSON scalars (numpy ints and bools to Python's)."""
    return {k: v.item() if hasattr(v, "item") else v for k, v in row.items()}


ATTENTION = AttentionFamily()
