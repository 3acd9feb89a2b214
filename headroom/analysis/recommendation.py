"""What the verdict ships: recommendation.parquet and dispatch.json, from the decision engine's rows.

Per scope — each mode (``graph``, ``eager``) and each deployment-profile part (``<mode>@<step>``;
a family captured by a feature: ``graph@captured`` and ``eager@uncaptured``; family ``profile``) —
the decision's rows already hold the global kernel refit on all runs, chosen among every candidate
that passed correctness, natives included where they compete (the ``gap_to_oracle`` row's
``kernel``, ``runs_agree``), and our best kernel (the global one among ours alone) with its
trace-weighted speedups with CIs over the best unfused kernel of ours and each native backend
(``kernel_vs_*``: ``our_kernel``, ``alternative``, ``speedup``). The recommendation reads them; it
does not recompute them. What it adds, per scope:

* what to ship (``ship``): ``policy`` when the scope's family says ``continue`` on the policy figure
  (``policy_gain`` exceeds its threshold): the policy the runs selected most (decision's
  ``selected_policy`` / ``selected_fusion``), refit on every run's whole trace as the engine fits
  (``registry`` / ``headroom.policies.fit``: the runs' mean latency plus plan charges, regret-aware's
  test on the runs' pooled noise), its expected gain the decision's cross-run ``policy_gain`` with CI;
  else ``phase-pair`` when the gap is a pure phase split (``phase_split_gain``'s CI above 0, and the
  gap left within the phases, ``made_of_fusion_within_phase`` + ``made_of_tile_within_phase``, below
  the gap threshold): phase-keyed refit on all runs, expected gain ``phase_split_gain``; otherwise
  ``kernel``, the global kernel (one candidate for every shape, expected gain 0 by definition; under
  a ``continue`` on the gap alone no deployable policy captures the headroom yet: building one is
  what ``continue`` asks for); the global kernel may be a native (``backend`` says which), never on
  eager timings that include the host's launch path (there natives do not compete:
  ``measured.ModeData.natives_compete``);
* the natives the shipped choice routes to (``natives_shipped``, comma-separated: the global kernel
  where it is one, and the shipped policy's native candidates);
* the kernel's trace-weighted latency (µs per invocation: mean over runs and the scope's invocations);
* what each figure is worth per decoder layer (``layer_model``): the same saving as % of the time of a
  decoder layer running the shipped kernel, the layer being attention plus its GEMMs.

A kernel family's study (``family``: what its trace records of it, provenance ``extra.family``) is
keyed by the family's declared features (``keying``) and reads none of attention's columns: the
decoder-layer model is attention's and does not apply (its columns null), nor do the candidate
columns of attention's kernels (tile, block sizes, RoPE, fused, generation: null; ``num_warps`` and
``num_stages`` where the candidate's params hold them, as a Triton config's do; ``backend``
``family``), nor the partition (heads, head_dim, dtype) or the attention kernel source hash. Its rows
say which family (``kernel_family``, ``family_version``, ``family_source_blake3``) and what the
shipped candidate's params are (``params``, JSON).

dispatch.json holds every scope's fitted policy as data (``headroom.policies``' ``to_dict``; the
global kernel is the ``global`` policy with one candidate), the candidates it uses, the profile (step
type -> scope) and the identity it is valid for; ``headroom.dispatch`` loads it. A family's table also
holds the family's record (``family``: name, version, spec, source BLAKE3, declared features, and
``captured_by`` where the family has it: then the profile is ``captured`` -> ``graph@captured``,
``uncaptured`` -> ``eager@uncaptured``, and a server routes a call by that feature) and how its step
kinds route (``step_of_kind``); its identity is the GPU's and the family's
(``headroom.dispatch.FAMILY_HARD``), its candidates carry their params.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from headroom.core.contracts import ATTENTION as ATTENTION_NAME
from headroom.core.names import CATEGORY_KEYED, CATEGORY_SPLIT_GAIN
from headroom.decide import engine, figures, measured, registry
from headroom.decide.decision import figure_row, pure_category_split
from headroom.decide.measured import checked_modes
from headroom.dispatch import ABSENT, CANDIDATE_FIELDS, FAMILY_HARD, HARD, SOFT, validate
from headroom.families.attention.keying import ATTENTION
from headroom.families.attention.layer import gemm_us, rates
from headroom.policies.shapes import Keying

SCHEMA_VERSION = 1
BEST_UNFUSED = "best_unfused"  # the alternative of the kernel_vs_best_unfused rows; the others are natives
#: The columns of attention's kernels and decoder layer, null in a family's rows
ATTENTION_CANDIDATE_COLUMNS = ("tile", "block_m", "block_n", "rope", "generation", "fused")
LAYER_COLUMNS = (
    "attention_layer_pct",
    "attention_layer_prefill_pct",
    "attention_layer_decode_pct",
    "expected_gain_layer_pct",
    "gap_layer_pct",
    "speedup_layer_pct",
    "speedup_layer_ci_low",
    "speedup_layer_ci_high",
)


def scopes_of(modes: dict, decision: pd.DataFrame, deployment: dict) -> dict:
    """{scope: ModeData} of every mode and profile part the decision holds rows for."""
    out = {}
    held = set(decision["mode"].astype(str))
    for mode, md in modes.items():
        if mode in held:
            out[mode] = md
    for name, mode in deployment.items():
        scope = f"{mode}@{name}"
        if scope in held and mode in modes and (sub := measured.part(modes[mode], name)) is not None:
            out[scope] = sub
    return out


def refit(md, L: engine.Layout, opts, name: str, arm: str, seed: int):
    """Policy ``name`` in ``arm`` fitted on every run's whole trace: the runs' mean latency (and its
    squared SE, for regret-aware's test) plus each candidate's plan charge, as the engine fits."""
    cols = L.cols[arm]
    runs = md.us.shape[0]
    train = registry.Train(
        md.features,
        md.us.mean(axis=0)[:, cols],
        tuple(md.names[c] for c in cols),
        md.sem2.mean(axis=0)[:, cols] / runs,
        z=L.z,
        deviation_cost_us=L.deviation_us,
        clusters=opts.clusters,
        seed=seed,
        charge_us=L.plan[:, cols],
        weight=L.weight,
    )
    return compact(registry.make(name, md.keying).fit(train))


def compact(policy):
    """The policy with only the candidates it uses (same choices, indices renumbered)."""
    used = sorted({policy.fallback, *policy.table.values()})
    index = {old: new for new, old in enumerate(used)}
    policy.candidates = tuple(policy.candidates[i] for i in used)
    policy.table = {k: index[v] for k, v in policy.table.items()}
    policy.fallback = index[policy.fallback]
    return policy


def global_policy(kernel: str, keying: Keying = ATTENTION):
    policy = registry.make("global", keying)
    policy.candidates, policy.table, policy.fallback = (kernel,), {None: 0}, 0
    return policy


def what_to_ship(rows: pd.DataFrame, md, L, opts, seed: int, kernel: str) -> tuple[str, object, dict]:
    """(ship, fitted policy, expected-gain figure row) of one scope (see the module docstring)."""
    gap, pg = figure_row(rows, "gap_to_oracle"), figure_row(rows, "policy_gain")
    if str(rows["mode_verdict"].iloc[0]) == "continue" and pg.get("state") == "exceeds":
        name, arm = pg.get("selected_policy"), pg.get("selected_fusion")
        if not isinstance(name, str) or not isinstance(arm, str):
            raise ValueError(
                f"decision ({rows['mode'].iloc[0]}): a `continue` without selected_policy/_fusion"
            )
        return "policy", refit(md, L, opts, name, arm, seed), pg
    if gap and pure_category_split(rows, float(gap.get("threshold", np.inf))):
        return (
            "phase-pair",
            refit(md, L, opts, CATEGORY_KEYED, "free", seed),
            figure_row(rows, CATEGORY_SPLIT_GAIN),
        )
    return "kernel", global_policy(kernel, md.keying), {"estimate": 0.0, "ci_low": np.nan, "ci_high": np.nan}


def kernel_of(rows: pd.DataFrame, md, L, among: str = "free") -> tuple[str, int]:
    """(kernel, runs agreeing) as the decision's rows name it: the global kernel among every competing
    candidate (``among`` 'free': its ``gap_to_oracle`` row) or our best kernel (``engine.OURS``: its
    ``kernel_vs_*`` rows); where the rows name none, the engine's own refit (``figures.kernel``, the
    same function); ('', 0) for our best kernel of a study without a candidate of ours."""
    if among not in L.arm_cols:
        return "", 0
    figure = rows["figure"].astype(str)
    at = figure.eq("gap_to_oracle") if among == "free" else figure.str.startswith(figures.KERNEL_ROWS)
    k = rows[at & rows["kernel"].notna()] if "kernel" in rows else rows.iloc[0:0]
    if len(k):
        return str(k["kernel"].iloc[0]), int(k["runs_agree"].iloc[0])
    return figures.kernel(md, L, among)


# ----------------------------------------------------------------------------------------------
# What it is worth per decoder layer
# ----------------------------------------------------------------------------------------------


def layer_model(md, col: int, gemm: np.ndarray) -> dict:
    """The shipped kernel's attention time against a decoder layer's: {'attention': summed µs,
    'layer': attention + GEMMs, and each phase's attention share of its layers (%)}."""
    attn = md.us[..., col].mean(axis=0)  # (n,) µs per invocation, mean over runs
    phase = md.features["phase"].astype(str).to_numpy()
    out = {"attention": float(attn.sum()), "layer": float(attn.sum() + gemm.sum())}
    for ph in ("prefill", "decode"):
        m = phase == ph
        share = 100.0 * attn[m].sum() / (attn[m].sum() + gemm[m].sum()) if m.any() else math.nan
        out[ph] = float(share)
    return out


def per_layer(worth: dict, pct: float, of_oracle: bool = False) -> float:
    """A saving of ``pct`` % of attention time (of the oracle's, for the gap) as % of a layer's time."""
    share = worth["attention"] / worth["layer"] if worth["layer"] > 0 else math.nan
    if of_oracle:
        return pct / (1.0 + pct / 100.0) * share
    return pct * share


# ----------------------------------------------------------------------------------------------
# The artifact
# ----------------------------------------------------------------------------------------------


def _num(x) -> float:
    return float(x) if x is not None and pd.notna(x) else math.nan


def scope_rows(
    scope: str, rows: pd.DataFrame, md, ship: tuple, kernel: tuple, worth: dict | None, ours: str
) -> list[dict]:
    """One row per alternative (best unfused, each native) of one scope, its speedup over our best
    kernel ``ours``; ``worth`` None (a kernel family: no decoder-layer model) leaves the per-layer
    columns null."""
    if worth is None:
        worth = {"attention": math.nan, "layer": math.nan, "prefill": math.nan, "decode": math.nan}
    kind, policy, gain = ship
    name, agree = kernel
    gap = figure_row(rows, "gap_to_oracle")
    col = list(md.names).index(name)
    base = {
        "scope": scope,
        "family": str(rows["family"].iloc[0]),
        "verdict": str(rows["mode_verdict"].iloc[0]),
        "headline_verdict": str(rows["verdict"].iloc[0]),
        "ship": kind,
        "policy": policy.name,
        "kernel": name,
        "our_kernel": ours,
        "runs_agree": agree,
        "runs": int(md.us.shape[0]),
        "latency_us": float((md.us[..., col] * _weight(md)).sum() / (_weight(md).sum() * md.us.shape[0])),
        "expected_gain_pct": _num(gain.get("estimate")),
        "expected_gain_ci_low": _num(gain.get("ci_low")),
        "expected_gain_ci_high": _num(gain.get("ci_high")),
        "gap_pct": _num(gap.get("estimate")),
        "gap_ci_low": _num(gap.get("ci_low")),
        "gap_ci_high": _num(gap.get("ci_high")),
        "attention_layer_pct": 100.0 * per_layer(worth, 1.0),
        "attention_layer_prefill_pct": worth["prefill"],
        "attention_layer_decode_pct": worth["decode"],
        "expected_gain_layer_pct": per_layer(worth, _num(gain.get("estimate"))),
        "gap_layer_pct": per_layer(worth, _num(gap.get("estimate")), of_oracle=True),
        # eager timings recorded back to back: a speedup over a native compares host launch paths,
        # not kernels; no native competes there and `headroom recommend` states none
        "host_included": md.host_included,
    }
    alts = rows[rows["figure"].astype(str).str.startswith(figures.KERNEL_ROWS)]
    out = []
    for _, r in alts.iterrows():
        s = [_num(r[c]) for c in ("estimate", "ci_low", "ci_high")]
        alt = str(r["figure"])[len(figures.KERNEL_ROWS) :]
        out.append(
            {
                **base,
                "alternative": alt,
                "speedup": s[0],
                "speedup_ci_low": s[1],
                "speedup_ci_high": s[2],
                "speedup_layer_pct": per_layer(worth, 100.0 * (s[0] - 1.0)),
                "speedup_layer_ci_low": per_layer(worth, 100.0 * (s[1] - 1.0)),
                "speedup_layer_ci_high": per_layer(worth, 100.0 * (s[2] - 1.0)),
            }
        )
    native = None if md.host_included else faster_native(out)
    for r in out:
        r["faster_native"] = native["alternative"] if native else ""
        r["faster_native_speedup"] = native["speedup"] if native else math.nan
    return out or [{**base, "alternative": "", "faster_native": "", "faster_native_speedup": math.nan}]


def faster_native(rows: list[dict]) -> dict | None:
    """The row of the fastest native backend that is faster than our best kernel (our speedup over it
    below 1, its CI's upper end too where there is one), or None: the native the global kernel
    usually is then (it is chosen on the runs' mean latency and plan charges, so it can differ)."""
    slower = [
        r
        for r in rows
        if r["alternative"] not in ("", BEST_UNFUSED)
        and r["speedup"] < 1.0
        and not r["speedup_ci_high"] >= 1.0  # NaN (no CI): the estimate alone
    ]
    return min(slower, key=lambda r: r["speedup"]) if slower else None


def _weight(md) -> np.ndarray:
    return measured.weights_of(md.features)


def candidate_facts(candidates: pd.DataFrame, ids) -> dict:
    """{candidate id: its tile, RoPE placement, generation, backend, fused} (generation 1 and
    backend 'triton' where an older candidates table lacks the column)."""
    table = candidates.set_index("candidate")
    out = {}
    for cid in sorted(set(ids)):
        if cid not in table.index:
            raise ValueError(f"candidates: no row for {cid!r}, which the recommendation ships")
        r = table.loc[cid]
        facts = {"fused": bool(r["fused"])}
        for c in CANDIDATE_FIELDS:
            v = r.get(c, {"generation": 1, "backend": "triton", "rope": None}.get(c))
            facts[c] = v.item() if hasattr(v, "item") else (None if v is None or pd.isna(v) else v)
        out[cid] = facts
    return out


def family_candidate_facts(candidates: pd.DataFrame, ids) -> dict:
    """{candidate id: a kernel family's candidate as dispatch.json holds it}: its params (the
    candidates table's JSON), the attention fields null, num_warps/num_stages where the params hold
    them as integers (a Triton config's), backend ``family``."""
    table = candidates.set_index("candidate")
    out = {}
    for cid in sorted(set(ids)):
        if cid not in table.index:
            raise ValueError(f"candidates: no row for {cid!r}, which the recommendation ships")
        params = json.loads(str(table.loc[cid, "params"]))
        facts = dict.fromkeys(("fused", *CANDIDATE_FIELDS))
        for c in ("num_warps", "num_stages"):
            v = params.get(c)
            facts[c] = int(v) if isinstance(v, int) and not isinstance(v, bool) else None
        out[cid] = {**facts, "backend": "family", "params": params}
    return out


def family_identity(environment: pd.DataFrame, family: dict) -> dict:
    """A family's table's identity: the GPU and the family as its artifacts record it (``FAMILY_HARD``),
    and the versions a server may differ in."""
    env = environment.iloc[0] if environment is not None and len(environment) else pd.Series(dtype=object)
    hard = {
        "gpu_name": str(env.get("gpu_name", "unknown")),
        "sm_count": int(env.get("sm_count", 0) or 0),
        "family": str(family["name"]),
        "family_version": str(family["version"]),
        "family_source_blake3": str(family["source_blake3"]),
    }
    return {"hard": {k: hard[k] for k in FAMILY_HARD}, "soft": {k: str(env.get(k, "unknown")) for k in SOFT}}


def family_record(family: dict) -> dict:
    """What a family's table records of it: name, version, spec, source BLAKE3 and its declared
    features in declared order (``feature_order``), its config table where it has one (its
    policies' keys carry the table: ``Keying.of_record`` reads it back) and ``captured_by`` where it
    has one (the feature whose capture limit, its largest ``pad_to``, says which calls replay CUDA
    graphs: the profile's ``captured`` part, ``headroom.dispatch`` routes by it)."""
    order = list(family.get("feature_order") or family["features"])
    table = {"config_table": family["config_table"]} if family.get("config_table") else {}
    if family.get("captured_by") is not None:
        table["captured_by"] = str(family["captured_by"])
    return {
        "name": str(family["name"]),
        "version": str(family["version"]),
        "spec": str(family.get("spec", "")),
        "source_blake3": str(family["source_blake3"]),
        "features": {name: dict(family["features"][name]) for name in order},
        "feature_order": order,
        **table,
    }


def identity(trace: pd.DataFrame, environment: pd.DataFrame, kernel_source_blake3: str) -> dict:
    """{'hard': what the table is valid for only, 'soft': versions a server may differ in}: the
    environment's driver, torch and Triton, and its FlashInfer (``flashinfer``) where it recorded one
    (a study without FlashInfer, or whose environment predates the column, has none)."""
    env = environment.iloc[0] if environment is not None and len(environment) else pd.Series(dtype=object)
    part = {c: sorted(set(trace[c].tolist())) for c in ("heads_q", "heads_kv", "head_dim", "dtype")}
    mixed = {c: v for c, v in part.items() if len(v) != 1}
    if mixed:
        raise ValueError(f"trace: one partition per study expected, got {mixed}")
    hard = {c: (int(v[0]) if c != "dtype" else str(v[0])) for c, v in part.items()}
    hard.update(
        gpu_name=str(env.get("gpu_name", "unknown")),
        sm_count=int(env.get("sm_count", 0) or 0),
        kernel_source_blake3=str(kernel_source_blake3),
    )
    soft = {k: str(env.get(k, "unknown")) for k in SOFT}
    flashinfer = env.get("flashinfer")  # the environment stage's (its 'none': not installed)
    if isinstance(flashinfer, str) and flashinfer not in ABSENT:
        soft["flashinfer"] = flashinfer
    return {"hard": {k: hard[k] for k in HARD}, "soft": soft}


def _plain(value):
    """JSON-able with NaN as null (dispatch.json is strict JSON)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    return value.item() if isinstance(value, np.generic) else value


def recommend_scope(scope: str, decision: pd.DataFrame, md, ctx) -> tuple[list[dict], dict]:
    """(the scope's table rows, its dispatch.json entry); ctx: (opts, costs, train_fraction, seed,
    intermediate_ratio, (matmul FLOP/s, HBM bytes/s))."""
    opts, costs, train_fraction, seed, ratio, (flops, bw) = ctx
    r = decision[decision["mode"].astype(str) == scope]
    L = engine.layout(md, opts, costs, train_fraction, seed)
    kernel = kernel_of(r, md, L)
    ship = what_to_ship(r, md, L, opts, seed, kernel[0])
    ours = kernel_of(r, md, L, engine.OURS)[0]
    worth = (  # the decoder-layer model is attention's: a family's rows leave it null
        layer_model(md, list(md.names).index(kernel[0]), gemm_us(md.features, ratio, flops, bw))
        if md.keying == ATTENTION
        else None
    )
    rows = scope_rows(scope, r, md, ship, kernel, worth, ours)
    natives = {md.names[c] for c in np.flatnonzero(md.native)}
    routed = ",".join(c for c in dict.fromkeys((kernel[0], *ship[1].candidates)) if c in natives)
    for row in rows:  # what of the shipped choice a server runs through a native library
        row["natives_shipped"] = routed
    entry = {
        "verdict": rows[-1]["verdict"],
        "ship": ship[0],
        "kernel": kernel[0],
        "policy": ship[1].to_dict(),
        "expected_gain_pct": [_num(ship[2].get(c)) for c in ("estimate", "ci_low", "ci_high")],
    }
    return rows, entry


def build(decision, trace, portfolio, lifecycle, candidates, calibration, environment, *, meta, policies,
          deployment=None, intermediate_ratio: float, keying=ATTENTION,
          family: dict | None = None) -> tuple[pd.DataFrame, dict]:  # fmt: skip
    """(recommendation table without dispatch_blake3, dispatch.json's content). meta: study,
    decision_blake3, kernel_source_blake3 (attention's; a family's table has none); policies: config
    ``policies`` (as the decision read it); keying: the policies' keys (``stages.keying``); family:
    what the trace records of a kernel family (provenance ``extra.family``; None or attention's:
    the attention table)."""
    from headroom.core import defaults

    if family is not None and family.get("name", ATTENTION_NAME) == ATTENTION_NAME:
        family = None
    if family is not None and keying == ATTENTION:
        keying = Keying.of_record(family)

    options = dict(policies)
    train_fraction = options.pop("train_fraction")
    seed = options.pop("seed", defaults.value("policies", "seed"))
    opts, costs, modes = checked_modes(
        trace, portfolio, lifecycle, train_fraction, options, calibration, intermediate_ratio, keying
    )
    deployment = figures.deployment_profile(deployment, keying)
    scopes = scopes_of({m.mode: m for m in modes}, decision, deployment)
    if not scopes:
        raise ValueError("decision: no mode or profile part of the timings has rows; rerun the decision")
    ctx = (opts, costs, train_fraction, seed, intermediate_ratio, rates(calibration))
    rows, entries = [], {}
    for scope, md in scopes.items():
        scope_table, entries[scope] = recommend_scope(scope, decision, md, ctx)
        rows += scope_table
    shipped = [c for e in entries.values() for c in (e["kernel"], *e["policy"]["candidates"])]
    if family is not None:
        return _family_build(
            decision, candidates, environment, meta, family, deployment, rows, entries, shipped
        )
    facts = candidate_facts(candidates, shipped)
    ident = identity(trace, environment, meta["kernel_source_blake3"])
    table = pd.DataFrame(rows)
    for c in (
        "tile",
        "block_m",
        "block_n",
        "num_warps",
        "num_stages",
        "rope",
        "generation",
        "backend",
        "fused",
    ):
        table[c] = [facts[k].get(c) for k in table["kernel"]]
    for c, v in {**ident["hard"], **ident["soft"]}.items():
        table[c] = v
    table["schema_version"], table["study"] = SCHEMA_VERSION, meta["study"]
    table["decision_blake3"], table["dispatch_blake3"] = meta["decision_blake3"], ""
    dispatch = {
        **_dispatch_head(decision, meta, ident, deployment, entries),
        "step_of_phase": dict(measured.STEP_OF_CATEGORY),
        "scopes": entries,
        "candidates": facts,
    }
    content = _plain(dispatch)
    validate(content, "dispatch.json")  # the schema headroom.dispatch.load reads it by
    return ordered(table), content


def _dispatch_head(decision, meta, ident, deployment, entries) -> dict:
    """What every dispatch.json opens with: its study, decision, rule, verdict, identity and profile."""
    return {
        "schema_version": SCHEMA_VERSION,
        "study": meta["study"],
        "decision_blake3": meta["decision_blake3"],
        "rule_version": str(decision["rule_version"].iloc[0]) if "rule_version" in decision else "",
        "verdict": str(decision["verdict"].iloc[0]),
        "identity": ident,
        "profile": {s: f"{m}@{s}" for s, m in deployment.items() if f"{m}@{s}" in entries},
    }


def _family_build(decision, candidates, environment, meta, family, deployment, rows, entries, shipped):
    """The table and dispatch.json of a kernel family's study (see the module docstring)."""
    facts = family_candidate_facts(candidates, shipped)
    ident = family_identity(environment, family)
    table = pd.DataFrame(rows)
    for c in (*ATTENTION_CANDIDATE_COLUMNS, *(k for k in HARD if k not in ("gpu_name", "sm_count"))):
        table[c] = None  # attention's candidate columns, partition and kernel source hash
    for c in LAYER_COLUMNS:
        table[c] = math.nan  # attention's decoder-layer model
    for c in ("num_warps", "num_stages"):
        table[c] = pd.array([facts[k][c] for k in table["kernel"]], dtype="Int64")
    table["backend"] = "family"
    for c in ("gpu_name", "sm_count"):
        table[c] = ident["hard"][c]
    for c, v in ident["soft"].items():
        table[c] = v
    table["schema_version"], table["study"] = SCHEMA_VERSION, meta["study"]
    table["decision_blake3"], table["dispatch_blake3"] = meta["decision_blake3"], ""
    table["kernel_family"] = ident["hard"]["family"]
    table["family_version"] = ident["hard"]["family_version"]
    table["family_source_blake3"] = ident["hard"]["family_source_blake3"]
    table["params"] = [json.dumps(facts[k]["params"], sort_keys=True) for k in table["kernel"]]
    dispatch = {
        **_dispatch_head(decision, meta, ident, deployment, entries),
        "step_of_phase": {},
        "step_of_kind": dict(measured.STEP_KIND_OF_FAMILY_STEP),
        "family": family_record(family),
        "scopes": entries,
        "candidates": facts,
    }
    content = _plain(dispatch)
    validate(content, "dispatch.json")
    return ordered(table), content


def ordered(table: pd.DataFrame) -> pd.DataFrame:
    from headroom.core import contracts

    names = contracts.RECOMMENDATION.names
    return table[[c for c in names if c in table.columns] + [c for c in table.columns if c not in names]]
