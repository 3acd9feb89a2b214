"""Generate REPRODUCTION.md: the L40S study's figures beside the H200 reference studies'.

    python tools/reproduction.py                     # replays both reference studies, writes REPRODUCTION.md
    python tools/reproduction.py --results default=DIR --results azure-conv=DIR [--out FILE]

Every H200 number is read from the replayed artifacts (hash-verified): nothing here is typed by
hand except the published L40S figures, which are the study note's (shared/seed).
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from headroom.core import artifacts  # noqa: E402
from headroom.core import format as fmt  # noqa: E402  (the one number formatter)
from headroom.decide.policy_eval import DEPLOYABLE  # noqa: E402

STUDIES = {"default": "H200 default trace", "azure-conv": "H200 real trace (Azure conv)"}
# Kernel generations side by side (issue: kernels generation 2). The generation-1 studies above stay
# as recorded (2026-11-29); each study's generation-2 recording, and a generation-1 rerun of the
# default study in the same device session as its generation-2 run (same machine, same day), sit
# beside them. A study whose folder is not under data/reference/h200/ is left out.
GENERATIONS = {
    "default": {
        "gen 1, same session": "default-gen1-rerun",
        "gen 2": "default-gen2",
        # the study-power design (issue 19): 200 invocations of a lognormal log, adaptive sampler
        "gen 2, 200 invocations": "default-gen2-long",
    },
    "azure-conv": {"gen 2": "azure-conv-gen2"},
}
REFERENCE = ROOT / "data" / "reference" / "h200"


def recorded(name: str) -> bool:
    return (REFERENCE / name / "trace.parquet").is_file()


def all_studies() -> list[str]:
    """Every study REPRODUCTION.md reads: the generation-1 references and the recorded others."""
    return list(STUDIES) + [n for gens in GENERATIONS.values() for n in gens.values() if recorded(n)]


MODES = ("eager", "graph")
UNIT = {
    f: "x"
    for f in ("fusion_speedup", "fusion_speedup_prefill", "fusion_speedup_decode", "fusion_speedup_sweep")
}
GPU_STAGES = ("environment", "correctness", "portfolio", "lifecycle", "graph_sweep", "calibrate")
L40S = {
    "gap": "0.149–0.670%",
    "policy": "0–0.305% (unfused arm) / 0% (fused arm)",
    "eager_fusion": "2.280–3.333×",
    "graph_fusion": "1.024–1.059× (four regimes)",
    "launch_share": "54–82%",
    "checks": "60 of 60 per run",
    "calls": "403,200",
}


def rng(values, unit="%", digits=3) -> str:
    """min–max of the finite values; signed ('-0.332 to +6.391%') when the range holds a negative."""
    return fmt.signed_range(values, unit, digits)


def ci(est: float, lo: float, hi: float, unit: str = "%") -> str:
    """'+7.33% [+2.99, +11.67]' for percentages, '0.882× [0.763, 1.002]' for speedups."""
    return fmt.estimate_ci(est, lo, hi, "%" if unit == "%" else "x")


def moved(v1: pd.Series, v2: float, unit: str = "%") -> str:
    """How the v2 estimate sits against the v1 runs: difference from their mean, and where it falls."""
    v1 = pd.Series(v1, dtype=float).dropna()
    if v1.empty or not math.isfinite(v2):
        return "n/a"
    where = "below" if v2 < v1.min() else "above" if v2 > v1.max() else "inside"
    return f"{fmt.delta(v2 - v1.mean(), unit)} ({where} the v1 range)"


class Study:
    def __init__(self, name: str, results: Path):
        self.name, self.results = name, results

    def read(self, rel: str) -> pd.DataFrame:
        return artifacts.read(self.results / rel)

    def portfolio(self) -> pd.DataFrame:
        return pd.concat(
            [artifacts.read(p) for p in sorted((self.results / "portfolio").glob("run-[0-9].parquet"))]
        )

    # -- same-run (v1) figures, one value per run, from policy_eval ------------------------------
    def gap(self) -> dict[str, pd.Series]:
        pe = self.read("policy_eval.parquet")
        g = pe[(pe.policy == "global") & (pe.fusion == "free")]
        return {m: g[g["mode"] == m]["gap_to_oracle_pct"] for m in MODES}

    def best_policy(self, arm: str) -> dict[str, pd.Series]:
        pe = self.read("policy_eval.parquet")
        d = pe[pe.policy.isin(DEPLOYABLE) & (pe.fusion == arm)]
        best = d.groupby(["run", "mode"])["gain_vs_global_pct"].max().reset_index()
        return {m: best[best["mode"] == m]["gain_vs_global_pct"] for m in MODES}

    def same_run_net(self, mode: str, base: str) -> pd.Series:
        """Per run: the best deployable policy x arm's net gain over ``base`` (global or phase-keyed,
        free arm), chosen on test as v1 did: max over policies and arms of the test split's figure."""
        pe = self.read("policy_eval.parquet")
        pe = pe[(pe["mode"] == mode) & pe.fusion.isin(("off", "on", "free"))].copy()
        pe["net_us"] = pe["test_us"] / pe["test_invocations"] + pe["cost_per_invocation_us"]
        out = {}
        for run, g in pe.groupby("run"):
            ref = g[(g.policy == base) & (g.fusion == "free")]["net_us"].iloc[0]
            best = g[g.policy.isin(DEPLOYABLE)]["net_us"].min()
            out[run] = 100.0 * (ref - best) / ref
        return pd.Series(out, dtype=float)

    def same_run_phase_split(self, mode: str) -> pd.Series:
        pe = self.read("policy_eval.parquet")
        return pe[(pe["mode"] == mode) & (pe.policy == "phase-keyed") & (pe.fusion == "free")]["net_gain_pct"]

    # -- cross-run (v2) figures, from decision.parquet -------------------------------------------
    def figure(self, mode: str, name: str) -> pd.Series | None:
        d = self.read("decision.parquet")
        row = d[(d["mode"] == mode) & (d["figure"] == name)]
        return row.iloc[0] if len(row) else None

    def v2(self, mode: str, name: str) -> str:
        r = self.figure(mode, name)
        return "n/a" if r is None else ci(r["estimate"], r["ci_low"], r["ci_high"], UNIT.get(name, "%"))

    def v2_per_mode(self, name: str, modes=MODES) -> str:
        return "; ".join(f"{m} {self.v2(m, name)}" for m in modes)

    def verdict(self) -> tuple[str, str]:
        d = self.read("decision.parquet").iloc[0]
        return str(d["verdict"]), str(d["reason"])

    def mode_verdicts(self) -> str:
        d = self.read("decision.parquet")
        d = d[~d["mode"].astype(str).str.contains("@")].drop_duplicates("mode")  # modes, not profile parts
        return ", ".join(f"{m} {v}" for m, v in zip(d["mode"], d["mode_verdict"], strict=True))

    # -- the sweep, roofline, correctness, volume ------------------------------------------------
    def sweep(self) -> pd.DataFrame:
        gs = self.read("graph_sweep.parquet")
        return gs[gs.status == "ok"]

    def fusion_speedup(self, mode: str) -> pd.Series:
        s = self.sweep()
        return s[(s["mode"] == mode) & s.fused]["fusion_speedup"]

    def graph_by_regime(self) -> str:
        s = self.sweep()
        s = s[(s["mode"] == "graph") & s.fused]
        parts = []
        for regime, grp in sorted(s.groupby("regime"), key=lambda kv: float(kv[0].removesuffix("xL2"))):
            parts.append(f"{regime} ({grp['residency'].iloc[0]}): {rng(grp['fusion_speedup'], '×')}")
        return "; ".join(parts)

    def measured_launch_share(self) -> pd.Series:
        """Share of the eager fusion saving that graph replay removes, per shape and regime:
        1 - (unfused - fused)_graph / (unfused - fused)_eager, from the sweep's measurements."""
        s = self.sweep()
        piv = s.pivot_table(index=["shape_key", "regime"], columns=["mode", "fused"], values="median_us")
        eager = piv[("eager", False)] - piv[("eager", True)]
        graph = piv[("graph", False)] - piv[("graph", True)]
        return 100.0 * (1.0 - graph / eager)

    def model_launch_share(self) -> pd.Series:
        rf = self.read("roofline.parquet")
        rf = rf[(rf["mode"] == "eager") & rf.fused & (rf.status == "ok")]
        return rf["launch_share_pct"]

    def checks(self) -> str:
        c = self.read("correctness.parquet")
        status = c["status"] if "status" in c.columns else c.passed.map({True: "passed", False: "failed"})
        unsupported = c[status == "unsupported"]
        failed = c[~c.passed & (status != "unsupported")]
        text = f"{int(c.passed.sum())} of {len(c)} checks ({c.candidate.nunique()} candidates × {c.shape_key.nunique()} shapes)"
        if len(unsupported):
            text += f"; unsupported (no kernel for these shapes), not timed: {', '.join(sorted(unsupported.candidate.unique()))}"
        if len(failed):
            text += f"; failed and excluded: {', '.join(sorted(failed.candidate.unique()))}"
        return text

    def calls(self) -> tuple[int, int]:
        p = self.portfolio()
        return int(p[p["mode"] == "eager"]["timed_calls"].sum()), int(p["timed_calls"].sum())

    def admitted(self) -> int:
        return int(self.portfolio()["candidate"].nunique())

    def wall_times(self, recorded: Path) -> tuple[dict[str, float], float]:
        bench = recorded / "benchmarks"
        times: dict[str, float] = {}
        for tsv in sorted(bench.rglob("*.tsv")):
            stage = tsv.parent.name if tsv.parent != bench else tsv.stem
            times[stage] = times.get(stage, 0.0) + float(pd.read_csv(tsv, sep="\t")["s"].iloc[0])
        gpu = sum(v for k, v in times.items() if k in GPU_STAGES)
        return times, gpu


def per_mode(d: dict[str, pd.Series], unit="%") -> str:
    return "; ".join(f"{m} {rng(v, unit)}" for m, v in d.items())


def build(studies: dict[str, Study]) -> str:
    first = {n: s for n, s in studies.items() if n in STUDIES}
    lines = _figure_table(first)
    for name, study in first.items():
        lines += _v1_v2_table(name, study)
    lines += _narrative(first)
    lines += _generations(studies)
    lines += _rule_versions(studies)
    lines += _wall_times(studies)
    return "\n".join(lines)


# (label, figure of decision.parquet, mode, unit): what a kernel generation can move
GENERATION_FIGURES = (
    ("global-to-oracle gap (decided)", "gap_to_oracle", "graph", "%"),
    ("global-to-oracle gap (decided)", "gap_to_oracle", "eager", "%"),
    (
        "best deployable net gain over the better of global and phase-keyed (decided)",
        "policy_gain",
        "graph",
        "%",
    ),
    (
        "best deployable net gain over the better of global and phase-keyed (decided)",
        "policy_gain",
        "eager",
        "%",
    ),
    ("phase-keyed net gain over global", "phase_split_gain", "graph", "%"),
    ("trace-weighted fusion speedup (kernel recommendation)", "fusion_speedup", "graph", "x"),
    ("fusion speedup on decodes", "fusion_speedup_decode", "graph", "x"),
    ("fusion speedup on prefills", "fusion_speedup_prefill", "graph", "x"),
    ("gap made of the phase split", "made_of_phase_split", "graph", "%"),
    ("gap made of the tile within a phase", "made_of_tile_within_phase", "graph", "%"),
)


def _generations(studies: dict[str, Study]) -> list[str]:
    """Per study: generation 1 as recorded, the same-session rerun (if any), generation 2, and how
    each decided figure and the verdict moved with kernel quality (generation 2 minus recorded gen 1)."""
    lines = [
        "",
        "## Kernel generations: how much of the answer was kernel quality",
        "",
        "Generation 1: the kernels the first studies recorded (fused RoPE re-rotates every K tile once per",
        "query block; inputs checked on every call). Generation 2: plan/run host path (checked once per",
        "batch shape, compiled launchers), the generation-2 prefill kernel, and the `q_fused` placement",
        "(K rotated once, as a KV-cache write does, Q in the kernel); FlexAttention joins the native arm.",
        "`moved`: generation 2 minus generation 1 as recorded. Figures are v2 (cross-run) estimates [95% CI].",
        "Generation 1 was recorded on 2026-11-29, generation 2 on 2026-12-01, each on one H200 of this",
        "workplace (same model, driver, torch and Triton): day and machine are confounded with the",
        "generation. A generation-1 rerun in the generation-2 session is not in the repository yet (the",
        "session's device time ran out during it). `moved` says where the two generations' 95% CIs are",
        "disjoint: those figures moved beyond what run-to-run variation covers.",
    ]
    for base, gens in GENERATIONS.items():
        cols = [("gen 1, recorded 2026-11-29", base)] + [(k, v) for k, v in gens.items() if v in studies]
        if len(cols) == 1 or base not in studies:
            continue
        names = [n for _, n in cols]
        lines += [
            "",
            f"### {STUDIES[base]}",
            "",
            "| figure | mode | " + " | ".join(label for label, _ in cols) + " | moved (gen 1 → gen 2) |",
            "| --- | --- | " + " | ".join("---" for _ in cols) + " | --- |",
        ]
        for label, fig, mode, unit in GENERATION_FIGURES:
            cells = [studies[n].v2(mode, fig) for n in names]
            lines.append(
                f"| {label} | {mode} | "
                + " | ".join(cells)
                + f" | {_moved(studies, names, fig, mode, unit)} |"
            )
        verdicts = [f"{studies[n].verdict()[0]} ({studies[n].mode_verdicts()})" for n in names]
        lines.append("| verdict | eager, graph | " + " | ".join(verdicts) + " | |")
        lines.append(
            "| candidates admitted / checks passed | | "
            + " | ".join(f"{studies[n].admitted()} / {studies[n].checks()}" for n in names)
            + " | |"
        )
    return lines


V2_TABLE = ROOT / "data" / "validation" / "decision-v2.csv"  # tools/decision_v2.py
V3_TABLE = ROOT / "data" / "validation" / "decision-v3.csv"  # tools/decision_v2.py at commit 62ad2c1
V2_V3 = (
    ("global-to-oracle gap", "gap_to_oracle", "gap_to_oracle"),
    (
        "policy figure (v2: over phase-keyed; v3: over the better of global and phase-keyed)",
        "policy_gain",
        "policy_gain",
    ),
    (
        "trace-weighted fusion speedup (v2: decided in graph mode; v3: kernel recommendation)",
        "fusion_speedup",
        "fusion_speedup",
    ),
)  # (label, v2 figure, v3 figure)


def _v2_cell(v2: pd.DataFrame, mode: str, fig: str) -> str:
    r = v2[(v2["mode"] == mode) & (v2["figure"] == fig)]
    if r.empty:
        return "n/a"
    r = r.iloc[0]
    return ci(r["estimate"], r["ci_low"], r["ci_high"], UNIT.get(fig, "%")) + f" ({r['state']})"


def _verdicts(table: pd.DataFrame) -> str:
    """'no-decision (eager no-decision, graph stop)': the headline and the per-mode verdicts."""
    modes = table[~table["mode"].astype(str).str.contains("@")].drop_duplicates("mode")
    per_mode = ", ".join(f"{m} {v}" for m, v in zip(modes["mode"], modes["mode_verdict"], strict=True))
    return f"{table['verdict'].iloc[0]} ({per_mode})"


def _rule_versions(studies: dict[str, Study]) -> list[str]:
    return _v2_v3(studies) + _v3_v31(studies)


def _v2_v3(studies: dict[str, Study]) -> list[str]:
    """Each reference decided by decision v2 (data/validation/decision-v2.csv) and by v3 (decision-v3.csv)."""
    if not (V2_TABLE.is_file() and V3_TABLE.is_file()):
        return []
    v2, v3 = pd.read_csv(V2_TABLE), pd.read_csv(V3_TABLE)
    lines = [
        "",
        "## Decision v2 → v3",
        "",
        "The same recorded inputs decided by decision v2 (commit 40da505; `tools/decision_v2.py`) and by",
        "decision v3 (commit 62ad2c1). v3 decides the portfolio on the gap and the policy figure only, against",
        "the better of global and phase-keyed; charges a switch only within a phase and each shape's own",
        "plan; holds the gap on a bound that is not biased down; and gives the headline for the deployment",
        "profile (decode-only steps in graph mode, mixed steps in eager mode) beside the per-mode verdicts.",
        "",
        "| study | figure | mode | v2 | v3 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name in studies:
        old, new = v2[v2["study"] == name], v3[v3["study"] == name]
        if old.empty or new.empty:
            continue
        lines.append(f"| {name} | verdict | headline (per mode) | {_verdicts(old)} | {_verdicts(new)} |")
        for label, f2, f3 in V2_V3:
            for mode in MODES:
                lines.append(
                    f"| {name} | {label} | {mode} | {_v2_cell(old, mode, f2)} | {_v2_cell(new, mode, f3)} |"
                )
    return lines


# the scopes a verdict is given for: the deployment profile's parts (the headline's family), the modes
V31_SCOPES = ("graph@decode-only", "eager@mixed", "graph", "eager")


def _v31_cell(table: pd.DataFrame, scope: str, fig: str) -> str:
    """'+1.18% [+0.38, +1.99], bound's upper end +2.10% (exceeds)'; 'n/a' without the row."""
    r = table[(table["mode"] == scope) & (table["figure"] == fig)]
    if r.empty:
        return "n/a"
    r = r.iloc[0]
    text = ci(r["estimate"], r["ci_low"], r["ci_high"])
    if fig == "gap_to_oracle" and pd.notna(r.get("hold_high")):
        text += f", bound's upper end {fmt.pct(r['hold_high'])}"
    return f"{text} ({r['state']})"


def _scope_verdict(table: pd.DataFrame, scope: str) -> str:
    rows = table[table["mode"] == scope]
    return "n/a" if rows.empty else str(rows["mode_verdict"].iloc[0])


def _v3_v31(studies: dict[str, Study]) -> list[str]:
    """Each reference decided by decision v3 (data/validation/decision-v3.csv) and by v3.1 (the replay)."""
    if not V3_TABLE.is_file():
        return []
    v3 = pd.read_csv(V3_TABLE)
    lines = [
        "",
        "## Decision v3 → v3.1",
        "",
        "The same recorded inputs decided by decision v3 (commit 62ad2c1; `tools/decision_v2.py`) and by",
        "decision v3.1 (`decision-v3.1.1`; today's `decision-v3.3` decides these three-run studies identically).",
        "v3.1 changes one thing: the decided figures' and the gap",
        'bound\'s interval is bootstrap-t (docs/decision-validation.md, "The interval choice"), so a figure',
        "holds when the bootstrap-t upper end (for the gap: its bound's) lies below the threshold; a figure",
        "still exceeds on Holm over the t p-values, so `continue` is unchanged. Where resamples whose two",
        "sides tie on every invocation (a zero SE) leave an end unbounded, v3.1 shows `(no CI)`: no hold.",
        "Scopes: the deployment profile's parts (their verdict is the headline's), then each mode's own",
        "family.",
        "",
        "| study | scope | verdict v3 | verdict v3.1 | figure | v3 | v3.1 |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, study in studies.items():
        old, new = v3[v3["study"] == name], study.read("decision.parquet")
        if old.empty:
            continue
        lines.append(f"| {name} | headline (per mode) | {_verdicts(old)} | {_verdicts(new)} | | | |")
        for scope in V31_SCOPES:
            verdicts = f"{_scope_verdict(old, scope)} | {_scope_verdict(new, scope)}"
            for label, fig in (("gap to the oracle", "gap_to_oracle"), ("policy figure", "policy_gain")):
                lines.append(
                    f"| {name} | {scope} | {verdicts} | {label} | {_v31_cell(old, scope, fig)} | "
                    f"{_v31_cell(new, scope, fig)} |"
                )
    return lines


def _moved(studies: dict[str, Study], names: list[str], fig: str, mode: str, unit: str) -> str:
    # the two kernel generations on the same trace (the `gen 2` study), not a longer trace's column
    same_trace = next((n for n in names[1:] if n.endswith("-gen2")), names[-1])
    first, last = studies[names[0]].figure(mode, fig), studies[same_trace].figure(mode, fig)
    if first is None or last is None:
        return "n/a"
    text = fmt.delta(float(last["estimate"]) - float(first["estimate"]), unit)
    disjoint = float(last["ci_low"]) > float(first["ci_high"]) or float(last["ci_high"]) < float(
        first["ci_low"]
    )
    return text + (" (CIs disjoint)" if disjoint else "")


INTRO = [
    "# Reproduction: the L40S study beside the H200 reference studies",
    "",
    "Generated by `python tools/reproduction.py` from the replayed H200 reference data",
    "(`data/reference/h200/<study>/`, hashes verified); do not edit by hand. L40S figures are the",
    "published ones of the study note this project grew from. Two kinds of H200 figure stand side by side:",
    "**v2 (cross-run)**, the decision's estimators (chosen on one run, scored on another, pooled over the",
    "ordered pairs of runs; estimate [95% CI] from a jackknife over runs and a bootstrap over test",
    "invocations), and **v1 (same-run)**, chosen and scored on the same run's test split, given as the",
    "min–max over the three runs (or over shapes and regimes where the figure is per shape). v1 figures",
    "are biased upward by the noise the choice sees (winner's curse); the tables per study show how far.",
    "Eager and CUDA Graph modes apart. Verdicts and decided figures are decision v3.3's (`decision-v3.3`:",
    "the decided figures' CIs are bootstrap-t, every other CI the Welch t interval; at three runs, as",
    "here, exactly v3.1's); the sections",
    '"Decision v2 → v3" and "Decision v3 → v3.1" set the earlier rules\' verdicts beside them on the same',
    "inputs.",
]


def _figure_table(studies: dict[str, Study]) -> list[str]:
    names = list(studies)
    lines = INTRO + [
        "",
        "| figure | L40S (published) | " + " | ".join(STUDIES.get(n, n) for n in names) + " |",
        "| --- | --- | " + " | ".join("---" for _ in names) + " |",
    ]

    def row(label, l40s, fn):
        lines.append(f"| {label} | {l40s} | " + " | ".join(fn(studies[n]) for n in names) + " |")

    row("verdict, rule v3.1 (per mode)", "stop", lambda s: f"{s.verdict()[0]} ({s.mode_verdicts()})")
    row("global-to-oracle gap, v2 cross-run (decided)", L40S["gap"], lambda s: s.v2_per_mode("gap_to_oracle"))
    row("global-to-oracle gap, v1 same-run (fusion free)", L40S["gap"], lambda s: per_mode(s.gap()))
    row(
        "best deployable net gain over the better of global and phase-keyed (decided)",
        "n/a",
        lambda s: s.v2_per_mode("policy_gain"),
    )
    row("best deployable net gain over phase-keyed", "n/a", lambda s: s.v2_per_mode("policy_gain_vs_phase"))
    row("phase-keyed net gain over global, v2", "n/a", lambda s: s.v2_per_mode("phase_split_gain"))
    row("best deployable policy gain, unfused arm, v1", "0–0.305%", lambda s: per_mode(s.best_policy("off")))
    row("best deployable policy gain, fused arm, v1", "0%", lambda s: per_mode(s.best_policy("on")))
    row(
        "trace-weighted graph-mode fusion speedup (kernel recommendation, not decided)",
        "n/a",
        lambda s: s.v2("graph", "fusion_speedup"),
    )
    row(
        "eager same-tile fusion speedup (sweep)",
        L40S["eager_fusion"],
        lambda s: rng(s.fusion_speedup("eager"), "×"),
    )
    row(
        "graph-replay fusion speedup, all regimes (sweep)",
        "1.024–1.059×",
        lambda s: rng(s.fusion_speedup("graph"), "×"),
    )
    row("graph-replay fusion speedup per regime (sweep)", L40S["graph_fusion"], lambda s: s.graph_by_regime())
    row(
        "fusion saving from launch elimination, model (roofline, eager)",
        L40S["launch_share"],
        lambda s: rng(s.model_launch_share(), "%", 1),
    )
    row(
        "fusion saving removed by graph replay, measured (sweep)",
        "n/a",
        lambda s: rng(s.measured_launch_share(), "%", 1),
    )
    row("correctness checks passed", L40S["checks"], lambda s: s.checks())
    row("timed calls (eager / all modes)", L40S["calls"], lambda s: " / ".join(map(fmt.fmt, s.calls())))
    return lines


# (label, L40S figure, v1 values per run, v2 figure name, unit); v1 functions take (study, mode)
V1_V2 = (
    ("global-to-oracle gap (decided)", L40S["gap"], lambda s, m: s.gap()[m], "gap_to_oracle", "%"),
    (
        "best deployable net gain over phase-keyed",
        "n/a",
        lambda s, m: s.same_run_net(m, "phase-keyed"),
        "policy_gain_vs_phase",
        "%",
    ),
    (
        "best deployable net gain over global",
        L40S["policy"],
        lambda s, m: s.same_run_net(m, "global"),
        "policy_gain_vs_global",
        "%",
    ),
    (
        "phase-keyed net gain over global",
        "n/a",
        lambda s, m: s.same_run_phase_split(m),
        "phase_split_gain",
        "%",
    ),
    (
        "fusion speedup (v1: sweep; v2: trace-weighted)",
        {"eager": L40S["eager_fusion"], "graph": L40S["graph_fusion"]},
        lambda s, m: s.fusion_speedup(m),
        "fusion_speedup",
        "x",
    ),
)  # fmt: skip  (one row of the table per entry)


def _v1_v2_table(name: str, study: Study) -> list[str]:
    lines = [
        "",
        f"## v1 (same-run) and v2 (cross-run): {STUDIES.get(name, name)}",
        "",
        "v1: chosen and scored on each run's test split (the best deployable policy x arm picked on test), "
        "min–max over runs; the v1 fusion figure is the graph sweep's (two fixed shapes, four regimes). "
        "v2: the decision's figure (the best deployable policy x arm picked on a validation slice inside "
        "train; fusion on the study's own trace), as decision v3.1 computes it. Moved: v2 minus the mean of "
        "the v1 runs. Since v3 the fusion speedup is a kernel recommendation row, not decided.",
        "",
        "| figure | mode | L40S (published) | v1 same-run | v2 cross-run [95% CI] | moved |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for label, l40s, v1_of, fig, unit in V1_V2:
        for mode in MODES:
            r = study.figure(mode, fig)
            v1 = v1_of(study, mode)
            v2 = float(r["estimate"]) if r is not None else float("nan")
            shown_unit = "×" if unit == "x" else "%"
            lines.append(
                f"| {label} | {mode} | {l40s[mode] if isinstance(l40s, dict) else l40s} | "
                f"{rng(v1, shown_unit)} | {study.v2(mode, fig)} | {moved(v1, v2, unit)} |"
            )
    lines.append(f"| verdict | eager, graph | stop | — | {study.mode_verdicts()} | |")
    return lines


def _narrative(studies: dict[str, Study]) -> list[str]:
    names = list(studies)
    d = studies[names[0]]
    lines = ["", "## What agrees, what differs, and why", ""]
    lines += [
        _gap_text(d),
        "",
        _policy_text(d),
        "",
        _fusion_text(d),
        "",
        _launch_text(d),
        "",
        _volume_text(d),
    ]
    if len(names) > 1:
        r = studies[names[1]]
        lines += [
            "",
            f"**The real trace.** On the Azure conversation trace the verdict is `{r.verdict()[0]}` "
            f"({r.mode_verdicts()}): cross-run gap {r.v2_per_mode('gap_to_oracle')}; best deployable "
            f"net gain over the better of global and phase-keyed {r.v2_per_mode('policy_gain')}; phase-keyed over global "
            f"{r.v2_per_mode('phase_split_gain')}; trace-weighted graph fusion "
            f"{r.v2('graph', 'fusion_speedup')} (sweep {rng(r.fusion_speedup('graph'), '×')}). A real "
            "trace changes the shape mix (many decode batch sizes, most test keys unseen in train: "
            "`headroom trace describe`), so exact-key dispatch falls back to global more often. Of the "
            f"graph-mode gap, the phase split accounts for {r.v2('graph', 'made_of_phase_split')} and the "
            f"tile choice within a phase for {r.v2('graph', 'made_of_tile_within_phase')}.",
        ]
    return lines


def _gap_text(d: Study) -> str:
    gap_graph = d.figure("graph", "gap_to_oracle")
    graph_v2 = d.v2("graph", "gap_to_oracle")
    phase, tile = d.v2("graph", "made_of_phase_split"), d.v2("graph", "made_of_tile_within_phase")
    agrees = (
        gap_graph is None or gap_graph["state"] != "exceeds"
    )  # differs where the gap exceeds its threshold
    return (
        "**Global-to-oracle gap.** "
        + (
            f"Agrees: {graph_v2} under graph replay. "
            if agrees
            else f"Differs: on the H200 the global kernel is {graph_v2} from the oracle under graph replay "
            "(cross-run), against 0.149–0.670% on the L40S. "
        )
        + f"Of that, the phase split (one candidate for prefill, one for decode) accounts for {phase} of "
        f"the oracle's latency and the tile choice within a phase for {tile}: in the unfused arm alone the "
        f"same-run gap is {rng(_arm_gap(d, 'off', 'graph'))} (the tile surface is as flat as on the L40S), "
        f"in the fused arm {rng(_arm_gap(d, 'on', 'graph'))}, because our fused kernel re-rotates every K "
        "tile for each query block (BENCHMARKS.md: fused prefill at S ≥ 2048 runs 1.4–1.5× the "
        "attention-only time), so the best choice is fused for decode and unfused for prefill. Eager: "
        f"same-run (v1) {rng(d.gap()['eager'])}, but cross-run {d.v2('eager', 'gap_to_oracle')}; eager "
        "calls of a few µs of GPU work are bounded by the host's launch cost (~85 µs per call, "
        "BENCHMARKS.md), and the v1 gap was that jitter, which an oracle choosing on the numbers it is "
        "scored on exploits."
    )


def _policy_text(d: Study) -> str:
    return (
        "**Best deployable policy gain.** v1 (same-run, picked on test): unfused arm "
        f"{per_mode(d.best_policy('off'))}; fused arm {per_mode(d.best_policy('on'))}. v2, the decided "
        f"figure's v2 form, the net gain over the phase-keyed two-kernel rule: {d.v2_per_mode('policy_gain_vs_phase')} "
        f"(v3 decides on the gain over the better of global and phase-keyed: {d.v2_per_mode('policy_gain')}); "
        f"phase-keyed itself gains {d.v2_per_mode('phase_split_gain')} over the global kernel. So the "
        "fused arm's v1 gain, which looked like tile headroom, is the phase split: beyond it no deployable "
        "policy pays under graph replay, as on the L40S. The policy × fusion factorial (report) keeps the fusion effect from "
        "being credited to dispatch."
    )


def _fusion_text(d: Study) -> str:
    return (
        "**Eager vs graph fusion speedup.** In the sweep: eager "
        f"{rng(d.fusion_speedup('eager'), '×')} against 2.280–3.333× on the L40S; under graph replay "
        f"{rng(d.fusion_speedup('graph'), '×')} against 1.024–1.059×. Agrees in shape: most of the eager "
        "fusion win is a launch removed, and graph replay takes most of it away. On the study's own "
        f"trace (cross-run; a kernel recommendation row since decision v3, not decided) the best unfused "
        "global kernel's latency over the best fused one's (graph mode) is "
        f"{d.v2('graph', 'fusion_speedup')}: fused wins decodes ({d.v2('graph', 'fusion_speedup_decode')}) "
        f"and loses prefills ({d.v2('graph', 'fusion_speedup_prefill')}), which is why the fusion choice "
        "belongs to the phase split rather than to one global kernel."
    )


def _launch_text(d: Study) -> str:
    return (
        "**Launch elimination's share of the fusion saving.** "
        f"The roofline model attributes {rng(d.model_launch_share(), '%', 1)} of the predicted eager saving "
        f"to launches (L40S: 54–82%); measured, graph replay removes {rng(d.measured_launch_share(), '%', 1)} "
        "of the eager saving in the working-set sweep. Both say what the L40S study said: the fusion "
        "benefit is mostly launch overhead, the component CUDA Graphs amortize."
    )


def _volume_text(d: Study) -> str:
    return (
        f"**Correctness and volume.** {d.checks()}. The L40S ran 60 of 60 per run on ten Triton "
        "candidates; here the native torch SDPA backends join the gate, and a backend that has no kernel "
        "for GQA shapes (`efficient` with `enable_gqa=True`) fails every check and is excluded, as the gate "
        f"intends. Timed calls: {fmt.fmt(d.calls()[0])} eager (L40S 403,200 for ten candidates; "
        f"{d.admitted()} admitted here), {fmt.fmt(d.calls()[1])} with graph replay."
    )


def _wall_times(studies: dict[str, Study]) -> list[str]:
    names = list(studies)
    lines = [
        "",
        "## Wall time of the H200 runs",
        "",
        "| stage | " + " | ".join(names) + " |",
        "| --- | " + " | ".join("---" for _ in names) + " |",
    ]
    walls = {n: studies[n].wall_times(REFERENCE / n) for n in names}
    stages = sorted({k for n in names for k in walls[n][0]})
    write = fmt.number_format([t for n in names for t in walls[n][0].values()])  # one format, in s
    for st in stages:
        lines.append(f"| {st} | " + " | ".join(_s(write, walls[n][0].get(st)) for n in names) + " |")
    lines.append(
        "| **GPU stages together** | "
        + " | ".join(f"**{fmt.fmt(round(walls[n][1]))} s**" for n in names)
        + " |"
    )
    lines += [
        "",
        "The measurement issue's goal is all GPU stages, compile included, under 10 minutes on one H200: "
        + ", ".join(f"{n} {walls[n][1] / 60:.1f} min" for n in names)
        + ". (The analysis stages in this table ran on the GPU host too; replay reruns them on any CPU.)",
        "",
    ]
    return lines


def _s(write, seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{write(seconds)} s"


def _arm_gap(study: Study, arm: str, mode: str) -> pd.Series:
    pe = study.read("policy_eval.parquet")
    g = pe[(pe.policy == "global") & (pe.fusion == arm) & (pe["mode"] == mode)]
    return g["gap_to_oracle_pct"]


def replay(study: str, workdir: Path) -> Path:
    """Replay one reference study in a private copy of the project; return its results folder."""
    from headroom.core.replay import copy_project

    project = copy_project(workdir / study)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "--cores",
            "1",
            "--config",
            f"replay=data/reference/h200/{study}",
        ],
        cwd=project,
        env=env,
        check=True,
        capture_output=True,
    )
    return project / "results" / f"replay-h200-{study}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--results",
        action="append",
        default=[],
        metavar="STUDY=DIR",
        help="use an existing replayed results folder instead of replaying",
    )
    p.add_argument("--out", type=Path, default=ROOT / "REPRODUCTION.md")
    args = p.parse_args(argv)
    given = dict(r.split("=", 1) for r in args.results)
    with tempfile.TemporaryDirectory() as tmp:
        studies = {}
        for name in all_studies():
            results = Path(given[name]) if name in given else replay(name, Path(tmp))
            studies[name] = Study(name, results)
        args.out.write_text(build(studies))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
