"""Recommendations built from the hand-made analysis sets (tests/analysis_sets.py), with known answers.

``recommend(latency, seq, modes)`` runs the decision and the recommendation on a surface and writes
dispatch.json where a test asks; ``write_study`` writes the artifacts `headroom recommend` reads.
"""

from __future__ import annotations

import json
from pathlib import Path

from headroom.analysis import recommendation
from headroom.core import artifacts
from headroom.decide import decision, figures
from tests import analysis_sets as S

FAST = {"bootstrap_resamples": 300, "random_draws": 20}
META = {"study": "hand", "decision_blake3": "d" * 64, "kernel_source_blake3": "e" * 64}


def recommend(
    latency,
    seq: str,
    modes=("graph",),
    out: Path | None = None,
    deployment=None,
    native=None,
    environment=None,
):
    """(trace, decision, recommendation table, dispatch content); with ``out``, dispatch.json there;
    with ``native`` (shape_key -> factor), a native candidate beside ours (``S.with_native``); with
    ``environment``, that environment table instead of ``S.environment()``."""
    tr = S.trace(seq)
    tm = S.timings(tr, latency, modes=modes)
    tm = tm if native is None else S.with_native(tm, native)
    environment = S.environment() if environment is None else environment
    figs = figures.study_figures(tr, tm, deployment=deployment, **FAST)
    d = decision.decide(figs, None, environment, deployment=deployment, min_test_invocations=5)
    table, content = recommendation.build(
        d,
        tr,
        tm,
        None,
        S.candidates() if native is None else S.candidates_with("sdpa-cudnn"),
        S.calibration(),
        environment,
        meta=META,
        policies={"train_fraction": 0.5, **FAST},
        deployment=deployment,
        intermediate_ratio=3.5,
    )
    if out is not None:
        out.write_text(json.dumps(content, allow_nan=False))
    return tr, d, table, content


def write_study(folder: Path, d, table, content) -> Path:
    """decision.parquet, recommendation.parquet and dispatch.json (+ sidecars) of one study folder, the
    recommendation recording the table's BLAKE3 as the stage does (its column and provenance)."""
    prov = {"rule": "x", "params": {}, "inputs": {}, "wildcards": {"study": folder.name}}
    artifacts.write(d, folder / "decision.parquet", kind="decision", provenance=prov)
    content = {**content, "study": folder.name}
    digest = artifacts.write_file(folder / "dispatch.json", json.dumps(content).encode())
    table = table.assign(dispatch_blake3=digest, study=folder.name)
    extra = {"dispatch": {"path": "dispatch.json", "blake3": digest}}
    artifacts.write(
        table, folder / "recommendation.parquet", kind="recommendation", provenance={**prov, "extra": extra}
    )
    return folder


def _engine_scopes(folder: Path, policies: dict, deployment=None, intermediate_ratio=None):
    """(opts, costs, {scope: ModeData}) of a study folder, as the recommendation stage reads it: with
    ``intermediate_ratio`` (its params) and the calibration, eager figures carry the host time a
    decoder layer exposes, as the stage charges them (headroom.families.attention.layer.host_bound)."""
    import glob

    import pandas as pd

    from headroom.decide.policy_eval import checked_modes

    runs = sorted(p for p in glob.glob(str(folder / "portfolio" / "run-*.parquet")) if "samples" not in p)
    portfolio = pd.concat([artifacts.read(p) for p in runs], ignore_index=True)
    options = dict(policies)
    train_fraction = options.pop("train_fraction")
    options.pop("seed", None)
    read = lambda n: artifacts.read(folder / f"{n}.parquet")  # noqa: E731
    calibration = read("calibration") if (folder / "calibration.parquet").is_file() else None
    opts, costs, modes = checked_modes(
        read("trace"), portfolio, read("lifecycle"), train_fraction, options, calibration, intermediate_ratio
    )
    deployment = figures.deployment_profile(deployment)
    return opts, costs, recommendation.scopes_of({m.mode: m for m in modes}, read("decision"), deployment)


def assert_study_ships(folder: Path) -> pd.DataFrame:  # noqa: F821
    """A study's recommendation and dispatch table load, name the decision and table they came from,
    and the table's choice on every trace row of each scope is the engine's (the decision's kernel,
    or the policy refit as the stage fits it); an unseen shape falls back. Returns the table."""
    from headroom import dispatch
    from headroom.decide import engine

    rec = artifacts.read(folder / "recommendation.parquet")
    d = artifacts.read(folder / "decision.parquet")
    path = folder / "dispatch.json"
    prov = artifacts.read_provenance(folder / "recommendation.parquet")
    assert set(rec["dispatch_blake3"]) == {artifacts.verify(path)} == {prov["extra"]["dispatch"]["blake3"]}
    assert set(rec["decision_blake3"]) == {artifacts.recorded_hash(folder / "decision.parquet")}
    policies = prov["params"]["policies"]
    ratio = (prov["params"].get("recommendation") or {}).get("intermediate_ratio")
    opts, costs, scopes = _engine_scopes(
        folder, policies, prov["params"]["decision"].get("deployment"), ratio
    )
    assert set(rec["scope"]) == set(scopes)
    for scope, md in scopes.items():
        r = rec[rec["scope"] == scope].iloc[0]
        rows = d[(d["mode"] == scope) & d["figure"].astype(str).str.startswith("kernel_vs_")]
        assert rows.empty or set(rows["kernel"]) == {r["our_kernel"]}, scope  # our best kernel
        gap = d[(d["mode"] == scope) & (d["figure"] == "gap_to_oracle")]
        assert set(gap["kernel"]) == {r["kernel"]}, scope  # the global kernel, ours or a native
        table = dispatch.load(path, mode=scope)
        expect = lambda s, k=r["kernel"]: k  # noqa: E731
        if r["ship"] != "kernel":
            L = engine.layout(md, opts, costs, policies["train_fraction"], policies.get("seed", 0))
            arm = "free" if r["ship"] == "phase-pair" else _selected_fusion(d, scope)
            expect = recommendation.refit(md, L, opts, r["policy"], arm, policies.get("seed", 0)).lookup
        for shape in md.features.to_dict("records"):
            assert table.choose(**shape).id == expect(shape), (scope, shape)
        fallback = table.policy(scope)
        if fallback.name in ("global", "exact-key", "bucketed", "batch-keyed", "regret-aware"):
            unseen = {
                **md.features.iloc[0].to_dict(),
                "shape_key": "unseen",
                "batch": 4099,
                "kv_len": 1 << 20,
            }
            assert table.choose(**unseen).id == fallback.candidates[fallback.fallback], scope
    if any("@" in s for s in scopes):
        dispatch.load(path)  # the deployment profile
    return rec


def _selected_fusion(d, scope: str) -> str:
    row = d[(d["mode"] == scope) & (d["figure"] == "policy_gain")].iloc[0]
    return str(row["selected_fusion"])


# -- a study folder's dispatch table tampered with (issue 31, cases 1-4) ----------------------------
def _c_wants_tile2(k, t, f, r, m, i):  # graph mode ships batch-keyed over two candidates
    fast = (k == "C" and t == 2) or (k != "C" and t == 0)
    return S.BASE_US[k] * (0.6 if fast else 1.0) * (1.0 + 0.002 * ((r * 7 + i * 3 + t) % 5 - 2))


def _tile1(k, t, f, r, m, i):
    return S.BASE_US[k] * (0.9 if t == 1 else 1.0)


def two_studies(results: Path) -> tuple[Path, Path]:
    """Study folders results/hand (batch-keyed in graph mode) and results/other (tile 1 everywhere)."""
    _, d, table, made = recommend(_c_wants_tile2, "ADCC" * 6)
    hand = write_study(results / "hand", d, table, made)
    _, d, table, made = recommend(_tile1, "ADCC" * 6)
    return hand, write_study(results / "other", d, table, made)


def _forge(hand: Path, other: Path) -> None:
    """Another kernel for unseen shapes (the policy's fallback), the sidecar rewritten to match."""
    forged = json.loads((hand / "dispatch.json").read_text())
    policy = forged["scopes"]["graph"]["policy"]
    assert len(policy["candidates"]) == 2
    policy["fallback"] = 1 - policy["fallback"]
    artifacts.write_file(hand / "dispatch.json", json.dumps(forged).encode())


def _swap(hand: Path, other: Path) -> None:
    for name in ("dispatch.json", "dispatch.json.blake3"):
        (hand / name).write_bytes((other / name).read_bytes())


def _delete(hand: Path, other: Path) -> None:
    for name in ("dispatch.json", "dispatch.json.blake3"):
        (hand / name).unlink()


def _link(hand: Path, other: Path) -> None:
    (hand / "dispatch.json").unlink()
    (hand / "dispatch.json").symlink_to("/etc/passwd")
    artifacts.record_hash(hand / "dispatch.json")  # a sidecar that matches the link's target


#: case -> (what it does to study folder `hand` given `other`, what a refusal says: the file, both hashes)
TAMPER = {
    "forged": (_forge, r"dispatch.json: BLAKE3 [0-9a-f]{64}, but recommendation.parquet records [0-9a-f]{64}"),
    "swapped": (_swap, r"dispatch.json: BLAKE3 [0-9a-f]{64}, but recommendation.parquet records [0-9a-f]{64}"),
    "deleted": (_delete, r"dispatch.json: missing, but recommendation.parquet records its BLAKE3 [0-9a-f]{64}"),
    "linked": (_link, r"dispatch.json: a symbolic link to /etc/passwd, not the dispatch table the recommendation "
               r"stage wrote \(recommendation.parquet records BLAKE3 [0-9a-f]{64}, the link's target has [0-9a-f]{64}\)"),
}  # fmt: skip
