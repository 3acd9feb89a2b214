"""What to ship, per mode (and per part of the deployment profile), read from the artifacts.

The source, in order: ``recommendation.parquet`` (the `recommendation` stage); for a study recorded
before it, the decision's kernel-recommendation rows (``kernel_vs_best_unfused``, ``kernel_vs_<native>``);
before those, ``policy_eval.global_candidate`` (the global kernel each run chose, as "k of n runs").
``Ship.source`` says which one a line came from. Nothing is recomputed here. The kernel shipped is the
fastest candidate, ours or a native (``native``: its words); the speedups (``versus``) are our best
kernel's (``our_kernel``). Also the candidate family of a candidate id (``family``), which the report's
figures group by.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import pandas as pd

from headroom.core.names import native_words

KERNEL = "kernel_vs_"
SOURCES = {
    "recommendation": "recommendation.parquet",
    "decision": "the decision's kernel-recommendation rows (no recommendation artifact: an older study)",
    "policy_eval": "policy_eval.global_candidate (no recommendation artifact and no kernel rows in the "
    "decision: an older study)",
}


@dataclass
class Versus:
    alternative: str  # 'best unfused' or a native candidate id
    speedup: float  # the alternative's trace-weighted latency / our best kernel's
    ci_low: float
    ci_high: float
    layer_pct: float = float("nan")  # the same saving as % of a decoder layer's time (recommendation)


@dataclass
class Ship:
    scope: str  # a mode ('graph', 'eager') or a profile part ('graph@decode-only')
    kernel: str
    runs_agree: int | None = None
    runs: int | None = None
    ship: str = "kernel"  # 'kernel' | 'phase-pair' | 'policy' (recommendation artifact)
    policy: str = ""
    latency_us: float = float("nan")
    expected_gain: tuple[float, float, float] | None = None  # % [CI], a policy's cross-run gain
    versus: list[Versus] = field(default_factory=list)
    source: str = "recommendation"
    faster_native: Versus | None = None  # a native backend faster than every kernel of ours (recommendation)
    our_kernel: str = ""  # our best kernel, what ``versus`` compares ('' where not recorded: the kernel)
    native: str = ""  # the shipped native's words (``names.native_words``; '' for ours, or not recorded)
    natives_shipped: str = ""  # the natives the shipped choice routes to, comma-separated (recommendation)

    @property
    def native_shipped(self) -> bool:
        """Whether the kernel shipped is a native: not our best kernel."""
        return bool(self.our_kernel) and self.kernel != self.our_kernel


def family(candidate: str, backend: str | None = None) -> str:
    """'triton unfused' / 'triton fused' / 'triton q_fused', or the native backend ('sdpa-cudnn')."""
    name = str(candidate)
    if backend is not None and str(backend) not in ("triton", "nan", "None"):
        return str(backend)
    if name.startswith("native-"):
        return name.removeprefix("native-")
    return "triton " + name.rsplit("-", 1)[-1]


def what_to_ship(
    recommendation: pd.DataFrame | None, decision: pd.DataFrame | None, policy_eval: pd.DataFrame | None
) -> list[Ship]:
    """One Ship per scope, from the first source that has it."""
    if recommendation is not None and not recommendation.empty and "scope" in recommendation.columns:
        return _from_recommendation(recommendation)
    if decision is not None and {"figure", "kernel"} <= set(decision.columns):
        rows = decision[decision["figure"].astype(str).str.startswith(KERNEL) & decision["kernel"].notna()]
        if not rows.empty:
            gap = decision[(decision["figure"] == "gap_to_oracle") & decision["kernel"].notna()]
            return _from_decision(rows, {r.mode: (r.kernel, r.runs_agree) for r in gap.itertuples()})
    if policy_eval is not None and {"global_candidate", "policy"} <= set(policy_eval.columns):
        return _from_policy_eval(policy_eval)
    return []


def _int(v) -> int | None:
    return None if pd.isna(v) else int(v)


def _from_recommendation(rec: pd.DataFrame) -> list[Ship]:
    out = []
    for scope, g in rec.groupby("scope", sort=False):
        first = g.iloc[0]
        gain = None
        if "expected_gain_pct" in g.columns and pd.notna(first.get("expected_gain_pct")):
            gain = (
                float(first["expected_gain_pct"]),
                float(first.get("expected_gain_ci_low", float("nan"))),
                float(first.get("expected_gain_ci_high", float("nan"))),
            )
        versus = [
            Versus(
                _alt(r.alternative),
                float(r.speedup),
                float(r.speedup_ci_low),
                float(r.speedup_ci_high),
                float(getattr(r, "speedup_layer_pct", float("nan"))),
            )
            for r in g.itertuples()
            if pd.notna(getattr(r, "alternative", None)) and str(r.alternative)
        ]
        native = str(first.get("faster_native") or "") if pd.notna(first.get("faster_native", None)) else ""
        ours = first.get("our_kernel")
        ours = ours if isinstance(ours, str) else ""
        shipped_native = bool(ours) and ours != str(first.get("kernel", ""))
        out.append(
            Ship(
                scope=str(scope),
                kernel=str(first.get("kernel", "")),
                runs_agree=_int(first.get("runs_agree")),
                runs=_int(first.get("runs")),
                ship=str(first.get("ship", "kernel")),
                policy=str(first.get("policy", "") or "") if pd.notna(first.get("policy", None)) else "",
                latency_us=float(first.get("latency_us", float("nan"))),
                expected_gain=gain,
                versus=versus,
                source="recommendation",
                faster_native=next((v for v in versus if v.alternative == native), None) if native else None,
                our_kernel=ours,
                natives_shipped=str(first.get("natives_shipped") or "")
                if pd.notna(first.get("natives_shipped"))
                else "",
                native=native_words(first.get("backend"), first.get("rope")) if shipped_native else "",
            )
        )
    return out


def _alt(name) -> str:
    return "best unfused" if str(name) in ("best_unfused", "best unfused") else str(name)


def _from_decision(rows: pd.DataFrame, shipped: dict) -> list[Ship]:
    """From the kernel rows (our best kernel's) and ``shipped`` {mode: (the global kernel its gap row
    names, runs agreeing)} (a decision recorded before it names none: the kernel rows' is shipped)."""
    out = []
    for scope, g in rows.groupby("mode", sort=False):
        first = g.iloc[0]
        kernel, agree = shipped.get(scope, (first["kernel"], first.get("runs_agree")))
        versus = [
            Versus(_alt(str(r.figure)[len(KERNEL) :]), float(r.estimate), float(r.ci_low), float(r.ci_high))
            for r in g.itertuples()
        ]
        out.append(
            Ship(
                scope=str(scope),
                kernel=str(kernel),
                runs_agree=_int(agree),
                runs=_int(first.get("runs")),
                versus=versus,
                source="decision",
                our_kernel=str(first["kernel"]),
            )
        )
    return out


def _from_policy_eval(pe: pd.DataFrame) -> list[Ship]:
    g = pe[pe["policy"] == "global"]
    if "fusion" in g.columns:
        g = g[g["fusion"] == "free"]
    out = []
    for mode, rows in g.groupby("mode", sort=True):
        per_run = rows.drop_duplicates("run")["global_candidate"].astype(str)
        kernel, agree = Counter(per_run).most_common(1)[0]
        out.append(Ship(str(mode), kernel, agree, len(per_run), source="policy_eval"))
    return out
