"""Generate REPRODUCTION.md: the L40S study's figures beside the H200 reference studies'.

    python scripts/reproduction.py                     # replays both reference studies, writes REPRODUCTION.md
    python scripts/reproduction.py --results default=DIR --results azure-conv=DIR [--out FILE]

Every H200 number is read from the replayed artifacts (hash-verified): nothing here is typed by
hand except the published L40S figures, which are the study note's (shared/seed).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from headroom.analysis.policies import DEPLOYABLE  # noqa: E402
from headroom.core import artifacts  # noqa: E402

STUDIES = {"default": "H200 default trace", "azure-conv": "H200 real trace (Azure conv)"}
GPU_STAGES = ("environment", "correctness", "portfolio", "lifecycle", "graph_sweep", "calibrate")
L40S = {
    "gap": "0.149–0.670%",
    "policy": "0–0.305% / 0%",
    "eager_fusion": "2.280–3.333×",
    "graph_fusion": "1.024–1.059× (four regimes)",
    "launch_share": "54–82%",
    "checks": "60 of 60 per run",
    "calls": "403,200",
}


def rng(values, unit="%", digits=3) -> str:
    v = pd.Series(values, dtype=float).dropna()
    if v.empty:
        return "n/a"
    lo, hi = v.min(), v.max()
    f = f"{{:.{digits}f}}"
    return f"{f.format(lo)}–{f.format(hi)}{unit}" if f.format(lo) != f.format(hi) else f"{f.format(lo)}{unit}"


class Study:
    def __init__(self, name: str, results: Path):
        self.name, self.results = name, results

    def read(self, rel: str) -> pd.DataFrame:
        return artifacts.read(self.results / rel)

    def portfolio(self) -> pd.DataFrame:
        return pd.concat(
            [artifacts.read(p) for p in sorted((self.results / "portfolio").glob("run-[0-9].parquet"))]
        )

    # -- figures --------------------------------------------------------------------------------
    def gap(self) -> dict[str, pd.Series]:
        pe = self.read("policy_eval.parquet")
        g = pe[(pe.policy == "global") & (pe.fusion == "free")]
        return {m: g[g["mode"] == m]["gap_to_oracle_pct"] for m in ("eager", "graph")}

    def best_policy(self, arm: str) -> dict[str, pd.Series]:
        pe = self.read("policy_eval.parquet")
        d = pe[pe.policy.isin(DEPLOYABLE) & (pe.fusion == arm)]
        best = d.groupby(["run", "mode"])["gain_vs_global_pct"].max().reset_index()
        return {m: best[best["mode"] == m]["gain_vs_global_pct"] for m in ("eager", "graph")}

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
        failed = c[~c.passed]
        text = f"{int(c.passed.sum())} of {len(c)} checks ({c.candidate.nunique()} candidates × {c.shape_key.nunique()} shapes)"
        if len(failed):
            names = ", ".join(sorted(failed.candidate.unique()))
            text += f"; failed and excluded: {names}"
        return text

    def calls(self) -> tuple[int, int]:
        p = self.portfolio()
        return int(p[p["mode"] == "eager"]["timed_calls"].sum()), int(p["timed_calls"].sum())

    def decision_figure(self, name: str) -> tuple[str, str]:
        d = self.read("decision.parquet").iloc[0]
        return str(d[f"{name}_range"]), str(d[f"{name}_ci"])

    def admitted(self) -> int:
        return int(self.portfolio()["candidate"].nunique())

    def verdict(self) -> tuple[str, str]:
        d = self.read("decision.parquet").iloc[0]
        return str(d["verdict"]), str(d["reason"])

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
    names = list(studies)
    head = "| figure | L40S (published) | " + " | ".join(STUDIES.get(n, n) for n in names) + " |"
    lines = [
        "# Reproduction: the L40S study beside the H200 reference studies",
        "",
        "Generated by `python scripts/reproduction.py` from the replayed H200 reference data",
        "(`data/reference/h200/<study>/`, hashes verified); do not edit by hand. L40S figures are the",
        "published ones of the study note this project grew from. Ranges are min–max over the three runs",
        "(or over shapes and regimes where the figure is per shape), eager and CUDA Graph modes apart.",
        "",
        head,
        "| --- | --- | " + " | ".join("---" for _ in names) + " |",
    ]

    def row(label, l40s, fn):
        lines.append(f"| {label} | {l40s} | " + " | ".join(fn(studies[n]) for n in names) + " |")

    row("verdict", "stop", lambda s: s.verdict()[0])
    row("global-to-oracle gap (fusion free)", L40S["gap"], lambda s: per_mode(s.gap()))
    row("best deployable policy gain, unfused arm", "0–0.305%", lambda s: per_mode(s.best_policy("off")))
    row("best deployable policy gain, fused arm", "0%", lambda s: per_mode(s.best_policy("on")))
    row(
        "best deployable net policy gain after lifecycle costs (decision figure, CI)",
        "n/a",
        lambda s: "{} {}".format(*s.decision_figure("policy_gain")),
    )
    row("eager same-tile fusion speedup", L40S["eager_fusion"], lambda s: rng(s.fusion_speedup("eager"), "×"))
    row(
        "graph-replay fusion speedup, all regimes",
        "1.024–1.059×",
        lambda s: rng(s.fusion_speedup("graph"), "×"),
    )
    row("graph-replay fusion speedup per regime", L40S["graph_fusion"], lambda s: s.graph_by_regime())
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
    row("timed calls (eager / all modes)", L40S["calls"], lambda s: "{:,} / {:,}".format(*s.calls()))

    lines += ["", "## What agrees, what differs, and why", ""]
    d = studies[names[0]]
    gap_graph = d.gap()["graph"]
    gap_eager = d.gap()["eager"]
    lines.append(
        "**Global-to-oracle gap.** "
        + (
            f"Differs: on the H200 the global kernel is {rng(gap_graph)} from the oracle under graph replay "
            f"and {rng(gap_eager)} eager, against 0.149–0.670% on the L40S. "
            if gap_graph.min() > 0.670
            else f"Agrees: {rng(gap_graph)} under graph replay. "
        )
        + "The graph-mode gap comes from the fusion choice, not the tile: in the unfused arm alone the "
        f"gap is {rng(_arm_gap(d, 'off', 'graph'))} (the tile surface is as flat as on the L40S), in the "
        f"fused arm {rng(_arm_gap(d, 'on', 'graph'))}, because our fused kernel re-rotates every K tile "
        "for each query block (BENCHMARKS.md: fused prefill at S ≥ 2048 runs 1.4–1.5× the attention-only "
        "time), so the best choice is fused for decode and short prefill but unfused for long prefill. "
        "Eager gaps are wider and move from run to run: eager calls of a few µs of GPU work are bounded by "
        "the host's launch cost (~85 µs per call, BENCHMARKS.md), whose jitter is what the oracle exploits."
    )
    lines.append("")
    lines.append(
        "**Best deployable policy gain.** "
        f"Unfused arm: {per_mode(d.best_policy('off'))}; fused arm: {per_mode(d.best_policy('on'))}. "
        "In the unfused arm this agrees with the L40S (no tile headroom under graph replay); the fused "
        "arm differs because the fused kernel's cost depends on the tile (block_m sets how often K is "
        "re-rotated). The policy × fusion factorial (report) keeps this fusion effect from being credited "
        "to dispatch."
    )
    lines.append("")
    lines.append(
        "**Eager vs graph fusion speedup.** "
        f"Eager {rng(d.fusion_speedup('eager'), '×')} against 2.280–3.333× on the L40S; under graph replay "
        f"{rng(d.fusion_speedup('graph'), '×')} against 1.024–1.059×. Agrees in shape: most of the eager "
        "fusion win is a launch removed, and graph replay takes most of it away. Differs in size: on the "
        f"H200 a graph-mode margin of {rng((d.fusion_speedup('graph') - 1) * 100, '%', 0)} remains, because "
        "the standalone RoPE kernel's extra read and "
        "write of q and k is a larger share of a short, bandwidth-bound call on a GPU with 4.8 TB/s HBM and "
        "a 60 MiB L2 than on the L40S."
    )
    lines.append("")
    lines.append(
        "**Launch elimination's share of the fusion saving.** "
        f"The roofline model attributes {rng(d.model_launch_share(), '%', 1)} of the predicted eager saving "
        f"to launches (L40S: 54–82%); measured, graph replay removes {rng(d.measured_launch_share(), '%', 1)} "
        "of the eager saving in the working-set sweep. Both say what the L40S study said: the fusion "
        "benefit is mostly launch overhead, the component CUDA Graphs amortize."
    )
    lines.append("")
    lines.append(
        f"**Correctness and volume.** {d.checks()}. The L40S ran 60 of 60 per run on ten Triton "
        "candidates; here the native torch SDPA backends join the gate, and a backend that has no kernel "
        "for GQA shapes (`efficient` with `enable_gqa=True`) fails every check and is excluded, as the gate "
        "intends. Timed calls: {:,} eager (L40S 403,200 for ten candidates; {} admitted here), "
        "{:,} with graph replay.".format(d.calls()[0], d.admitted(), d.calls()[1])
    )
    if len(names) > 1:
        r = studies[names[1]]
        lines += [
            "",
            f"**The real trace.** On the Azure conversation trace the verdict is `{r.verdict()[0]}`: gap "
            f"{per_mode(r.gap())}; best unfused policy {per_mode(r.best_policy('off'))}; graph fusion "
            f"{rng(r.fusion_speedup('graph'), '×')}. A real trace changes the shape mix (many decode batch "
            "sizes, most test keys unseen in train: `headroom trace describe`), so exact-key dispatch "
            "falls back to global more often and bucketed or clustered policies carry the gain.",
        ]
    lines += [
        "",
        "## Wall time of the H200 runs",
        "",
        "| stage | " + " | ".join(names) + " |",
        "| --- | " + " | ".join("---" for _ in names) + " |",
    ]
    walls = {n: studies[n].wall_times(ROOT / "data/reference/h200" / n) for n in names}
    stages = sorted({k for n in names for k in walls[n][0]})
    for st in stages:
        lines.append(
            f"| {st} | " + " | ".join(f"{walls[n][0].get(st, float('nan')):.1f} s" for n in names) + " |"
        )
    lines.append(
        "| **GPU stages together** | " + " | ".join(f"**{walls[n][1]:.0f} s**" for n in names) + " |"
    )
    lines += [
        "",
        "The measurement issue's goal is all GPU stages, compile included, under 10 minutes on one H200: "
        + ", ".join(f"{n} {walls[n][1] / 60:.1f} min" for n in names)
        + ". (The analysis stages in this table ran on the GPU host too; replay reruns them on any CPU.)",
        "",
    ]
    return "\n".join(lines)


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
        for name in STUDIES:
            results = Path(given[name]) if name in given else replay(name, Path(tmp))
            studies[name] = Study(name, results)
        args.out.write_text(build(studies))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
