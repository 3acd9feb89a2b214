"""`headroom plan`'s cost model, fitted on the recorded H200 references (data/reference/h200)."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headroom.core import cli
from headroom.core import config as hconfig
from headroom.measure import cost, portfolio

FIXED_SAMPLER_CELLS = (
    Path(__file__).resolve().parents[1] / "fixtures/h200-fixed-sampler/run-1-samples.parquet"
)


@pytest.fixture(scope="module")
def model() -> cost.Model:
    return cost.fit(cost.references())


def _study(name: str, overrides: dict | None = None) -> dict:
    config = hconfig.deep_merge(hconfig.load(cost.PROJECT_ROOT / "config" / "config.yaml"), overrides or {})
    return hconfig.plan_studies({**config, "studies": [name]}, cuda_available=True)[name]


def test_the_model_predicts_each_recorded_reference_within_20_percent(model):
    """In-sample fit over the committed references (two, default-flashinfer-6x160 and azure-conv-flashinfer-6x160,
    both of the adaptive sampler, since default-gen2 and the earlier ones were retired:
    tools/restore_reference.py); a stage of ``cost.UNEXPLAINED`` (left out of the fit) is left out of
    both sides here, and shown to be one the model still misses."""
    assert len(model.refs) >= 2
    for ref in model.refs:
        plan = cost.reference_plan(ref, model)
        measured, predicted = plan.facts["measured_s"], plan.total_s
        for _, stage in cost.UNEXPLAINED & {(ref.name, s) for s in ref.stage_s}:
            stage_predicted = sum(n * s for name, n, s in plan.jobs if name == stage)
            assert ref.stage_s[stage] > 2 * stage_predicted, ref.name  # still missed: else drop it
            measured, predicted = measured - ref.stage_s[stage], predicted - stage_predicted
        assert predicted == pytest.approx(measured, rel=0.20), ref.name
        assert plan.cells == len(ref.run_s) * ref.cells


def test_replaying_the_fixed_sampler_on_recorded_samples_gives_back_the_recorded_cells():
    # every committed reference was timed by the adaptive sampler: six cells of the last one timed
    # by the fixed sampler (default-gen2, retired) are a fixture
    samples = pd.read_parquet(FIXED_SAMPLER_CELLS)
    per_mode = cost.simulated_cell(
        samples, portfolio.settings({"sampler": "fixed", "reps": 280, "graph_calls": 20})
    )
    assert per_mode["eager"][0] == 280 and per_mode["graph"][0] == 14
    recorded = samples.assign(t=samples["latency_us"] * samples["calls"]).groupby("mode")["t"].sum()
    cells = samples.groupby("mode")[["invocation", "candidate"]].value_counts().groupby("mode").size()
    for mode in ("eager", "graph"):
        assert per_mode[mode][1] == pytest.approx(recorded[mode] * 1e-6 / cells[mode])


def test_the_adaptive_sampler_is_predicted_to_take_fewer_samples(model):
    study = _study("default")
    adaptive = cost.plan_study("default", study, model)
    fixed = cost.plan_study("default", _study("default", {"portfolio": {"sampler": "fixed"}}), model)
    assert study["portfolio"]["sampler"] == "adaptive"  # the shipped default
    cells = (
        study["portfolio"]["runs"] * 2 * study["trace"]["invocations"] * 20
    )  # runs x modes x invocations x admitted
    assert adaptive.cells == fixed.cells == cells
    per_cell, least = adaptive.facts["samples_per_cell"], study["portfolio"]["adaptive"]["min_samples"]
    assert least["eager"] <= per_cell["eager"] < 280 and least["graph"] <= per_cell["graph"] <= 28
    assert adaptive.gpu_s < fixed.gpu_s
    assert fixed.facts["candidates"] == 20  # 21, native-sdpa-efficient never admitted on the H200


def test_a_backend_one_trace_cannot_run_is_still_planned_where_the_closest_reference_ran_it():
    # mooncake-conv (left out of the fit: OUT_OF_RANGE) never timed the flash backend on its long
    # contexts; a model that knows it still plans flash on the default trace, as default-flashinfer-6x160
    # ran it (the closest: the default's trace source and today's eager timing, spin-events)
    refs = cost.references()
    assert "mooncake-conv-flashinfer-3x30" not in {r.name for r in refs}
    mooncake = cost.read_reference(cost.REFERENCE_ROOT / "h200" / "mooncake-conv-flashinfer-3x30")
    assert {"native-sdpa-flash", "native-sdpa-efficient"} <= cost._dropped(mooncake)
    plan = cost.plan_study("default", _study("default"), cost.fit([*refs, mooncake]))
    assert plan.facts["reference"] == "default-flashinfer-6x160" and plan.facts["candidates"] == 20
    # the default's eager cells stop at their minimum (6) on the reference's samples, a few above it
    assert plan.facts["samples_per_cell"]["eager"] == pytest.approx(6.0, abs=0.05)


def test_the_pilot_fits_one_device_call(model):
    plan = cost.plan_study("power-pilot", _study("power-pilot"), model)
    assert plan.facts["invocations"] == 120 and plan.facts["sampler"] == "adaptive"
    assert plan.facts["shapes"] > 19  # a longer lognormal log brings new shapes
    assert plan.gpu_s < 600
    jobs = {stage: (n, s) for stage, n, s in plan.jobs}
    assert jobs["portfolio"][0] == 3 and all(np.isfinite(s) and s > 0 for _, s in jobs.values())


def test_a_family_study_is_planned_on_its_own_candidates_and_calls(model, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the plan imports the family; nothing runs on a GPU
    plan = cost.plan_study("rmsnorm", _study("rmsnorm"), model)
    facts = plan.facts
    assert facts["candidates"] == 4  # the example's four @triton.autotune configs, not attention's
    assert plan.cells == facts["runs"] * len(facts["modes"]) * facts["invocations"] * 4
    assert facts["trace_note"].startswith("family rmsnorm")
    jobs = {stage: s for stage, _, s in plan.jobs}
    attention = {stage: s for stage, _, s in cost.plan_study("default", _study("default"), model).jobs}
    assert jobs["graph_sweep"] < attention["graph_sweep"]  # a family's sweep only says it does not apply


def test_plan_verb_prints_each_study_and_names_bad_input(capsys, tmp_path):
    assert cli.main(["plan", "default", "replay-h200-mooncake-conv-flashinfer-3x30", "--device", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "study default (cuda: --device cuda): 160 invocations" in out
    assert "6 runs" in out and "timed cells 38,400" in out  # 6 x 2 modes x 160 x 20 timed candidates
    assert "replay of" in out and "no GPU jobs" in out
    assert cli.main(["plan", "no-such-study"]) == cli.EXIT_USAGE
    assert "unknown study 'no-such-study'" in capsys.readouterr().err
    assert cli.main(["plan", "default", "--references", str(tmp_path)]) == cli.EXIT_USAGE
    assert "nothing to fit a cost model on" in capsys.readouterr().err


def test_a_reference_without_stage_times_is_refused(tmp_path):
    (tmp_path / "benchmarks" / "portfolio").mkdir(parents=True)
    pd.DataFrame({"s": [1.0]}).to_csv(tmp_path / "benchmarks" / "trace.tsv", sep="\t", index=False)
    with pytest.raises(ValueError, match="run-\\*.tsv, correctness.tsv or lifecycle.tsv"):
        cost.read_reference(tmp_path)


def test_overhead_splits_per_cell_and_per_call_once_runs_differ_in_calls_per_cell(model):
    # the adaptive pilot's runs take fewer calls per cell than the fixed-sampler references: both
    # terms are fitted, each non-negative
    assert model.overhead_s[0] > 0 and model.overhead_s[1] >= 0
    cells = np.array([1000.0, 2000.0, 1500.0])
    calls = np.array([280_000.0, 50_000.0, 150_000.0])  # an adaptive run takes fewer calls per cell
    runs = np.column_stack([cells, calls, 0.007 * cells + 66e-6 * calls])
    np.testing.assert_allclose(cost._overhead(runs), [0.007, 66e-6], rtol=1e-6)
    same_ratio = runs[[0]].repeat(2, axis=0) * [[1, 1, 1], [2, 2, 2]]
    np.testing.assert_allclose(
        cost._overhead(same_ratio), [same_ratio[:, 2].sum() / same_ratio[:, 0].sum(), 0]
    )


def test_plan_verb_checks_each_studys_request_log_as_the_dag_does(monkeypatch, capsys):
    from headroom.trace import source

    def refuse(trace_cfg, *args, **kwargs):
        raise ValueError(f"trace.source: {trace_cfg.get('source')} is not a regular file")

    monkeypatch.setattr(source, "check", refuse)
    assert cli.main(["plan", "azure-conv"]) == cli.EXIT_USAGE
    assert "AzureLLMInferenceTrace_conv.csv.gz is not a regular file" in capsys.readouterr().err


# -- issue 31 cases 19, 25, 26 ---------------------------------------------------------------------


@pytest.mark.parametrize("gpu", [False, True], ids=["no-gpu", "gpu"])
def test_plan_plans_the_study_snakemake_runs_here_and_says_which(capsys, monkeypatch, gpu):
    # case 25: on a machine without a GPU, `device: auto` runs the interpreter's smoke study; the
    # plan resolves the device as the pipeline does (config.resolve_device) and names the one it plans
    monkeypatch.setattr(hconfig, "cuda_visible", lambda: gpu)
    assert cli.main(["plan", "default"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    if gpu:
        assert head.startswith("study default (cuda: a GPU is visible here") and "100 invocations" in head
    else:
        assert head.startswith("study default (interpret: no GPU visible here") and "--device cuda" in head
        smoke = hconfig.load(cost.PROJECT_ROOT / "config" / "config.yaml")["smoke"]
        assert f"{smoke['trace']['invocations']} invocations" in head and "modes eager," in head


def test_plan_over_references_that_never_timed_a_mode_is_one_line(capsys, monkeypatch, model):
    # case 19: `plan --references DIR` over an interpreter study (eager only) for a study timing graph
    # mode too was KeyError: 'graph' in cost.py
    eager_only = cost.Model(**{**model.__dict__, "call_us": {"eager": model.call_us["eager"]}})
    monkeypatch.setattr(cost, "fit", lambda refs: eager_only)
    assert cli.main(["plan", "default", "--device", "cuda"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "no reference timed graph mode" in err and "--references" in err


def test_plan_over_interpreter_references_by_subprocess_is_one_line(tmp_path):
    """The same through `python -m headroom.core.cli` (the CliError of a verb of a higher floor was
    another class than __main__'s, so it escaped as a traceback)."""
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "headroom.core.cli", "plan", "--references", str(tmp_path)],
        cwd=cost.PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == cli.EXIT_USAGE and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("headroom: no recorded study with benchmarks under")


def test_plan_warns_when_a_log_collapses_to_one_shape(capsys, monkeypatch, tmp_path):
    # case 26: every prompt past the interpreter's max_kv_len: five identical prefill shapes, no word
    log = tmp_path / "long.csv"
    log.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(f"{i},5000,3\n" for i in range(40)))
    overlay = tmp_path / "longlog.yaml"
    overlay.write_text(
        f"trace: {{source: {log}}}\nsmoke:\n  trace: {{source: {log}, invocations: 5, "
        "tokens: {scale: 1.0, max_kv_len: 64}, window: {start_s: 0.0, duration_s: null}}\n"
    )
    monkeypatch.setattr(hconfig, "STUDIES_DIR", tmp_path)
    monkeypatch.setattr(hconfig, "cuda_visible", lambda: False)
    assert cli.main(["plan", "longlog"]) == 0
    out = capsys.readouterr().out
    assert "warning: 40 of 40 requests' prompts (100%) reach trace.tokens.max_kv_len (64)" in out
    assert "trace.tokens.scale" in out and "docs/traces.md" in out


def test_plan_says_whether_each_study_fits_a_budget_and_by_how_much(capsys):
    # issue 36 item 5: before any GPU job runs, a study that will not fit --budget-s is named, with
    # the seconds over and its largest job, and plan exits 1
    assert cli.main(["plan", "default", "--device", "cuda", "--budget-s", "100000"]) == 0
    assert "fits --budget-s 100000: predicted" in capsys.readouterr().out
    assert cli.main(["plan", "default", "--device", "cuda", "--budget-s", "60"]) == cli.EXIT_ERROR
    line = capsys.readouterr().out.splitlines()[-1]
    total = float(line.split("predicted ")[1].split(" s")[0])
    over = float(line.split("GPU jobs), ")[1].split(" s")[0])
    assert over == pytest.approx(total - 60, abs=1) and "the largest job is portfolio" in line
    for bad in ("0", "-5", "nan", "inf"):
        assert cli.main(["plan", "default", "--device", "cuda", "--budget-s", bad]) == cli.EXIT_USAGE
        assert "--budget-s must be a number of seconds > 0" in capsys.readouterr().err


def test_correctness_is_planned_within_fifteen_percent_on_each_attention_reference(model):
    # the gate draws a shape's inputs and float64 answer once (session 19): azure-conv's 124 shapes,
    # 89 of them long (chunked reference), took 69 s, where 94 took 271 s when each check computed
    # its own answer (azure-conv-gen2-6x100, retired)
    attention = [r for r in model.refs if r.family == "attention"]
    azure = next(r for r in attention if r.name == "azure-conv-flashinfer-6x160")
    assert azure.long_shapes == 89 and not cost.UNEXPLAINED
    for ref in attention:
        predicted = model.linear_s("correctness", ref.candidates, ref.shapes, ref.long_shapes)
        assert predicted == pytest.approx(ref.stage_s["correctness"], rel=0.15), ref.name


def test_each_attention_reference_is_planned_within_fifteen_percent_by_the_others():
    # issue 36, item 4: a study the model was not fitted on, predicted within 15% in total
    refs = cost.references()
    for ref in (r for r in refs if r.family == "attention"):
        line = cost.held_out_line(ref, refs)
        assert abs(float(line.split("s, ")[1].split("%")[0])) <= 15, line


def test_validate_states_each_reference_as_predicted_by_a_model_fitted_without_it(capsys):
    assert cli.main(["plan", "default", "--device", "cuda", "--validate"]) == 0
    held = [line for line in capsys.readouterr().out.splitlines() if "held out (fitted on" in line]
    assert len(held) == len(cost.references())
    assert all("% of the measured" in line for line in held)


# -- kernel families' references (issue 36 item 4) ------------------------------------------------

MOE_REFERENCES = ("moe-6x160", "moe-azure-conv-6x160")


def test_a_family_study_is_planned_on_the_kernel_families_references(model, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the plan imports the family; nothing runs on a GPU
    assert {r.family for r in model.refs} == {"attention"}
    assert model.families is not None and "rmsnorm-6x160" in {r.name for r in model.families.refs}
    assert all(r.family != "attention" for r in model.families.refs)
    plan = cost.plan_study("rmsnorm", _study("rmsnorm"), model)
    assert "planned on kernel families' references" in plan.facts["trace_note"]
    jobs = {stage: s for stage, _, s in plan.jobs}
    assert jobs["graph_sweep"] == model.families.fixed_s["graph_sweep"]  # the families' own sweep
    assert "steps" in jobs  # a family study expands the engine's steps; attention's DAG runs the stage
    # too since default-flashinfer-6x160 (its reference records it), planned from attention's references
    assert "steps" in {stage for stage, _, _ in cost.plan_study("default", _study("default"), model).jobs}


def test_a_family_run_starts_outside_its_cells_and_its_calls_scale_with_its_cost_bytes():
    # a family's run records no run_wall_s: its start is the run's time outside its cells; a call's
    # bytes are the family's cost() bytes (trace cost_bytes), not the input set's (weights, buffers)
    from headroom.core import artifacts

    path = cost.REFERENCE_ROOT / "h200" / "rmsnorm-6x160"
    ref = cost.read_reference(path)
    starts = [
        wall - artifacts.read(path / "portfolio" / f"run-{i}.parquet")["cell_wall_s"].sum()
        for i, wall in enumerate(ref.run_s, start=1)
    ]
    assert ref.start_s == pytest.approx(np.mean(starts)) and ref.start_s > 10
    trace = artifacts.read(path / "trace.parquet")
    assert ref.mean_call_bytes == pytest.approx(trace.drop_duplicates("invocation")["cost_bytes"].mean())


def test_attention_references_are_predicted_as_without_the_family_references():
    # the families' references are fitted apart: attention's held-out plans do not move
    refs = cost.references()
    attention = [r for r in refs if r.family == "attention"]
    assert len(attention) < len(refs)
    for ref in attention:
        alone = cost.reference_plan(ref, cost.fit([r for r in attention if r is not ref])).total_s
        assert cost.reference_plan(ref, cost.fit([r for r in refs if r is not ref])).total_s == alone


def test_a_family_references_trace_source_is_its_steps_request_log(monkeypatch):
    # a family's trace is built from the steps artifact: the request log it read is the source a
    # study's plan matches on, so moe-azure-conv replays the sampler on its own reference's samples
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    refs = {r.name: r for r in cost.references()}
    # recorded from the plain .csv, now shipped gzipped beside it: named as the study names it
    log = "data/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv.gz"
    assert refs["moe-azure-conv-6x160"].source == log and refs["moe-6x160"].source == "synthetic"
    attention = [r for r in refs.values() if r.name.startswith("azure-conv-")]
    assert attention and all(r.source == log for r in attention)  # attention's trace records it itself
    plan = cost.plan_study("moe-azure-conv", _study("moe-azure-conv"), cost.fit(list(refs.values())))
    assert plan.facts["reference"] == "moe-azure-conv-6x160"


@pytest.mark.skipif(
    not all((cost.REFERENCE_ROOT / "h200" / n).is_dir() for n in MOE_REFERENCES),
    reason="the MoE references (data/reference/h200/moe-6x160, moe-azure-conv-6x160) are not recorded here",
)
def test_each_moe_study_is_predicted_from_the_other_references_within_15_percent():
    """Held out (fitted on the other references: the other MoE study and rmsnorm for the family's
    model), each MoE reference's measured stages within 15% in total, its portfolio runs and its
    lifecycle too. Correctness is left unasserted: 19 and 13 s for the two studies, 11 to 21 s for
    the same study's checks in two calls of session 16 (data/checks/h200/2026-12-04-session16)."""
    refs = cost.references()
    for name in MOE_REFERENCES:
        ref = next(r for r in refs if r.name == name)
        plan = cost.reference_plan(ref, cost.fit([r for r in refs if r is not ref]))
        jobs = {stage: n * s for stage, n, s in plan.jobs}
        assert plan.total_s == pytest.approx(plan.facts["measured_s"], rel=0.15), name
        assert jobs["portfolio"] == pytest.approx(sum(ref.run_s), rel=0.15), name
        assert jobs["lifecycle"] == pytest.approx(ref.stage_s["lifecycle"], rel=0.15), name
