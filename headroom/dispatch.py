"""Load a study's dispatch table (results/<study>/dispatch.json) and choose a candidate per shape.

    from headroom import dispatch
    here = {"gpu_name": "NVIDIA H200", "sm_count": 132, "heads_q": 32, "heads_kv": 8, "head_dim": 128,
            "dtype": "bfloat16", "kernel_source_blake3": dispatch.kernel_source_blake3(dispatch.current_kernel_code()),
            "torch": torch_version, "flashinfer": dispatch.flashinfer_version()}  # what this server is
    table = dispatch.load("results/default", identity=here)               # the study folder: checked against it
    cand = table.choose(phase="decode", batch=5, q_len=1, kv_len=2064)   # the profile routes by step
    cand.id, cand.block_m, cand.rope           # what to plan and run (kernels.deploy.run(cand, ...))
    cand.native                                # or a native: run cand.backend through its library

A route target may be a native candidate (``Candidate.native``: a backend other than ours, e.g.
``sdpa-cudnn``, ``flex``, FlashInfer's; no tile of ours, ``tile`` -1 and sizes 0) wherever it was the
faster choice: a server runs it through its own library (torch, FlashInfer), after the standalone
RoPE kernel where its ``rope`` is ``unfused``; ``kernels.deploy`` plans only ours and refuses it.

What ``load`` checks, and where from:

* given the study folder (``results/<study>``, or its ``dispatch.json`` with ``recommendation.parquet``
  beside it), what ``headroom verify`` checks of the table: recommendation.parquet verifies against its
  sidecar and holds its kind, its study and its recorded inputs beside it (``headroom.core.identity``),
  and dispatch.json is a regular file (not a link) whose BLAKE3 is the one recommendation.parquet
  recorded when the stage wrote both (``identity.dispatch_problems``). An edited table with a fresh
  sidecar, another study's table copied in, a deleted one or a link to another file is refused;
* from the file alone (a table copied away from its folder): its bytes against its sidecar when it
  has one (a sidecar is not a signature: whoever can write the file can write its sidecar), at most
  ``MAX_BYTES`` and ``MAX_DEPTH`` levels of nesting (checked before the JSON is parsed), strict JSON
  (no NaN, no duplicate keys), the whole table against ``SCHEMA`` (every malformed field is one
  ``DispatchError`` naming it), what the schema cannot say (each policy's candidates described, the
  profile's scopes present, a clustered policy's dimensions), and with ``study=`` the study it was
  recorded for;
* with ``identity``, what the table is valid for (``check``): another GPU model or SM count, another
  partition (heads, head_dim) or dtype, or another kernel source hash is refused (``DispatchRefused``,
  naming each difference; values compare with their type: 132 is not "132"); another driver, torch or
  Triton version only warns (``VersionWarning``: servers pin their own), as does another FlashInfer
  version where both the table and the identity name one (``SOFT_OPTIONAL``: ``identity.soft.flashinfer``
  is the version the study's environment recorded, absent from older tables and from studies without
  FlashInfer); a table that routes a scope to a FlashInfer candidate (``flashinfer_routes``) is refused
  where the identity says FlashInfer is absent (``flashinfer`` given as None, "" or "none":
  ``flashinfer_version`` gives None on a host without it), naming the version the table was timed with.

Every scope's policy is read into ``headroom.policies``' objects (the one lookup implementation: the
same code the decision fitted and scored). Neither loading nor choosing imports torch.

A ``Dispatch`` answers for one scope (a mode, ``graph`` or ``eager``, or a profile part) or for the
deployment profile (``mode=None``, the default; a table without a profile and with one scope, a CPU
study's eager mode, answers for that scope): then ``choose`` routes each call by its ``step`` feature
(``decode-only``, ``mixed``), or by ``phase`` where no step is given (decode -> decode-only, prefill
-> mixed, as the decision read the trace), to that step's part. ``features`` names what a scope's
table keys on (e.g. phase and batch for ``batch-keyed``, shape_key for ``exact-key``); ``choose``
refuses a feature outside its range (``FEATURES``).

A kernel family's table (``family`` names it: docs/families.md) is the same table about the family's
own shapes. Its identity is the GPU model and SM count, and the family's name, version and source
BLAKE3 (``FAMILY_HARD``; driver, torch and Triton as ever only warn); its candidates carry the
family's ``params`` (the attention fields are null, but for ``num_warps``/``num_stages`` where the
params hold them); ``choose`` checks each of the family's declared features a call gives by its
kind and ``min``/``max`` (``family_features``), and routes by ``step`` (``decode-only``, ``mixed``;
a family's ``prefill-only`` step is profiled as ``mixed``: ``step_of_kind``; a trace row's integer
``step`` index gives way to its ``step_kind``). A family captured by a feature F (its record's
``captured_by``, e.g. MoE's ``tokens``) routes by F instead: a call with F up to the capture limit
(F's largest ``pad_to``) to the ``captured`` part (``graph@captured``: it replays a CUDA graph), a
larger one to ``uncaptured`` (``eager@uncaptured``), whatever its step.
"""

from __future__ import annotations

import functools
import json
import math
import numbers
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from headroom import policies
from headroom.core.names import OURS_BACKENDS
from headroom.families.attention.keying import CLUSTER_FEATURES
from headroom.policies.shapes import Keying

HARD = ("gpu_name", "sm_count", "heads_q", "heads_kv", "head_dim", "dtype", "kernel_source_blake3")
#: What a kernel family's table is valid for only (its ``identity.hard``): the GPU, and the family as
#: its artifacts record it (provenance ``family``: name, version, source BLAKE3).
FAMILY_HARD = ("gpu_name", "sm_count", "family", "family_version", "family_source_blake3")
SOFT = ("driver", "torch", "triton")
#: Versions a table's soft identity holds only where its study recorded them: FlashInfer's, from the
#: environment stage (``environment.parquet`` column ``flashinfer``) of a study where it was installed.
#: Older tables and studies without FlashInfer lack it; a kernel family's table never holds it.
SOFT_OPTIONAL = ("flashinfer",)
#: What says FlashInfer is absent: an identity's None or "", and the environment stage's "none"
#: (headroom.measure.environment.flashinfer_facts)
ABSENT = (None, "", "none")
#: FlashInfer's PyPI distributions (the ``flashinfer`` extra installs the first), whose metadata holds
#: its version: the environment stage records ``flashinfer.__version__``, the same string for a wheel
FLASHINFER_DISTRIBUTIONS = ("flashinfer-python", "flashinfer")
SCHEMA_VERSIONS = (1,)
WHAT = {
    "gpu_name": "GPU model",
    "sm_count": "SM count",
    "heads_q": "partition (heads_q)",
    "heads_kv": "partition (heads_kv)",
    "head_dim": "partition (head_dim)",
    "dtype": "dtype",
    "kernel_source_blake3": "kernel source hash",
    "family": "kernel family",
    "family_version": "family version",
    "family_source_blake3": "family source hash",
}
#: What a candidate carries besides its fused flag (``Candidate``; the recommendation writes them)
CANDIDATE_FIELDS = ("tile", "block_m", "block_n", "num_warps", "num_stages", "rope", "generation", "backend")
DISPATCH_NAME = "dispatch.json"  # headroom.core.layout.DISPATCH_NAME, where the pipeline writes it
RECOMMENDATION_NAME = "recommendation.parquet"  # the artifact that records the table's BLAKE3
#: A real table is kilobytes to a few megabytes and nests 7 levels deep; past these it is refused
#: before it is parsed (``json.loads`` recurses: a deep enough array exhausts the stack).
MAX_BYTES = 64 << 20
MAX_DEPTH = 64

PHASES = ("prefill", "decode")
VERDICTS = ("stop", "continue", "no-decision")  # the headline's (`headroom gate`'s)
SHIPS = ("kernel", "phase-pair", "policy")
#: headroom/families/attention/candidates.py's ROPE_PLACEMENTS (a floor above this one; a test holds them equal)
ROPE_PLACEMENTS = ("unfused", "fused", "q_fused")
INT32_MAX = 2**31 - 1  # sizes a kernel indexes with 32-bit integers

#: The module that turns a chosen candidate into the plan a server runs (``kernels.deploy``) and the
#: script whose kernels the portfolio timed: the kernel source hash covers both closures' kernels/.
DEPLOY_SOURCE = "kernels/deploy.py"
TIMED_SOURCE = "scripts/portfolio.py"


class DispatchError(ValueError):
    """A dispatch table that cannot be read (missing, corrupt, malformed, another schema), or a call
    ``choose`` cannot answer (a feature missing or out of its range)."""


class DispatchRefused(DispatchError):
    """A dispatch table that is not valid for this machine, partition, dtype or kernel source, or that
    its study folder does not vouch for."""


class VersionWarning(UserWarning):
    """A driver, torch, Triton or FlashInfer version other than the study's."""


# ----------------------------------------------------------------------------------------------
# What choose accepts
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Feature:
    """What ``choose`` accepts of one feature: an integer in [low, high] (kind ``int``), a finite
    number in [low, high] (kind ``float``; a family's), or a string (kind ``str``), one of ``values``
    where it names them. A bound of None: none that side (a family's feature declared without it)."""

    kind: str
    low: float | None = None
    high: float | None = None
    values: tuple[str, ...] = ()

    def allowed(self) -> str:
        if self.kind in ("int", "float"):
            what = "an integer" if self.kind == "int" else "a finite number"
            if self.low is not None and self.high is not None:
                return f"{what} in [{self.low}, {self.high}]"
            if self.low is not None or self.high is not None:
                return f"{what} {'>=' if self.low is not None else '<='} {_g(self.low, self.high)}"
            return what
        return f"one of {list(self.values)}" if self.values else "a string"

    def accepts(self, value: Any) -> bool:
        if self.kind == "int":  # numpy integers are Integral; a bool, a float or NaN is not an integer here
            return isinstance(value, numbers.Integral) and not isinstance(value, bool) and self._within(value)
        if self.kind == "float":  # an integer is a number too; NaN and infinities are not accepted
            return (
                isinstance(value, numbers.Real)
                and not isinstance(value, bool)
                and math.isfinite(value)
                and self._within(value)
            )
        return isinstance(value, str) and (not self.values or value in self.values)

    def _within(self, value) -> bool:
        return (self.low is None or self.low <= value) and (self.high is None or value <= self.high)


def _g(*bounds):
    return next(b for b in bounds if b is not None)


#: Each feature a policy keys on, with its range: one table (the families issue derives it from a
#: family's declared features). ``choose`` checks every one a call gives, used or not.
FEATURES = {
    "phase": Feature("str", values=PHASES),
    "batch": Feature("int", 1, INT32_MAX),
    "q_len": Feature("int", 1, INT32_MAX),
    "kv_len": Feature("int", 1, INT32_MAX),
    "heads_q": Feature("int", 1, INT32_MAX),
    "heads_kv": Feature("int", 1, INT32_MAX),
    "head_dim": Feature("int", 1, INT32_MAX),
    "shape_key": Feature("str"),
}
#: (a, b): where a call gives both, feature a is at least feature b (queries attend to their own keys).
AT_LEAST = (("kv_len", "q_len"),)


#: The kinds of a family's declared features (headroom.families.Feature) as ``Feature`` kinds.
FAMILY_KINDS = {"int": "int", "float": "float", "category": "str"}


def family_features(record: dict) -> dict[str, Feature]:
    """What ``choose`` accepts of each of a family's declared features (a table's ``family`` record:
    ``features`` {name: {kind, min, max, ...}}), and of ``shape_key`` (a string, as attention's)."""
    out = {
        name: Feature(FAMILY_KINDS[spec["kind"]], spec.get("min"), spec.get("max"))
        for name, spec in record["features"].items()
    }
    return {**out, "shape_key": FEATURES["shape_key"]}


def check_features(
    features: dict[str, Any], needed: tuple[str, ...] = (), specs: dict[str, Feature] | None = None
) -> None:
    """DispatchError naming the first feature that is missing (of ``needed``) or outside its range
    (``specs``: a family's, ``family_features``; None: attention's ``FEATURES`` and ``AT_LEAST``)."""
    missing = [f for f in needed if f not in features]
    if missing:
        raise DispatchError(f"the table keys on {list(needed)}; missing {missing}")
    for name, value in features.items():
        spec = (FEATURES if specs is None else specs).get(name)
        if spec is not None and not spec.accepts(value):
            raise DispatchError(f"feature {name}={value!r:.60}: must be {spec.allowed()}")
    for a, b in AT_LEAST if specs is None else ():
        if a in features and b in features and features[a] < features[b]:
            raise DispatchError(
                f"feature {a}={features[a]!r} is below {b}={features[b]!r}: must be at least {b}"
            )


# ----------------------------------------------------------------------------------------------
# The table's schema: the one statement of what dispatch.json holds (the writer validates against it)
# ----------------------------------------------------------------------------------------------

_NAME = {"type": "string", "minLength": 1}
_HEX = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
_COUNT = {"type": "integer", "minimum": 1}
_DIM = len(CLUSTER_FEATURES) + 1  # the k-means vector: log2 of each feature, and the phase
_VECTOR = {"type": "array", "minItems": _DIM, "maxItems": _DIM, "items": {"type": "number"}}
_NUMBERS = {"type": "array", "minItems": 1, "items": {"type": "number"}}  # a family's k-means vector
_PAIR = {"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "string"}}
#: A family's keys (``headroom.policies.Keying.to_dict``), written with each of its policies
_KEYING = {
    "type": "object",
    "additionalProperties": False,
    "required": ["categories", "numeric", "capture", "cluster", "flags", "order"],
    "properties": {
        "categories": {"type": "array", "items": _NAME},
        "numeric": {"type": "array", "items": _PAIR},
        "capture": {
            "type": "array",
            "items": {
                "type": "array",
                "minItems": 3,
                "maxItems": 3,
                "prefixItems": [_NAME, {"type": "string"}, {"type": "array", "items": {"type": "integer"}}],
            },
        },
        "cluster": {"type": "array", "items": _NAME},
        "flags": {"type": "array", "items": _PAIR},
        "order": {"type": ["array", "null"], "items": {"type": "string"}},
        # a family with a per-M config table (headroom.families.ConfigTable): its entries, M -> candidate
        "table": {
            "type": "array",
            "items": {"type": "array", "minItems": 2, "maxItems": 2, "prefixItems": [_COUNT, _NAME]},
        },
        "table_feature": {"type": ["string", "null"]},
        # a family captured by a feature (its record's captured_by): written only when it has one
        "captured_by": _NAME,
    },
}
_POLICY = {
    "type": "object",
    "additionalProperties": False,
    "required": ["policy", "features", "candidates"],
    "properties": {
        "policy": {"enum": sorted(policies.REGISTRY)},
        "features": {"type": "array", "items": {"type": "string"}},
        "candidates": {"type": "array", "minItems": 1, "items": _NAME},
        "fallback": {"type": "integer", "minimum": 0},
        "table": {
            "type": "array",
            "items": {
                "type": "array",
                "minItems": 2,
                "maxItems": 2,
                "prefixItems": [{"type": ["string", "integer", "null"]}, {"type": "integer", "minimum": 0}],
            },
        },
        "mean": _NUMBERS,
        "std": {**_NUMBERS, "items": {"type": "number", "exclusiveMinimum": 0}},
        "centroids": {"type": "array", "minItems": 1, "items": _NUMBERS},
        "seed": {"type": "integer"},
        "keying": _KEYING,  # a family's policy (attention's is written without it)
    },
    "allOf": [
        {
            "if": {"properties": {"policy": {"not": {"const": "random"}}}},
            "then": {"required": ["fallback", "table"]},
        },
        {
            "if": {"properties": {"policy": {"const": "clustered"}}},
            "then": {"required": ["mean", "std", "centroids"]},
        },
        {  # attention's k-means vector has its fixed length; a family's is its keying's (``_consistent``)
            "if": {"not": {"required": ["keying"]}},
            "then": {
                "properties": {
                    "mean": _VECTOR,
                    "std": {**_VECTOR, "items": {"type": "number", "exclusiveMinimum": 0}},
                    "centroids": {"type": "array", "minItems": 1, "items": _VECTOR},
                }
            },
        },
    ],
}
_SCOPE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["verdict", "ship", "kernel", "policy", "expected_gain_pct"],
    "properties": {
        "verdict": _NAME,
        "ship": {"enum": list(SHIPS)},
        "kernel": _NAME,
        "policy": _POLICY,
        "expected_gain_pct": {
            "type": "array",
            "minItems": 3,
            "maxItems": 3,
            "items": {"type": ["number", "null"]},
        },
    },
}
_SIZES = ("block_m", "block_n", "num_warps", "num_stages")
_CANDIDATE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["fused", *CANDIDATE_FIELDS],
    "properties": {
        "fused": {"type": "boolean"},
        "tile": {"type": ["integer", "null"], "minimum": -1},  # -1 and sizes 0: a native's (no tile)
        **{size: {"type": ["integer", "null"], "minimum": 0} for size in _SIZES},
        "rope": {"enum": [*ROPE_PLACEMENTS, None]},
        "generation": {"type": "integer", "minimum": 1},
        "backend": _NAME,
    },
    # one of our kernels (backend triton) has a tile to launch with
    "if": {"properties": {"backend": {"const": "triton"}}},
    "then": {
        "properties": {"tile": {"minimum": 0}, **{size: {"minimum": 1} for size in _SIZES}},
    },
}
#: A kernel family's candidate: its params, the attention fields null (num_warps/num_stages where
#: the params hold them: a Triton config's)
_FAMILY_CANDIDATE = {
    "type": "object",
    "additionalProperties": False,
    "required": ["fused", *CANDIDATE_FIELDS, "params"],
    "properties": {
        **{f: {"type": "null"} for f in ("fused", "tile", "block_m", "block_n", "rope", "generation")},
        "num_warps": {"type": ["integer", "null"], "minimum": 1},
        "num_stages": {"type": ["integer", "null"], "minimum": 0},
        "backend": {"const": "family"},
        "params": {
            "type": "object",
            "additionalProperties": {"type": ["string", "number", "boolean", "null"]},
        },
    },
}
#: What a kernel family's artifacts record of it (provenance ``family``), as its table carries it
_FAMILY = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name", "version", "source_blake3", "features", "feature_order"],
    "properties": {
        "name": _NAME,
        "version": {"type": "string"},
        "spec": {"type": "string"},
        "source_blake3": _HEX,
        "features": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "required": ["kind"],
                "properties": {
                    "kind": {"enum": sorted(FAMILY_KINDS)},
                    "capture_fixed": {"type": "boolean"},
                    "pad_to": {"type": ["array", "null"], "items": {"type": "integer"}},
                    "min": {"type": ["number", "null"]},
                    "max": {"type": ["number", "null"]},
                },
            },
        },
        "feature_order": {"type": "array", "items": _NAME},
        "config_table": {  # ConfigTable.to_record(): written for a family that has one
            "type": "object",
            "required": ["feature", "entries", "configs"],
            "properties": {"feature": _NAME, "entries": {"type": "array"}, "configs": {"type": "array"}},
        },
        # the capture-fixed int feature whose largest pad_to says which calls replay CUDA graphs
        # (the profile's `captured` part; larger calls are `uncaptured`, eager): written for a family
        # that has one
        "captured_by": _NAME,
    },
}
FAMILY_HARD_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": list(FAMILY_HARD),
    "properties": {
        "gpu_name": _NAME,
        "sm_count": {"type": "integer", "minimum": 0},
        "family": _NAME,
        "family_version": {"type": "string"},
        "family_source_blake3": _HEX,
    },
}
HARD_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": list(HARD),
    "properties": {
        "gpu_name": _NAME,
        "sm_count": {"type": "integer", "minimum": 0},  # 0: no GPU (an interpreter study)
        "heads_q": _COUNT,
        "heads_kv": _COUNT,
        "head_dim": _COUNT,
        "dtype": _NAME,
        "kernel_source_blake3": _HEX,
    },
}
SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "headroom dispatch table (results/<study>/dispatch.json), schema_version 1",
    "type": "object",
    "additionalProperties": False,
    "required": [
        "schema_version",
        "study",
        "decision_blake3",
        "rule_version",
        "verdict",
        "identity",
        "profile",
        "step_of_phase",
        "scopes",
        "candidates",
    ],
    "properties": {
        "schema_version": {"type": "integer", "enum": list(SCHEMA_VERSIONS)},
        "study": _NAME,
        "decision_blake3": _HEX,
        "rule_version": {"type": "string"},
        "verdict": {"enum": list(VERDICTS)},
        "identity": {
            "type": "object",
            "additionalProperties": False,
            "required": ["hard", "soft"],
            "properties": {
                "hard": {"type": "object"},  # attention's HARD_SCHEMA, a family's FAMILY_HARD_SCHEMA
                "soft": {
                    "type": "object",
                    "required": list(SOFT),  # not SOFT_OPTIONAL: older tables lack FlashInfer's
                    "properties": {k: _NAME for k in SOFT_OPTIONAL},
                    "additionalProperties": {"type": "string"},
                },
            },
        },
        "profile": {"type": "object", "additionalProperties": _NAME},  # step type -> scope
        "step_of_phase": {
            "type": "object",
            "propertyNames": {"enum": list(PHASES)},
            "additionalProperties": _NAME,
        },
        "scopes": {"type": "object", "minProperties": 1, "additionalProperties": _SCOPE},
        "candidates": {"type": "object", "minProperties": 1, "additionalProperties": {"type": "object"}},
        "provenance": {"type": "object"},  # the stage's (headroom/core/stage.py), as in an artifact
        "family": _FAMILY,  # a kernel family's table only
        # a family's step kind -> the profile's step
        "step_of_kind": {"type": "object", "additionalProperties": _NAME},
    },
    "if": {"required": ["family"]},
    "then": {
        "required": ["step_of_kind"],
        "properties": {
            "identity": {"properties": {"hard": FAMILY_HARD_SCHEMA}},
            "candidates": {"additionalProperties": _FAMILY_CANDIDATE},
        },
    },
    "else": {  # attention's table: step_of_kind is a family's
        "properties": {
            "step_of_kind": {"const": "only in a kernel family's table"},  # its message names the rule
            "identity": {"properties": {"hard": HARD_SCHEMA}},
            "candidates": {"additionalProperties": _CANDIDATE},
        },
    },
}


@functools.cache
def _validator():
    import jsonschema

    # JSON's integers only: a bool or a float with no fraction (1.0) is not an integer here
    integer = lambda _, x: isinstance(x, numbers.Integral) and not isinstance(x, bool)  # noqa: E731
    types = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", integer)
    strict = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=types)
    strict.check_schema(SCHEMA)
    return strict(SCHEMA)


def _field(path) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(the table itself)"


def validate(table: Any, where: str = "dispatch table") -> None:
    """DispatchError naming the (most relevant) malformed field of ``table`` against ``SCHEMA``."""
    import jsonschema

    error = jsonschema.exceptions.best_match(_validator().iter_errors(table))
    if error is not None:
        message = error.message if len(error.message) <= 200 else error.message[:200] + "..."
        raise DispatchError(f"{where}: field {_field(error.absolute_path)}: {message}")


# ----------------------------------------------------------------------------------------------
# Reading the file
# ----------------------------------------------------------------------------------------------

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_STEP = np.zeros(256, dtype=np.int8)
_STEP[[ord("["), ord("{")]], _STEP[[ord("]"), ord("}")]] = 1, -1


def nesting_depth(data: bytes, chunk: int = 1 << 20) -> int:
    """The deepest bracket nesting of JSON text, strings left out: a cheap scan, so a table nested past
    ``MAX_DEPTH`` is refused before ``json.loads`` recurses into it. Up to a first malformed string the
    strings are the parser's, so the depth it reaches before failing is never more than this."""
    steps = _STEP[np.frombuffer(_STRING.sub(b'""', data), dtype=np.uint8)]
    deepest, level = 0, 0
    for start in range(0, len(steps), chunk):
        run = np.cumsum(steps[start : start + chunk], dtype=np.int64) + level
        if len(run):
            deepest, level = max(deepest, int(run.max())), int(run[-1])
    return deepest


def _strict_object(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        dup = next(k for k, _ in pairs if k in seen or seen.add(k))
        raise ValueError(f"duplicate key {dup!r:.60}")
    return out


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def _read(path: Path) -> dict:
    from headroom.core import artifacts

    try:
        size = os.stat(path).st_size
        if size > MAX_BYTES:
            raise DispatchError(f"{path}: {size:,} bytes; a dispatch table is at most {MAX_BYTES:,}")
        sidecar = artifacts.sidecar(path).exists()
        data = artifacts.read_verified_bytes(path)[0] if sidecar else artifacts.read_regular(path)
    except FileNotFoundError:
        raise DispatchError(
            f"{path}: no dispatch table here (run the pipeline: its recommendation stage writes it)"
        ) from None
    except artifacts.ArtifactError as exc:
        raise DispatchError(f"{path}: {exc}") from None
    depth = nesting_depth(data)
    if depth > MAX_DEPTH:
        raise DispatchError(
            f"{path}: not a dispatch table (JSON nested {depth} deep; a table nests at most {MAX_DEPTH})"
        )
    try:
        table = json.loads(data, object_pairs_hook=_strict_object, parse_constant=_no_constant)
    except (UnicodeDecodeError, ValueError) as exc:  # JSONDecodeError is a ValueError
        raise DispatchError(f"{path}: not a dispatch table (JSON: {exc})") from None
    version = table.get("schema_version") if isinstance(table, dict) else type(table).__name__
    if type(version) is not int or version not in SCHEMA_VERSIONS:
        raise DispatchError(
            f"{path}: dispatch schema {version!r} (field schema_version); this loader reads {SCHEMA_VERSIONS}"
        )
    validate(table, str(path))
    return table


def check_folder(folder: Path) -> None:
    """DispatchRefused unless the study folder vouches for its dispatch.json as ``headroom verify``
    does: recommendation.parquet verifies, holds its kind, study and recorded inputs, and records the
    table's BLAKE3 (``headroom.core.identity``)."""
    from headroom.core import artifacts
    from headroom.core import identity as artifact_identity

    rec = folder / RECOMMENDATION_NAME
    try:
        artifacts.verify(rec)
    except artifacts.ArtifactError as exc:
        raise DispatchRefused(
            f"{folder}: its {RECOMMENDATION_NAME} does not vouch for the table: {exc}"
        ) from None
    # the project root: results/<study> -> results -> the root (outside a results folder: no study check)
    found = artifact_identity.problems(rec, folder.resolve().parent.parent)
    if found:
        raise DispatchRefused("; ".join(found))


def _consistent(path: Path, table: dict) -> dict:
    """{scope: fitted policy}, after what the schema cannot say: each scope's policy reads back (its
    indices in range) with its class's features, it and the scope's kernel name described candidates,
    and the profile names scopes of the table."""
    cands, scopes = table["candidates"], {}
    try:
        keying = keying_of(table)
    except ValueError as exc:  # a captured_by naming no capture-fixed int feature with pad_to
        raise DispatchError(f"{path}: field family: {exc}") from None
    for scope, entry in table["scopes"].items():
        where = f"{path}: field scopes.{scope}"
        data = entry["policy"]
        try:
            policy = policies.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise DispatchError(f"{where}.policy: {exc}") from None
        if isinstance(policy, policies.KeyedPolicy) and policy.keying != keying:
            whose = f"family {table['family']['name']!r}" if "family" in table else "attention"
            raise DispatchError(f"{where}.policy.keying: not the keys of {whose}'s declared features")
        if isinstance(policy, policies.Clustered):
            dims = {len(policy.mean), len(policy.std), *(len(c) for c in policy.centroids)}
            if dims != {policy.keying.dim}:
                raise DispatchError(
                    f"{where}.policy: k-means vectors of length {sorted(dims)}; its keys give {policy.keying.dim}"
                )
        if list(data["features"]) != list(policy.features):
            raise DispatchError(
                f"{where}.policy.features: {data['features']} is not {data['policy']}'s {list(policy.features)}"
            )
        unknown = sorted({entry["kernel"], *policy.candidates} - set(cands))
        if unknown:
            raise DispatchError(f"{where}: names candidates {unknown} the table does not describe")
        scopes[scope] = policy
    for step, scope in table["profile"].items():
        if scope not in scopes:
            raise DispatchError(
                f"{path}: field profile.{step}: scope {scope!r:.60} is not among the table's {sorted(scopes)}"
            )
    return scopes


def read_table(
    path: str | Path, *, identity: dict | None = None, study: str | None = None
) -> tuple[dict, dict]:
    """(the table's JSON content, {scope: its fitted policy}) of the table at ``path`` (a study folder
    or a dispatch.json), checked as ``load`` checks it: what a tool reads that needs every scope at
    once (``headroom export``)."""
    path = Path(path)
    if path.is_dir():
        check_folder(path)
        path = path / DISPATCH_NAME
    elif path.name == DISPATCH_NAME and os.path.lexists(path.parent / RECOMMENDATION_NAME):
        check_folder(path.parent)
    table = _read(path)
    if study is not None and table["study"] != study:
        raise DispatchRefused(f"{path}: the dispatch table of study {table['study']!r}, not of {study!r}")
    if identity is not None:
        check(table, identity)
    return table, _consistent(path, table)


def keying_of(table: dict) -> Keying:
    """The keys a table's policies read: its family's declared features (``Keying.of_record``), or
    attention's."""
    return Keying.of_record(table.get("family"))


def load(
    path: str | Path, *, mode: str | None = None, identity: dict | None = None, study: str | None = None
) -> Dispatch:
    """The dispatch table at ``path`` for ``mode`` (a scope; None: the deployment profile, or the one
    scope of a table without one). ``path`` is a study folder or a dispatch.json; a study folder, or a
    dispatch.json with recommendation.parquet beside it, is checked against the folder (``check_folder``).
    With ``study``, a table recorded for another study is refused; with ``identity`` (keys HARD,
    optionally SOFT and SOFT_OPTIONAL), a table recorded for another machine (``check``)."""
    table, scopes = read_table(path, identity=identity, study=study)
    path = Path(path) / DISPATCH_NAME if Path(path).is_dir() else Path(path)
    cands = {cid: Candidate(id=cid, **facts) for cid, facts in table["candidates"].items()}
    if mode is None and not table["profile"] and len(scopes) == 1:
        mode = next(iter(scopes))  # one scope and no profile (a CPU study: eager only): that scope
    if mode is not None and mode not in scopes:
        raise DispatchError(f"{path}: no scope {mode!r}; it holds {sorted(scopes)}")
    if mode is None and not table["profile"]:
        raise DispatchError(f"{path}: no deployment profile; load one of its scopes {sorted(scopes)}")
    entries = {s: table["scopes"][s] for s in scopes}
    return Dispatch(table, cands, {s: (entries[s], p) for s, p in scopes.items()}, mode)


# ----------------------------------------------------------------------------------------------
# What the table is valid for
# ----------------------------------------------------------------------------------------------


def _same(recorded: Any, given: Any) -> bool:
    """Equal as the same JSON type: 132 is not "132", nor True 1 (a numpy integer is an integer)."""
    if isinstance(recorded, bool) or isinstance(given, bool):
        return recorded is given
    if isinstance(recorded, numbers.Integral) and isinstance(given, numbers.Integral):
        return int(recorded) == int(given)
    return isinstance(recorded, str) and isinstance(given, str) and recorded == given


def hard_keys(table: dict) -> tuple[str, ...]:
    """What a table is valid for only: attention's ``HARD``, or a family's ``FAMILY_HARD``."""
    return FAMILY_HARD if "family" in table else HARD


def flashinfer_version() -> str | None:
    """This host's FlashInfer version (an identity's ``flashinfer``), None where it is not installed:
    read from its distribution's metadata, without importing it (the import takes seconds and loads
    torch); "unknown" where it is importable with no distribution metadata (a source checkout)."""
    import importlib.util
    from importlib import metadata

    if importlib.util.find_spec("flashinfer") is None:
        return None
    for name in FLASHINFER_DISTRIBUTIONS:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return "unknown"


def flashinfer_routes(table: dict) -> list[str]:
    """The FlashInfer candidates (backend in ``FLASHINFER_BACKENDS``) some scope's policy routes to."""
    from headroom.families.attention.candidates import FLASHINFER_BACKENDS

    facts = table.get("candidates") or {}
    routed = {c for entry in (table.get("scopes") or {}).values() for c in entry["policy"]["candidates"]}
    return sorted(c for c in routed if (facts.get(c) or {}).get("backend") in FLASHINFER_BACKENDS)


def check(table: dict, identity: dict) -> None:
    """Refuse (``DispatchRefused``, every difference named) a table recorded for another GPU model,
    SM count, partition, dtype or kernel source (a family's table: another family, family version or
    family source), or one that routes to FlashInfer where ``identity`` says it is absent (key
    ``flashinfer`` None, "" or "none": ``ABSENT``); warn (``VersionWarning``) on other versions
    (FlashInfer's where both the table and the identity name one)."""
    recorded = table.get("identity") or {}
    hard, soft = recorded.get("hard", {}), recorded.get("soft", {})
    keys = hard_keys(table)
    missing = [k for k in keys if k not in identity]
    if missing:
        raise DispatchRefused(f"identity lacks {missing}: the table is valid only for a known {keys}")

    def said(k):
        a, b = hard.get(k), identity[k]
        types = (
            f" (a {type(b).__name__} where the table records a {type(a).__name__})"
            if str(a) == str(b)
            else ""
        )
        return f"{WHAT[k]}: the table is for {a!r}, this is {b!r}{types}"

    wrong = [said(k) for k in keys if not _same(hard.get(k), identity[k])]
    if "flashinfer" in identity and identity["flashinfer"] in ABSENT and (routes := flashinfer_routes(table)):
        timed = soft.get("flashinfer") or "(version not recorded)"
        wrong.append(
            f"FlashInfer: the table routes to {routes}, timed with FlashInfer {timed}; this host has no FlashInfer"
        )
    if wrong:
        raise DispatchRefused(f"dispatch table of study {table.get('study')!r} refused: " + "; ".join(wrong))
    for k in (*SOFT, *SOFT_OPTIONAL):
        if k in SOFT_OPTIONAL and (identity.get(k) in ABSENT or soft.get(k) in ABSENT):
            continue  # only where both the table and the identity name a version
        if k in identity and str(soft.get(k)) != str(identity[k]):
            warnings.warn(
                f"{k} {identity[k]!r} differs from the study's {soft.get(k)!r}: the choices were timed there",
                VersionWarning,
                stacklevel=3,
            )


def kernel_source_blake3(code: dict[str, str]) -> str:
    """One BLAKE3 of the kernel sources: over the sorted (path, BLAKE3) pairs under kernels/ of
    ``study_kernel_code`` (what a study's table stands for) or of ``current_kernel_code``."""
    import blake3

    lines = sorted(f"{p}\t{h}" for p, h in code.items() if Path(p).parts[:1] == ("kernels",))
    if not lines:
        raise DispatchError("no kernels/ source among the recorded code: cannot name the kernel source")
    return blake3.blake3("\n".join(lines).encode()).hexdigest()


def _kernel_files(script: str, root: Path) -> list[str]:
    from headroom.core import sources

    return [p for p in sources.closure(script, root) if p.startswith("kernels/")]


def _root(root: str | Path | None) -> Path:
    from headroom.core import sources

    return Path(root) if root is not None else sources.PROJECT_ROOT


def deploy_sources(root: str | Path | None = None) -> list[str]:
    """The kernels/ files that turn a chosen candidate into the plan a server runs (DEPLOY_SOURCE's
    closure) and that the portfolio never loads (TIMED_SOURCE's): kernels/deploy.py."""
    timed = set(_kernel_files(TIMED_SOURCE, _root(root)))
    return [p for p in _kernel_files(DEPLOY_SOURCE, _root(root)) if p not in timed]


def study_kernel_code(timed: dict[str, str], root: str | Path | None = None) -> dict[str, str]:
    """{path: BLAKE3} of the kernel sources a study's table stands for: the kernels/ the portfolio
    timed (``timed``, a portfolio run's recorded code: a replay's are the recording's) and, from the
    checkout at ``root`` that writes the table, ``deploy_sources`` (the recommendation rule declares
    them, so an edit writes the table again)."""
    from headroom.core import artifacts

    root = _root(root)
    deployed = {p: artifacts.hash_file(root / p) for p in deploy_sources(root)}
    return {**deployed, **{p: h for p, h in timed.items() if p.startswith("kernels/")}}


def current_kernel_code(root: str | Path | None = None) -> dict[str, str]:
    """{path: BLAKE3} of the kernels/ sources this checkout would time (the portfolio stage's) and
    deploy (``deploy_sources``)."""
    from headroom.core import artifacts

    root = _root(root)
    files = sorted({*_kernel_files(TIMED_SOURCE, root), *deploy_sources(root)})
    return {p: artifacts.hash_file(root / p) for p in files}


# ----------------------------------------------------------------------------------------------
# The loaded table
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """A candidate to run: its id and what ``kernels.deploy`` needs to plan it; a kernel family's:
    its ``params`` (the family's ``Candidate.params``; the attention fields None)."""

    id: str
    tile: int | None
    block_m: int | None
    block_n: int | None
    num_warps: int | None
    num_stages: int | None
    rope: str | None
    generation: int | None
    backend: str
    fused: bool | None
    params: dict | None = field(default=None, hash=False)

    @property
    def native(self) -> bool:
        """A native backend's candidate (a server runs it through its own library), not one of ours."""
        return self.backend not in OURS_BACKENDS


class Dispatch:
    """One scope's table, or the deployment profile's (see the module docstring)."""

    def __init__(self, table: dict, candidates: dict, scopes: dict, mode: str | None):
        self.table, self.candidates, self.scopes, self.mode = table, candidates, scopes, mode
        self.study, self.verdict = table.get("study"), table.get("verdict")
        self.profile = dict(table.get("profile") or {})
        self.step_of_phase = dict(table.get("step_of_phase") or {})
        self.family = table.get("family")  # a kernel family's record; None: attention's table
        self.step_of_kind = dict(table.get("step_of_kind") or {})
        self.specs = None if self.family is None else family_features(self.family)
        self.keying = keying_of(table)

    def scope_of(self, features: dict[str, Any]) -> str:
        """The scope that answers a call with these features."""
        if self.mode is not None:
            return self.mode
        if self.keying.captured_by is not None:
            return self._captured_scope(features)
        step = features.get("step")
        if self.family is not None:
            if not isinstance(step, str):  # a family trace row's `step` is its index: its kind routes
                step = features.get("step_kind", step)
            if step is None:
                raise DispatchError(
                    f"the deployment profile routes by `step` (one of {sorted(self.step_of_kind)}); give one"
                )
            step = self.step_of_kind.get(step, step) if isinstance(step, str) else step
        elif step is None:
            if "phase" not in features:
                raise DispatchError("the deployment profile routes by `step` (or `phase`); give one")
            check_features({"phase": features["phase"]})
            step = self.step_of_phase.get(features["phase"])
        if not isinstance(step, str) or step not in self.profile:
            raise DispatchError(f"step {step!r:.60} is not in the deployment profile {sorted(self.profile)}")
        return self.profile[step]

    def _captured_scope(self, features: dict[str, Any]) -> str:
        """A family captured by a feature F: the profile's ``captured`` part for F up to the capture
        limit (the call replays a CUDA graph), ``uncaptured`` above it (eager), whatever the step."""
        name, limit = self.keying.captured_by, self.keying.capture_limit
        if name not in features:
            raise DispatchError(
                f"the deployment profile routes by `{name}` (calls with {name} <= {limit} replay CUDA "
                "graphs, larger ones run eager); give it"
            )
        check_features({name: features[name]}, specs=self.specs)
        part = "captured" if features[name] <= limit else "uncaptured"
        if part not in self.profile:
            raise DispatchError(f"part {part!r} is not in the deployment profile {sorted(self.profile)}")
        return self.profile[part]

    def features(self, scope: str | None = None) -> tuple[str, ...]:
        """What the scope's table keys on (the profile: every part's, and what it routes by: ``step``,
        or a captured family's feature)."""
        scope = scope or self.mode
        if scope is not None:
            return tuple(self.scopes[scope][1].features)
        parts = [f for s in self.profile.values() for f in self.scopes[s][1].features]
        route = self.keying.captured_by or "step"
        return (route, *dict.fromkeys(f for f in parts if f != route))

    def policy(self, scope: str):
        return self.scopes[scope][1]

    def choose(self, **features: Any) -> Candidate:
        """The candidate the table picks for one call's shape (a shape it never saw: its fallback);
        DispatchError naming a feature that is missing or outside its range (``FEATURES``; a family's
        table: its declared features, ``family_features``)."""
        check_features(features, specs=self.specs)
        scope = self.scope_of(features)
        policy = self.scopes[scope][1]
        try:
            check_features(features, tuple(policy.features), self.specs)
        except DispatchError as exc:
            raise DispatchError(f"{scope} ({policy.name}): {exc}") from None
        return self.candidates[policy.lookup(features)]

    def expected_gain_pct(self, scope: str | None = None) -> list:
        """[estimate, ci_low, ci_high] of what the scope's choice is expected to gain (%)."""
        return self.scopes[scope or self.mode][0]["expected_gain_pct"]
