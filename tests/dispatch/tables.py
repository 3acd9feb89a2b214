"""Small dispatch tables made in a test: what the recommendation stage writes, around given policies."""

from __future__ import annotations

from headroom import dispatch, policies

IDENTITY = {
    "hard": {
        "gpu_name": "unknown",
        "sm_count": 0,
        "heads_q": 4,
        "heads_kv": 2,
        "head_dim": 32,
        "dtype": "float16",
        "kernel_source_blake3": "e" * 64,
    },
    "soft": dict.fromkeys(dispatch.SOFT, "unknown"),
}
TILE = {"tile": 0, "block_m": 64, "block_n": 32, "num_warps": 4, "num_stages": 2}
CANDIDATES = {
    "t0-q_fused": {**TILE, "rope": "q_fused", "generation": 2, "backend": "triton", "fused": True},
    "t0-unfused": {**TILE, "rope": "unfused", "generation": 2, "backend": "triton", "fused": False},
    "g1-t0-fused": {**TILE, "rope": None, "generation": 1, "backend": "triton", "fused": True},
}
#: A native candidate as the recommendation writes one (no tile of ours: -1, sizes 0; RoPE by the
#: standalone kernel before it)
NATIVE = {
    "native-sdpa-cudnn": {"tile": -1, "block_m": 0, "block_n": 0, "num_warps": 0, "num_stages": 0,
                          "rope": "unfused", "generation": 2, "backend": "sdpa-cudnn", "fused": False},
}  # fmt: skip
#: FlashInfer's candidates as the recommendation writes them (backends in FLASHINFER_BACKENDS)
FLASHINFER = {
    f"native-{b}": {**NATIVE["native-sdpa-cudnn"], "backend": b}
    for b in ("flashinfer-paged", "flashinfer-ragged")
}


def scope(policy: dict, gain=(0.0, None, None)) -> dict:
    """A scope's entry around a policy's data (``to_dict``'s; its class's features where it has none)."""
    data = {"features": list(policies.make(policy["policy"]).features), **policy}
    ship = {"global": "kernel", "phase-keyed": "phase-pair"}.get(data["policy"], "policy")
    kernel = data["candidates"][data.get("fallback", 0)]
    return {
        "verdict": "no-decision",
        "ship": ship,
        "kernel": kernel,
        "policy": data,
        "expected_gain_pct": list(gain),
    }


def table(scopes: dict[str, dict], candidates: dict | None = None, **top) -> dict:
    """A complete dispatch table: ``scopes`` ({scope: its entry, see ``scope``}), ``candidates``
    (default CANDIDATES), the rest as a CPU study's (no profile), ``top`` replacing any of it."""
    return {
        "schema_version": 1,
        "study": "hand",
        "decision_blake3": "d" * 64,
        "rule_version": "test",
        "verdict": "no-decision",
        "identity": IDENTITY,
        "profile": {},
        "step_of_phase": {"decode": "decode-only", "prefill": "mixed"},
        "scopes": scopes,
        "candidates": CANDIDATES if candidates is None else candidates,
        **top,
    }


def global_table(kernel: str = "t0-q_fused", scopes=("eager",), **top) -> dict:
    """The global kernel in each of ``scopes``."""
    policy = {"policy": "global", "candidates": [kernel], "fallback": 0, "table": [[None, 0]]}
    return table({s: scope(policy) for s in scopes}, {kernel: CANDIDATES[kernel]}, **top)


# -- a kernel family's table (issue 32): the toy family of tests/family_sets.py ----------------------
FAMILY_IDENTITY = {
    "hard": {
        "gpu_name": "NVIDIA H200",
        "sm_count": 132,
        "family": "toy",
        "family_version": "2",
        "family_source_blake3": "f" * 64,
    },
    "soft": {"driver": "580.1", "torch": "2.13.0", "triton": "3.6.0"},
}


def family_candidates(configs: dict | None = None) -> dict:
    """{id: a family candidate as dispatch.json holds it} of the toy family's configs."""
    from tests import family_sets as F

    out = {}
    for cid, params in (F.CONFIGS if configs is None else configs).items():
        facts = dict.fromkeys(("fused", *dispatch.CANDIDATE_FIELDS))
        facts.update(num_warps=params.get("num_warps"), num_stages=params.get("num_stages"))
        out[cid] = {**facts, "backend": "family", "params": dict(params)}
    return out


def family_policy(name: str, table: dict, fallback: str, keying=None) -> dict:
    """A fitted policy of the toy family's keys: ``table`` {key: candidate id}."""
    from tests import family_sets as F

    policy = policies.make(name, F.KEYING if keying is None else keying)
    ids = sorted({fallback, *table.values()})
    policy.candidates = tuple(ids)
    policy.table = {k: ids.index(v) for k, v in table.items()}
    policy.fallback = ids.index(fallback)
    return policy.to_dict()


def family_table(scopes: dict[str, dict], candidates: dict | None = None, **top) -> dict:
    """A complete family table: ``scopes`` ({scope: its entry, ``scope``}), the toy family's
    candidates and record, a CPU study's (no profile) unless ``top`` says otherwise."""
    from headroom.analysis import recommendation
    from tests import family_sets as F

    return table(
        scopes,
        family_candidates() if candidates is None else candidates,
        identity=FAMILY_IDENTITY,
        step_of_phase={},
        step_of_kind={"decode-only": "decode-only", "mixed": "mixed", "prefill-only": "mixed"},
        **{"family": recommendation.family_record(F.RECORD), **top},
    )
