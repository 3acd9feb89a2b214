"""Generate REPRODUCTION.md: the L40S study's figures beside the committed H200 reference studies'.

    python tools/reproduction.py                     # replays the references, writes REPRODUCTION.md
    python tools/reproduction.py --results STUDY=DIR [...] [--out FILE]

Every H200 number is read from the replayed artifacts (hash-verified), decided under today's rule:
nothing here is typed by hand except the published L40S figures, which are the study note's
(shared/seed). The comparisons under earlier rules and with the retired references are history:
docs/history/REPRODUCTION-decision-v3.md.
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

from headroom.core import artifacts  # noqa: E402
from headroom.core import format as fmt  # noqa: E402  (the one number formatter)
from headroom.decide import rule  # noqa: E402

# The committed references, in the table's order, with the column heads the table gives them.
STUDIES = {
    "default-flashinfer-6x160": "H200 default trace, 6 × 160 (decision v4's design), FlashInfer in the portfolio",
    "azure-conv-flashinfer-6x160": "H200 Azure conv trace, 6 × 160, FlashInfer in the portfolio",
    "mooncake-conv-flashinfer-3x30": "H200 Mooncake conv trace, 3 × 30, FlashInfer in the portfolio",
}
REFERENCE = ROOT / "data" / "reference" / "h200"


MODES = ("eager", "graph")
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


class Study:
    def __init__(self, name: str, results: Path):
        self.name, self.results = name, results

    def read(self, rel: str) -> pd.DataFrame:
        return artifacts.read(self.results / rel)

    def portfolio(self) -> pd.DataFrame:
        return pd.concat(
            [
                artifacts.read(p)
                for p in sorted((self.results / "portfolio").glob("run-*.parquet"))
                if not p.name.endswith("-samples.parquet")
            ]
        )

    # -- same-run (v1) figures, one value per run, from policy_eval ------------------------------
    def gap(self) -> dict[str, pd.Series]:
        pe = self.read("policy_eval.parquet")
        g = pe[(pe.policy == "global") & (pe.fusion == "free")]
        return {m: g[g["mode"] == m]["gap_to_oracle_pct"] for m in MODES}

    def figure(self, mode: str, name: str) -> pd.Series | None:
        d = self.read("decision.parquet")
        row = d[(d["mode"] == mode) & (d["figure"] == name)]
        return row.iloc[0] if len(row) else None

    def v2(self, mode: str, name: str) -> str:
        r = self.figure(mode, name)
        return "n/a" if r is None else ci(r["estimate"], r["ci_low"], r["ci_high"], str(r["unit"]))

    def v2_per_mode(self, name: str, modes=MODES) -> str:
        return "; ".join(f"{m} {self.v2(m, name)}" for m in modes)

    def verdict(self) -> tuple[str, str]:
        d = self.read("decision.parquet").iloc[0]
        return str(d["verdict"]), str(d["reason"])

    def code(self) -> str:
        return str(self.read("decision.parquet")["reason_code"].iloc[0])

    def parts(self) -> str:
        d = self.read("decision.parquet").drop_duplicates("mode")
        d = d[d["mode"].astype(str).str.contains("@")]
        return ", ".join(
            f"{m} {v} ({c})"
            for m, v, c in zip(d["mode"], d["mode_verdict"], d["mode_reason_code"], strict=True)
        )

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
            shapes = c.shape_key.nunique()
            counts = unsupported.groupby("candidate").shape_key.nunique()
            named = ", ".join(f"{name} ({n} of {shapes} shapes)" for name, n in counts.items())
            text += f"; unsupported (no kernel for some shapes), so not timed: {named}"
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


INTRO = [
    "# Reproduction: the L40S study beside the H200 reference studies",
    "",
    "Generated by `python tools/reproduction.py` from the replayed H200 references",
    "(`data/reference/h200/<study>/`, hashes verified); do not edit by hand. L40S figures are the",
    "published ones of the study note this project grew from. H200 figures are cross-run (chosen on one",
    "run, scored on another, pooled over the ordered pairs of runs) with the two-way bootstrap's 95%",
    f"interval, decided under `{rule.RULE_VERSION}`; the same-run figure (chosen and scored on one run's",
    "test split, biased up by the winner's curse) is given as the min–max over runs. Each reference",
    "has FlashInfer in the portfolio and was recorded with eager calls timed on a busy GPU. Earlier",
    "rules' verdicts and the retired references: docs/history/REPRODUCTION-decision-v3.md; the first",
    "Mooncake recording: docs/history/mooncake-conv.md; the Azure conv trace at 6 × 100 without",
    "FlashInfer (`azure-conv-gen2-6x100`, host-included eager): docs/history/azure-conv-gen2-6x100.md.",
    "The default trace at 3 × 48 (`default-gen2`, retired from",
    "main since: `python3 tools/restore_reference.py default-gen2`) had a column here under `decision-v4`;",
    "`git show c11eeb5:REPRODUCTION.md` shows it. The default trace at 6 × 160 without FlashInfer",
    "(`default-gen2-6x160`, retired when default-flashinfer-6x160 re-recorded it) had the first column:",
    "docs/history/default-gen2-6x160.md.",
]


def _cell(s, fig: str, modes=MODES) -> str:
    return "; ".join(f"{m} {s.v2(m, fig)}" for m in modes if s.figure(m, fig) is not None) or "n/a"


def _figure_table(studies: dict) -> list[str]:
    names = list(studies)
    lines = INTRO + [
        "",
        "| figure | L40S (published) | " + " | ".join(STUDIES.get(n, n) for n in names) + " |",
        "| --- | --- | " + " | ".join("---" for _ in names) + " |",
    ]

    def row(label, l40s, fn):
        lines.append(f"| {label} | {l40s} | " + " | ".join(fn(studies[n]) for n in names) + " |")

    row("verdict (reason code; per part)", "stop", lambda s: f"{s.verdict()[0]} (`{s.code()}`; {s.parts()})")
    row("global-to-oracle gap, cross-run (decided)", L40S["gap"], lambda s: _cell(s, "gap_to_oracle"))
    row("global-to-oracle gap, same-run (fusion free)", L40S["gap"], lambda s: per_mode(s.gap()))
    row(
        "best deployable net gain over the better of global and phase-keyed (decided)",
        "n/a",
        lambda s: _cell(s, "policy_gain"),
    )
    row("phase-keyed net gain over global", "n/a", lambda s: _cell(s, "phase_split_gain"))
    row("kernel to ship over the best unfused kernel", "n/a", lambda s: _cell(s, "kernel_vs_best_unfused"))
    row(
        "eager same-tile fusion speedup (sweep)",
        L40S["eager_fusion"],
        lambda s: rng(s.fusion_speedup("eager"), "×"),
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
    return lines  # fmt: skip  (one row of the table per line)


def build(studies: dict) -> str:
    return "\n".join(_figure_table(studies) + _wall_times(studies))


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
    other = [st for st in stages if st not in GPU_STAGES]
    others = " and ".join([", ".join(other[:-1]), other[-1]] if len(other) > 1 else other)
    lines += [
        "",
        "The measurement issue's goal is all GPU stages, compile included, under 10 minutes on one H200: "
        + ", ".join(f"{n} {walls[n][1] / 60:.1f} min" for n in names)
        + f". (The other stages in this table, {others}, ran on the GPU host too, outside that sum;"
        + " replay reruns the analysis on any CPU.)",
        "",
    ]
    return lines


def _s(write, seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{write(seconds)} s"


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
        for name in [n for n in STUDIES if (REFERENCE / n / "trace.parquet").is_file()]:
            results = Path(given[name]) if name in given else replay(name, Path(tmp))
            studies[name] = Study(name, results)
        args.out.write_text(build(studies))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
