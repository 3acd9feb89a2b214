"""A kernel family as a study, end to end on the CPU interpreter (issue 32): a family written only
against docs/families.md and kept in the test folder (tests/families/softmax_family.py, one of its
candidates wrong), and the example family users copy (examples/rmsnorm), each named by `family:` in
a study overlay, run through every stage to a decision, a recommendation, a dispatch table and a
report, with the family in the artifacts' identity and nothing attention-specific asked of it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from headroom import dispatch
from headroom.core import artifacts
from tests.pipeline import copy_project, headroom, snakemake

pytestmark = pytest.mark.slow

SOFTMAX = """\
family: userfam.softmax_family:WRONG
on_correctness_failure: exclude
smoke:
  family: userfam.softmax_family:WRONG
  trace: {invocations: 16, sampler: stride}
  portfolio: {runs: 3, reps: 3, mode: eager}
  lifecycle: {dispatch_lookups: 200, dispatch_repeats: 2, switch_reps: 2, switch_invocations: 1, switch_pairs: 1}
  calibrate: {reps: 1}
  policies: {bootstrap_resamples: 50, random_draws: 5}
"""


#: The example family measured on the H200 (data/reference/h200/rmsnorm-6x160), replayed here.
REPLAY = "replay-h200-rmsnorm-6x160"
#: The fused-MoE family (Qwen3-MoE-like gate-up projection) measured on the H200 on two traces: the
#: deployment profile each ships (the config pinned for captured calls, tokens <= 512, and for the
#: larger eager ones), the recorded decision's per-part verdicts.
MOE_REPLAYS = {
    "replay-h200-moe-6x160": ("m16-n64-k128-g16-w4-s3", "m128-n256-k64-g1-w8-s4"),
    "replay-h200-moe-azure-conv-6x160": ("m16-n64-k128-g1-w4-s4", "m128-n256-k64-g1-w8-s4"),
}
MOE_SHAPE = {"dtype": "bfloat16", "experts": 128, "hidden": 2048, "n": 1536, "routing": "uniform", "top_k": 8}


@pytest.fixture(scope="module")
def family_run(tmp_path_factory):
    project = copy_project(tmp_path_factory.mktemp("family") / "headroom")
    # the user's family lives in their own folder of the project, not in headroom's packages
    (project / "userfam").mkdir()
    shutil.copy(Path(__file__).parents[1] / "families/softmax_family.py", project / "userfam")
    (project / "config/studies/softmax.yaml").write_text(SOFTMAX)
    proc = snakemake(project, "--config", "studies=[softmax,rmsnorm]", timeout=1500)
    project.joinpath("snakemake-run.log").write_text(proc.stdout + proc.stderr)
    return project


@pytest.mark.parametrize("study, family", [("softmax", "row-softmax"), ("rmsnorm", "rmsnorm")])
def test_a_family_study_runs_to_a_decision_a_recommendation_and_a_report(family_run, study, family):
    folder = family_run / "results" / study
    for name in ("steps", "trace", "candidates", "correctness", "lifecycle", "policy_eval", "decision",
                 "recommendation", "roofline"):  # fmt: skip
        assert artifacts.verify(folder / f"{name}.parquet")
    trace = pd.read_parquet(folder / "trace.parquet")
    assert set(trace["family"]) == {family} and {"step_kind", "shape", "weight", "tokens"} <= set(
        trace.columns
    )
    record = artifacts.read_provenance(folder / "candidates.parquet")["extra"]["family"]
    assert record["name"] == family and len(record["source_blake3"]) == 64
    decision = pd.read_parquet(folder / "decision.parquet")
    assert decision["verdict"].iloc[0] == "no-decision"  # interpreter timings are not GPU measurements
    assert (folder / "report/index.html").read_text().count(family) >= 1
    table = json.loads((folder / "dispatch.json").read_text())
    assert table["scopes"], "the dispatch table names what to ship"


def test_the_wrong_candidate_is_excluded_loudly_and_the_rest_timed(family_run):
    folder = family_run / "results/softmax"
    correctness = pd.read_parquet(folder / "correctness.parquet")
    assert not correctness.loc[correctness["candidate"] == "off-by-one", "passed"].any()
    assert "EXCLUDED" in (folder / "logs/correctness.log").read_text()
    timed = set(pd.read_parquet(folder / "portfolio/run-1.parquet")["candidate"])
    assert timed == {"torch", "exp-sum"}


def test_the_policies_key_on_the_familys_declared_features(family_run):
    pe = pd.read_parquet(family_run / "results/softmax/policy_eval.parquet")
    assert {"global", "phase-keyed", "batch-keyed", "bucketed", "exact-key"} <= set(pe["policy"])
    assert (pe["fusion"] != "on").all()  # a family has no fused arm


def test_the_family_studies_verify_and_are_in_the_catalog(family_run):
    assert headroom(family_run, "verify").returncode == 0
    proc = headroom(
        family_run, "query", "SELECT DISTINCT family FROM trace ORDER BY family", "--format", "csv"
    )
    assert proc.returncode == 0 and "row-softmax" in proc.stdout and "rmsnorm" in proc.stdout


def test_a_second_run_has_nothing_to_do(family_run):
    proc = snakemake(family_run, "--config", "studies=[softmax,rmsnorm]", "--dry-run")
    assert "Nothing to be done" in proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    """The H200 references of the families replayed in one project (their steps imported with the
    rest: the trace's lineage input), after their families' modules moved on: each replay verifies
    against the source its reference kept (headroom.core.replay.SOURCES)."""
    project = copy_project(tmp_path_factory.mktemp("family-replay") / "headroom")
    for source in ("examples/rmsnorm/family.py", "headroom/families/moe/family.py"):
        with open(project / source, "a") as fh:
            fh.write("# edited after the references were measured\n")
    snakemake(project, "--config", f"studies=[{','.join([REPLAY, *MOE_REPLAYS])}]", timeout=900)
    return project


def test_the_h200_family_reference_replays_to_its_recorded_verdict_and_ships(replayed):
    folder = replayed / "results" / REPLAY
    proc = headroom(replayed, "--study", REPLAY, "gate")
    assert proc.returncode == 4 and proc.stdout.startswith("no-decision"), proc.stdout
    decision = pd.read_parquet(folder / "decision.parquet")
    assert set(decision["reason_code"]) == {"straddles"}  # the mixed part's gap, +0.41% [-0.19, +1.08]
    parts = decision.drop_duplicates("mode").set_index("mode")
    assert parts.loc["graph@decode-only", "mode_verdict"] == "stop"
    rec = pd.read_parquet(folder / "recommendation.parquet")
    assert set(rec["kernel"]) == {"BLOCK4096-w8-s3"} and set(rec["kernel_family"]) == {"rmsnorm"}
    assert set(rec["gpu_name"]) == {"NVIDIA H200"}


def test_the_replayed_family_reference_verifies_with_its_steps(replayed):
    folder = replayed / "results" / REPLAY
    assert artifacts.verify(folder / "steps.parquet")
    proc = headroom(replayed, "--study", REPLAY, "verify")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("study", sorted(MOE_REPLAYS))
def test_the_moe_references_replay_to_their_verdicts_and_ship_a_config_per_capture_part(replayed, study):
    folder = replayed / "results" / study
    proc = headroom(replayed, "--study", study, "gate")
    assert proc.returncode == 4 and proc.stdout.startswith("no-decision"), proc.stdout
    decision = pd.read_parquet(folder / "decision.parquet").drop_duplicates("mode").set_index("mode")
    # the tuned table beats one config for every M in either single mode (+5-7%, decided) ...
    assert (decision.loc[["eager", "graph"], "mode_verdict"] == "continue").all()
    # ... but within the profile's parts, each with its own config, the rest straddles 1% or is too
    # small a sample (the uncaptured part's 25-26 test invocations)
    assert (decision.loc[["graph@captured", "eager@uncaptured"], "mode_verdict"] == "no-decision").all()
    assert headroom(replayed, "--study", study, "verify").returncode == 0
    table = dispatch.load(folder)  # the deployment profile, routed by the token count
    captured, uncaptured = MOE_REPLAYS[study]
    assert [table.choose(tokens=t, **MOE_SHAPE).id for t in (1, 512, 513, 8192)] == [captured, captured,
                                                                                      uncaptured, uncaptured]  # fmt: skip
    rec = pd.read_parquet(folder / "recommendation.parquet")
    assert set(rec["gpu_name"]) == {"NVIDIA H200"} and set(rec["kernel_family"]) == {"moe"}
