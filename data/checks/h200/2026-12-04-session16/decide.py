"""The decision stage's code on this session's MoE recordings, which are not replayable references:
their artifacts came from two machine leases whose trees differed in code the measurement does not
depend on (README.md, "Why these are not references"), and replay refuses a folder whose artifacts
record different code. Same calls as scripts/decision.py (figures.study_figures, decision.decide)
with the shipped `policies:`/`decision:`/`recommendation:` sections, and policy_eval's per-run
table-versus-single-config rows. From the repository root:
    python3 data/checks/h200/2026-12-04-session16/decide.py data/checks/h200/2026-12-04-session16/moe
Session 17 ran it on the references recorded in one lease (data/reference/h200/moe-6x160 and
moe-azure-conv-6x160): it reads the runs replay.recorded_runs finds, not the per-call samples beside them.
"""

import sys
from pathlib import Path

import pandas as pd

from headroom.core import artifacts, defaults, replay
from headroom.decide import decision, figures, policy_eval
from headroom.policies import Keying

folder = Path(sys.argv[1])
read = lambda name: pd.read_parquet(folder / f"{name}.parquet")  # noqa: E731
trace, lifecycle = read("trace"), read("lifecycle")
runs = pd.concat([read(f"portfolio/run-{r}") for r in replay.recorded_runs(folder)])
keying = Keying.of_record(artifacts.read_provenance(folder / "trace.parquet")["extra"]["family"])
options = dict(defaults.section("policies"))
train_fraction, seed = options.pop("train_fraction"), options.pop("seed")
thresholds = dict(defaults.section("decision"))
host = {"calibration": read("calibration"),
        "intermediate_ratio": float(defaults.section("recommendation")["intermediate_ratio"])}  # fmt: skip
figs = figures.study_figures(trace, runs, lifecycle, train_fraction=train_fraction, seed=seed,
                             deployment=thresholds.get("deployment"), thresholds=thresholds, keying=keying,
                             **host, **options)  # fmt: skip
verdict = decision.decide(figs, read("graph_sweep"), read("environment"), confidence=float(options["confidence"]),
                          **{k: v for k, v in thresholds.items() if k != "deployment"},
                          deployment=thresholds.get("deployment"), keying=keying)  # fmt: skip
pd.set_option("display.width", 250, "display.max_colwidth", 200)
print(
    f"runs {sorted(runs['run'].unique())}, {runs['invocation'].nunique()} invocations, "
    f"{runs['candidate'].nunique()} candidates"
)
print("VERDICT", verdict["verdict"].iloc[0], verdict["reason_code"].iloc[0])
print(verdict["reason"].iloc[0])
cols = ["mode", "figure", "estimate", "ci_low", "ci_high", "decided", "test_invocations", "detail"]
print(figs[[c for c in cols if c in figs.columns]].round(3).to_string(index=False))
pe = policy_eval.evaluate(trace, runs, lifecycle, train_fraction=train_fraction, seed=seed, keying=keying,
                          **host, **options)  # fmt: skip
shown = ["global", "config-table", "exact-key", "bucketed", "batch-keyed", "oracle"]
keep = ["mode", "run", "policy", "test_us", "gain_vs_global_pct", "ci_low", "ci_high", "global_candidate"]
rows = pe[pe["policy"].isin(shown)].drop_duplicates(["mode", "run", "policy"])[[c for c in keep if c in pe]]
print(rows.round(2).to_string(index=False))
summary = rows.groupby(["mode", "policy"])["gain_vs_global_pct"].agg(["mean", "min", "max"]).round(2)
print(summary.to_string())

# The table within each part of the deployment profile: its global is the best single config of the
# part's own calls (a server deploying graph mode up to the capture limit and eager above may pin one
# config for each), the table scored against it on the part's test invocations
for mode, captured in (("graph", True), ("eager", False)):
    inside = (trace[keying.captured_by] <= keying.capture_limit) == captured
    sub = trace[inside]
    part_runs = runs[(runs["mode"] == mode) & runs["invocation"].isin(sub["invocation"])]
    pe = policy_eval.evaluate(sub, part_runs, lifecycle, train_fraction=train_fraction, seed=seed,
                              keying=keying, **host, **options)  # fmt: skip
    rows = pe[pe["policy"].isin(shown)].drop_duplicates(["mode", "run", "policy"])
    print(
        f"{mode}@{'captured' if captured else 'uncaptured'} ({len(sub)} invocations, global "
        f"{sorted(set(rows['global_candidate']))}):"
    )
    print(rows.groupby("policy")["gain_vs_global_pct"].agg(["mean", "min", "max"]).round(2).to_string())
