"""Load a study's dispatch table (results/<study>/dispatch.json) and choose a candidate per shape.

    from headroom import dispatch
    here = {"gpu_name": "NVIDIA H200", "sm_count": 132, "heads_q": 32, "heads_kv": 8, "head_dim": 128,
            "dtype": "bfloat16", "kernel_source_blake3": dispatch.kernel_source_blake3(dispatch.current_kernel_code()),
            "torch": torch_version}                                         # what this server is
    table = dispatch.load("results/default/dispatch.json", identity=here)
    cand = table.choose(phase="decode", batch=5, q_len=1, kv_len=2064)   # the profile routes by step
    cand.id, cand.block_m, cand.rope           # what to plan and run (kernels.deploy.run(cand, ...))

``load`` verifies the file against its BLAKE3 sidecar when there is one, reads every scope's policy
into ``headroom.policies``' objects (the one lookup implementation: the same code the decision fitted
and scored), and with ``identity`` checks what the table is valid for (``check``): another GPU model
or SM count, another partition (heads, head_dim) or dtype, or another kernel source hash is refused
(``DispatchRefused``, naming each difference); another driver, torch or Triton version only warns
(``VersionWarning``: servers pin their own). Neither loading nor choosing imports torch.

A ``Dispatch`` answers for one scope (a mode, ``graph`` or ``eager``, or a profile part) or for the
deployment profile (``mode=None``, the default): then ``choose`` routes each call by its ``step``
feature (``decode-only``, ``mixed``), or by ``phase`` where no step is given (decode -> decode-only,
prefill -> mixed, as the decision read the trace), to that step's part. ``features`` names what a
scope's table keys on (e.g. phase and batch for ``batch-keyed``, shape_key for ``exact-key``).
"""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headroom import policies

HARD = ("gpu_name", "sm_count", "heads_q", "heads_kv", "head_dim", "dtype", "kernel_source_blake3")
SOFT = ("driver", "torch", "triton")
SCHEMA_VERSIONS = (1,)
WHAT = {
    "gpu_name": "GPU model",
    "sm_count": "SM count",
    "heads_q": "partition (heads_q)",
    "heads_kv": "partition (heads_kv)",
    "head_dim": "partition (head_dim)",
    "dtype": "dtype",
    "kernel_source_blake3": "kernel source hash",
}


class DispatchError(ValueError):
    """A dispatch table that cannot be read (missing, corrupt, another schema)."""


class DispatchRefused(DispatchError):
    """A dispatch table that is not valid for this machine, partition, dtype or kernel source."""


class VersionWarning(UserWarning):
    """A driver, torch or Triton version other than the study's."""


@dataclass(frozen=True)
class Candidate:
    """A candidate to run: its id and what ``kernels.deploy`` needs to plan it."""

    id: str
    tile: int | None
    block_m: int | None
    block_n: int | None
    num_warps: int | None
    num_stages: int | None
    rope: str | None
    generation: int
    backend: str
    fused: bool


def kernel_source_blake3(code: dict[str, str]) -> str:
    """One BLAKE3 of the kernel sources: over the sorted (path, BLAKE3) pairs under kernels/ of a
    provenance's ``code`` (what the portfolio ran) or of ``current_kernel_code``."""
    import blake3

    lines = sorted(f"{p}\t{h}" for p, h in code.items() if Path(p).parts[:1] == ("kernels",))
    if not lines:
        raise DispatchError("no kernels/ source among the recorded code: cannot name the kernel source")
    return blake3.blake3("\n".join(lines).encode()).hexdigest()


def current_kernel_code(root: str | Path | None = None) -> dict[str, str]:
    """{path: BLAKE3} of the kernels/ sources the portfolio stage would run from this checkout."""
    from headroom.core import artifacts, sources

    root = Path(root) if root is not None else sources.PROJECT_ROOT
    files = [p for p in sources.closure("scripts/portfolio.py", root) if p.startswith("kernels/")]
    return {p: artifacts.hash_file(root / p) for p in files}


def check(table: dict, identity: dict) -> None:
    """Refuse (``DispatchRefused``, every difference named) a table recorded for another GPU model,
    SM count, partition, dtype or kernel source; warn (``VersionWarning``) on other versions."""
    recorded = table.get("identity") or {}
    hard, soft = recorded.get("hard", {}), recorded.get("soft", {})
    missing = [k for k in HARD if k not in identity]
    if missing:
        raise DispatchRefused(f"identity lacks {missing}: the table is valid only for a known {HARD}")
    wrong = [
        f"{WHAT[k]}: the table is for {hard.get(k)!r}, this is {identity[k]!r}"
        for k in HARD
        if str(hard.get(k)) != str(identity[k])
    ]
    if wrong:
        raise DispatchRefused(f"dispatch table of study {table.get('study')!r} refused: " + "; ".join(wrong))
    for k in SOFT:
        if k in identity and str(soft.get(k)) != str(identity[k]):
            warnings.warn(
                f"{k} {identity[k]!r} differs from the study's {soft.get(k)!r}: the choices were timed there",
                VersionWarning,
                stacklevel=2,
            )


def _read(path: Path) -> dict:
    from headroom.core import artifacts

    try:
        data = (
            artifacts.read_verified_bytes(path)[0] if artifacts.sidecar(path).exists() else path.read_bytes()
        )
    except FileNotFoundError:
        raise DispatchError(
            f"{path}: no dispatch table here (run the pipeline: its recommendation stage writes it)"
        ) from None
    except artifacts.ArtifactError as exc:
        raise DispatchError(f"{path}: {exc}") from None
    try:
        table = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DispatchError(f"{path}: not a dispatch table (JSON: {exc})") from None
    if not isinstance(table, dict) or table.get("schema_version") not in SCHEMA_VERSIONS:
        got = table.get("schema_version") if isinstance(table, dict) else type(table).__name__
        raise DispatchError(f"{path}: dispatch schema {got!r}; this loader reads {SCHEMA_VERSIONS}")
    for key in ("scopes", "candidates", "identity"):
        if not isinstance(table.get(key), dict):
            raise DispatchError(f"{path}: no {key!r} mapping")
    return table


def load(path: str | Path, *, mode: str | None = None, identity: dict | None = None) -> Dispatch:
    """The dispatch table at ``path`` for ``mode`` (a scope; None: the deployment profile), checked
    against ``identity`` when given (``check``; keys HARD, optionally SOFT)."""
    path = Path(path)
    table = _read(path)
    if identity is not None:
        check(table, identity)
    try:
        cands = {cid: Candidate(id=cid, **facts) for cid, facts in table["candidates"].items()}
        scopes = {s: (e, policies.from_dict(e["policy"])) for s, e in table["scopes"].items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise DispatchError(f"{path}: a scope or candidate is malformed: {exc!r}") from None
    unknown = sorted({c for _, p in scopes.values() for c in p.candidates} - set(cands))
    if unknown:
        raise DispatchError(f"{path}: policies name candidates {unknown} the table does not describe")
    if mode is not None and mode not in scopes:
        raise DispatchError(f"{path}: no scope {mode!r}; it holds {sorted(scopes)}")
    if mode is None and not table.get("profile"):
        raise DispatchError(f"{path}: no deployment profile; load one of its scopes {sorted(scopes)}")
    return Dispatch(table, cands, scopes, mode)


class Dispatch:
    """One scope's table, or the deployment profile's (see the module docstring)."""

    def __init__(self, table: dict, candidates: dict, scopes: dict, mode: str | None):
        self.table, self.candidates, self.scopes, self.mode = table, candidates, scopes, mode
        self.study, self.verdict = table.get("study"), table.get("verdict")
        self.profile = dict(table.get("profile") or {})
        self.step_of_phase = dict(table.get("step_of_phase") or {})

    def scope_of(self, features: dict[str, Any]) -> str:
        """The scope that answers a call with these features."""
        if self.mode is not None:
            return self.mode
        step = features.get("step")
        if step is None:
            if "phase" not in features:
                raise ValueError("the deployment profile routes by `step` (or `phase`); give one")
            step = self.step_of_phase.get(str(features["phase"]))
        if step not in self.profile:
            raise ValueError(f"step {step!r} is not in the deployment profile {sorted(self.profile)}")
        return self.profile[step]

    def features(self, scope: str | None = None) -> tuple[str, ...]:
        """What the scope's table keys on (the profile: every part's, and ``step`` to route by)."""
        scope = scope or self.mode
        if scope is not None:
            return tuple(self.scopes[scope][1].features)
        parts = [f for s in self.profile.values() for f in self.scopes[s][1].features]
        return ("step", *dict.fromkeys(parts))

    def policy(self, scope: str):
        return self.scopes[scope][1]

    def choose(self, **features: Any) -> Candidate:
        """The candidate the table picks for one call's shape (a shape it never saw: its fallback)."""
        scope = self.scope_of(features)
        policy = self.scopes[scope][1]
        missing = [f for f in policy.features if f not in features]
        if missing:
            raise ValueError(f"{scope} ({policy.name}) keys on {list(policy.features)}; missing {missing}")
        return self.candidates[policy.lookup(features)]

    def expected_gain_pct(self, scope: str | None = None) -> list:
        """[estimate, ci_low, ci_high] of what the scope's choice is expected to gain (%)."""
        return self.scopes[scope or self.mode][0]["expected_gain_pct"]
