"""The family contract (docs/families.md): the types outside code is written against, and the checks
that turn a family's wrong answer into one error naming the family, the method and what was wrong.

Change this module only by adding: users' families depend on every name here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

FEATURE_KINDS = ("category", "int", "float")
STEP_KINDS = ("decode-only", "mixed", "prefill-only")
#: Columns the framework adds to every invocation: a feature may not take one of these names.
FRAMEWORK_COLUMNS = frozenset(
    {"invocation", "family", "step", "step_kind", "time_s", "shape_key", "shape", "weight", "candidate"}
)
NAME = re.compile(r"[a-z][a-z0-9_-]{0,63}")
CANDIDATE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}")
FEATURE_NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
METHODS = ("shapes", "candidates", "supports", "inputs", "prepare", "reference", "tolerance", "cost")


class FamilyError(ValueError):
    """A family broke its contract: the message names the family, the method and what was wrong."""


@dataclass(frozen=True)
class Feature:
    """One feature of a family's shapes. capture_fixed: known when a CUDA graph is captured (a padded
    token count is; a kv_len is not). pad_to: the sizes an int feature is padded to under capture,
    ascending. min/max: the values `choose()` accepts (inclusive; None: unbounded)."""

    kind: str
    capture_fixed: bool = False
    pad_to: list[int] | None = None
    min: float | None = None
    max: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in FEATURE_KINDS:
            raise FamilyError(f"Feature kind {self.kind!r} is not one of {', '.join(FEATURE_KINDS)}")
        if not isinstance(self.capture_fixed, bool):
            raise FamilyError(f"Feature capture_fixed must be True or False, got {self.capture_fixed!r}")
        if self.pad_to is not None:
            pads = list(self.pad_to)
            ok = self.kind == "int" and pads and all(_is_int(p) and p >= 1 for p in pads)
            if not ok or pads != sorted(set(pads)):
                raise FamilyError(
                    f"Feature pad_to must be ascending distinct ints >= 1 of an int feature, got {self.pad_to!r}"
                )
        for bound in ("min", "max"):
            value = getattr(self, bound)
            if value is not None and (self.kind == "category" or not _is_finite(value)):
                raise FamilyError(
                    f"Feature {bound} must be a finite number of an int or float feature, got {value!r}"
                )
        if self.min is not None and self.max is not None and self.min > self.max:
            raise FamilyError(f"Feature min {self.min!r} is above max {self.max!r}")


@dataclass(frozen=True)
class Candidate:
    """One candidate: an id (letters, digits, `_.+-`; it names the candidate in every artifact) and
    its parameters (JSON scalars), which `prepare` reads."""

    id: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not CANDIDATE_ID.fullmatch(self.id):
            raise FamilyError(f"Candidate id {self.id!r} must match {CANDIDATE_ID.pattern}")
        if not isinstance(self.params, Mapping) or not all(isinstance(k, str) for k in self.params):
            raise FamilyError(f"Candidate {self.id!r}: params must be a mapping with str keys")
        bad = [k for k, v in self.params.items() if not _is_scalar(v)]
        if bad:
            raise FamilyError(f"Candidate {self.id!r}: params {', '.join(bad)} are not JSON scalars")


@dataclass(frozen=True)
class Step:
    """One scheduler step of the serving engine (headroom.trace.step_table): its index in the window,
    time, kind, every decoding sequence's kv_len, every prefill chunk's (q_len, kv_len), and the new
    tokens it runs (one per decode plus each chunk's q_len)."""

    index: int
    time_s: float
    kind: str
    decode_kv_lens: tuple[int, ...]
    prefill_chunks: tuple[tuple[int, int], ...]
    tokens: int


@runtime_checkable
class Family(Protocol):
    """What a study measures (docs/families.md has each member's meaning and a worked example)."""

    name: str
    version: str
    features: dict[str, Feature]

    def shapes(self, step: Step) -> list[dict]: ...
    def candidates(self) -> list[Candidate]: ...
    def supports(self, candidate: Candidate, shape: dict) -> bool: ...
    def inputs(self, shape: dict, *, seed: int, device: str) -> object: ...
    def prepare(self, candidate: Candidate, shape: dict, inputs: object): ...
    def reference(self, shape: dict, inputs: object): ...
    def tolerance(self, dtype: str) -> tuple[float, float]: ...
    def cost(self, shape: dict) -> dict: ...


# -- checks ------------------------------------------------------------------------------------------


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_finite(v: Any) -> bool:
    return (isinstance(v, int | float) and not isinstance(v, bool)) and math.isfinite(v)


def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | bool) or _is_finite(v)


def label(family: Any) -> str:
    name = getattr(family, "name", None)
    return f"family {name!r}" if isinstance(name, str) else f"family {type(family).__name__}"


def check_family(family: Any) -> None:
    """The family's declared members (name, version, features, methods), or FamilyError."""
    who = label(family)
    name, version = getattr(family, "name", None), getattr(family, "version", None)
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise FamilyError(f"{who}: name must be a str matching {NAME.pattern}, got {name!r}")
    if not isinstance(version, str) or not version.strip():
        raise FamilyError(f"{who}: version must be a non-empty str, got {version!r}")
    features = getattr(family, "features", None)
    if not isinstance(features, Mapping) or not features:
        raise FamilyError(f"{who}: features must be a non-empty dict of name -> Feature")
    for fname, feat in features.items():
        if not isinstance(fname, str) or not FEATURE_NAME.fullmatch(fname) or fname in FRAMEWORK_COLUMNS:
            raise FamilyError(
                f"{who}: feature name {fname!r} must match {FEATURE_NAME.pattern} and not be one of the "
                f"framework's columns ({', '.join(sorted(FRAMEWORK_COLUMNS))})"
            )
        if not isinstance(feat, Feature):
            raise FamilyError(f"{who}: feature {fname!r} must be a headroom.families.Feature, got {feat!r}")
    missing = [m for m in METHODS if not callable(getattr(family, m, None))]
    if missing:
        raise FamilyError(f"{who}: no method {', '.join(missing)} (docs/families.md lists the contract)")
    _check_config_table(family, who)
    _check_captured_by(family, who)


def _check_captured_by(family: Any, who: str) -> None:
    """The optional member ``captured_by``: None, or the name of a declared capture-fixed int
    feature with ``pad_to``. A call whose value is at most the largest ``pad_to`` size runs under
    CUDA-graph replay when deployed (the server captured a graph for its padded size; vLLM's
    piecewise graphs hold a MoE layer of any step up to its capture limit), a larger one eager."""
    name = getattr(family, "captured_by", None)
    if name is None:
        return
    feat = family.features.get(name) if isinstance(name, str) else None
    if not (isinstance(feat, Feature) and feat.kind == "int" and feat.capture_fixed and feat.pad_to):
        raise FamilyError(
            f"{who}: captured_by must name a declared capture-fixed int feature with pad_to, got {name!r:.80}"
        )


def _check_config_table(family: Any, who: str) -> None:
    """The optional member ``config_table``: None, or a ConfigTable keyed on a declared int feature
    whose every config is among the family's candidates (the family adds them; this catches one that
    forgot)."""
    from headroom.families.tables import ConfigTable

    table = getattr(family, "config_table", None)
    if table is None:
        return
    if not isinstance(table, ConfigTable):
        raise FamilyError(
            f"{who}: config_table must be a headroom.families.ConfigTable or None, got {table!r:.120}"
        )
    feat = family.features.get(table.feature)
    if not isinstance(feat, Feature) or feat.kind != "int":
        raise FamilyError(f"{who}: config_table is keyed on {table.feature!r}, not a declared int feature")
    ids = {c.id for c in check_candidates(family, call(family, "candidates"))}
    absent = sorted({c for _, c in table.entries} - ids)
    if absent:
        raise FamilyError(
            f"{who}: config_table names configs that are not candidates: {', '.join(absent)} "
            "(the family must add them to candidates())"
        )


def check_shape(family: Any, shape: Any, where: str) -> dict:
    """One shape dict from `shapes(step)`: every declared feature present, of its kind and in its
    bounds, and every value a JSON scalar (the shape is stored as JSON); FamilyError otherwise."""
    who = f"{label(family)}: {where}"
    if not isinstance(shape, Mapping) or not all(isinstance(k, str) for k in shape):
        raise FamilyError(f"{who}: a shape must be a dict with str keys, got {shape!r:.200}")
    missing = [f for f in family.features if f not in shape]
    if missing:
        raise FamilyError(f"{who}: shape {dict(shape)!r:.200} lacks feature(s) {', '.join(missing)}")
    clash = sorted(FRAMEWORK_COLUMNS & set(shape))
    if clash:
        raise FamilyError(f"{who}: shape keys {', '.join(clash)} are the framework's own columns")
    for key, value in shape.items():
        if not _is_scalar(value):
            raise FamilyError(f"{who}: shape key {key!r} = {value!r:.80} is not a JSON scalar")
    for fname, feat in family.features.items():
        _check_value(who, fname, feat, shape[fname])
    return dict(shape)


def _check_value(who: str, fname: str, feat: Feature, value: Any) -> None:
    if feat.kind == "category":
        ok = isinstance(value, str) and value != "" and not set(value) & {"|", "="}
        if not ok:
            raise FamilyError(
                f"{who}: feature {fname!r} (category) must be a non-empty str without '|' or '=', got {value!r}"
            )
        return
    ok = _is_int(value) if feat.kind == "int" else _is_finite(value)
    if not ok:
        raise FamilyError(f"{who}: feature {fname!r} ({feat.kind}) got {value!r}")
    if (feat.min is not None and value < feat.min) or (feat.max is not None and value > feat.max):
        raise FamilyError(f"{who}: feature {fname!r} = {value!r} is outside [{feat.min}, {feat.max}]")


def check_candidates(family: Any, found: Any) -> list[Candidate]:
    """The list `candidates()` returned: Candidates with distinct ids, at least one."""
    who = f"{label(family)}: candidates()"
    if not isinstance(found, list | tuple) or not found:
        raise FamilyError(f"{who} must return a non-empty list of Candidate, got {found!r:.200}")
    bad = [c for c in found if not isinstance(c, Candidate)]
    if bad:
        raise FamilyError(f"{who}: {bad[0]!r:.120} is not a headroom.families.Candidate")
    ids = [c.id for c in found]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise FamilyError(f"{who}: candidate ids {', '.join(dup)} repeat")
    return list(found)


def check_tolerance(family: Any, dtype: str, found: Any) -> tuple[float, float]:
    ok = isinstance(found, tuple | list) and len(found) == 2 and all(_is_finite(x) and x > 0 for x in found)
    if not ok:
        raise FamilyError(
            f"{label(family)}: tolerance({dtype!r}) must return (rel, abs), both > 0, got {found!r}"
        )
    return float(found[0]), float(found[1])


def check_cost(family: Any, shape: dict, found: Any) -> dict[str, float]:
    ok = isinstance(found, Mapping) and {"flops", "bytes"} <= set(found)
    ok = ok and all(_is_finite(found[k]) and found[k] >= 0 for k in ("flops", "bytes"))
    if not ok:
        raise FamilyError(
            f"{label(family)}: cost({shape!r:.120}) must return {{'flops': >= 0, 'bytes': >= 0}}, got {found!r:.120}"
        )
    return {"flops": float(found["flops"]), "bytes": float(found["bytes"])}


def call(family: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """family.method(*args, **kwargs); an exception it raises becomes one FamilyError naming both."""
    try:
        return getattr(family, method)(*args, **kwargs)
    except FamilyError:
        raise
    except Exception as exc:
        raise FamilyError(
            f"{label(family)}: {method}() raised {type(exc).__name__}: {str(exc)[:400]}"
        ) from exc
