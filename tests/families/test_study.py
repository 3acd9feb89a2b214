"""A kernel family's study artifacts (headroom.families.study, docs/families.md): the engine's steps
(steps.parquet) expanded through the family and sampled by the attention trace's own sampler, the
family's candidates table, their provenance; and attention's trace and candidates, unchanged but for
their new `family` column."""

from __future__ import annotations

import copy
import json
import runpy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headroom.core import artifacts, contracts, defaults, replay
from headroom.families import FamilyError, load, study
from headroom.families.expand import expand, steps_of
from headroom.trace import invocations, step_table
from tests.families import softmax_family
from tests.pipeline import Named

ROOT = Path(__file__).resolve().parents[2]
PARTITION = {k: defaults.section("partition")[k] for k in invocations.PARTITION_KEYS}
#: The default study's trace section: the synthetic source, 160 invocations, stratified (min 64 a kind).
TRACE = defaults.section("trace")


@pytest.fixture(autouse=True)
def _interpreter_env(monkeypatch):
    # load(..., device="interpret") sets TRITON_INTERPRET for the process; give it back as found
    monkeypatch.setenv("TRITON_INTERPRET", "1")


@pytest.fixture(scope="module")
def steps() -> pd.DataFrame:
    return step_table.build(TRACE, PARTITION, base_dir=ROOT)


def _trace(**edits) -> dict:
    cfg = copy.deepcopy(TRACE)
    for key, value in edits.items():
        cfg[key] = value
    return cfg


def test_a_family_trace_has_the_framework_columns_then_the_features(steps):
    df, facts = study.family_trace(softmax_family.FAMILY, steps, TRACE)
    assert list(df.columns) == [*study.TRACE_COLUMNS, "tokens", "width", "dtype"]
    assert list(study.TRACE_COLUMNS) == [
        "invocation", "family", "step", "step_kind", "time_s", "shape_key", "shape", "weight",
    ]  # fmt: skip
    assert len(df) == TRACE["invocations"] and df["invocation"].tolist() == list(range(len(df)))
    assert (df["family"] == "row-softmax").all()
    # chronological: the sampled calls keep the steps' order
    assert df["step"].is_monotonic_increasing and df["time_s"].is_monotonic_increasing
    shapes = [json.loads(s) for s in df["shape"]]
    assert [s["tokens"] for s in shapes] == df["tokens"].tolist()
    by_step = steps.set_index("step")
    assert (df["tokens"].to_numpy() == by_step.loc[df["step"], "tokens"].to_numpy()).all()
    assert (df["step_kind"].to_numpy() == by_step.loc[df["step"], "kind"].to_numpy()).all()
    assert facts["steps"] == len(steps) == facts["window_invocations"]  # one call per step
    contracts.check("trace", artifacts.to_table(df))  # the family's trace contract


def test_the_stratified_sampler_weights_each_kind_and_gives_it_its_floor(steps):
    df, facts = study.family_trace(softmax_family.FAMILY, steps, TRACE)
    window, floor = facts["window_by_kind"], TRACE["stratified"]["min_per_kind"]
    assert set(window) == {"decode-only", "prefill-only"}
    # in proportion, the rare kind would get fewer than its floor
    assert TRACE["invocations"] * window["prefill-only"] / sum(window.values()) < floor
    for kind, rows in df.groupby("step_kind"):
        assert len(rows) >= min(floor, window[kind])  # min_per_kind honoured (a rare kind included)
        assert rows["weight"].nunique() == 1  # a kind's calls over those sampled
        assert rows["weight"].sum() == pytest.approx(window[kind])
    # a floor the count cannot give every kind is lowered to an equal share, as in attention's trace
    df, facts = study.family_trace(
        softmax_family.FAMILY, steps, _trace(invocations=100, stratified={"min_per_kind": 99})
    )
    assert df["step_kind"].value_counts().to_dict() == {"decode-only": 50, "prefill-only": 50}
    assert df["weight"].sum() == pytest.approx(facts["window_invocations"])


def test_the_sample_is_the_attention_traces_sampler_over_the_expanded_calls(steps):
    calls = expand(softmax_family.FAMILY, steps_of(steps))
    cfg = invocations.settings(TRACE)
    chosen, weight = invocations.stratified(
        calls["step_kind"].to_numpy(), cfg["invocations"], cfg["stratified"]["min_per_kind"]
    )
    df, _ = study.family_trace(softmax_family.FAMILY, steps, TRACE)
    expected = calls.iloc[chosen].reset_index(drop=True)
    assert df["shape_key"].tolist() == expected["shape_key"].tolist()
    assert df["step"].tolist() == expected["step"].tolist() and np.array_equal(df["weight"], weight)
    for sampler in ("stride", "head"):
        df, _ = study.family_trace(softmax_family.FAMILY, steps, _trace(sampler=sampler))
        picked = invocations._sample(len(calls), TRACE["invocations"], sampler)
        assert df["step"].tolist() == calls["step"].iloc[picked].tolist()
        assert np.allclose(df["weight"], len(calls) / len(picked))


def test_the_steps_artifact_is_typed_and_gives_the_same_trace(steps, tmp_path):
    path = tmp_path / "steps.parquet"
    artifacts.write(step_table.table(steps), path, kind="steps", provenance={"rule": "steps"})
    back = artifacts.read(path)
    assert list(back.columns) == list(step_table.COLUMNS) == list(contracts.STEPS.names)
    a, _ = study.family_trace(softmax_family.FAMILY, steps, TRACE)
    b, _ = study.family_trace(softmax_family.FAMILY, back, TRACE)
    pd.testing.assert_frame_equal(a, b)
    # steps without a decode (or without a chunk) keep their list types
    only = steps[steps["kind"] == "prefill-only"]
    artifacts.write(step_table.table(only), tmp_path / "p.parquet", kind="steps", provenance={})
    with pytest.raises(ValueError, match="artifact kind 'steps': column 'tokens'"):
        artifacts.write(steps.assign(tokens="x"), tmp_path / "bad.parquet", kind="steps", provenance={})


def test_a_family_raising_in_shapes_is_one_error_naming_it_and_the_method(steps):
    loaded = load("tests.families.broken_family:RAISES", device="interpret")
    with pytest.raises(FamilyError) as err:
        study.family_trace(loaded.family, steps, TRACE)
    msg = str(err.value)
    assert msg.startswith("family 'row-softmax': shapes() raised KeyError") and "\n" not in msg


def test_a_family_candidates_table(tmp_path):
    df = study.candidates_table(softmax_family.WRONG)
    assert list(df.columns) == ["candidate", "family", "params"]
    assert df["candidate"].tolist() == ["torch", "exp-sum", "off-by-one"]
    assert [json.loads(p) for p in df["params"]] == [{"stable": True}, {"stable": False}, {}]
    artifacts.write(df, tmp_path / "c.parquet", kind="candidates", provenance={})  # the family contract
    with pytest.raises(ValueError, match=r"'candidates': missing required column\(s\) \['params'\]"):
        contracts.check("candidates", artifacts.to_table(df.drop(columns="params")))
    loaded = load("tests.families.broken_family:REPEATS", device="interpret")
    with pytest.raises(FamilyError, match=r"^family 'row-softmax': candidates\(\): candidate ids .* repeat"):
        study.candidates_table(loaded.family)


# -- the stage scripts ------------------------------------------------------------------------------


def _run(rule: str, out: Path, params: dict, **inputs) -> None:
    smk = type("Snakemake", (), {})()
    smk.rule, smk.wildcards, smk.log = rule, {}, [str(out.with_suffix(".log"))]
    smk.input = Named(**inputs, code=[str(ROOT / "scripts" / f"{rule}.py")])
    smk.output = Named(**{rule: str(out)})
    smk.params = params
    runpy.run_path(str(ROOT / "scripts" / f"{rule}.py"), init_globals={"snakemake": smk})


def _steps_artifact(tmp_path: Path, trace_cfg: dict) -> Path:
    path = tmp_path / "steps.parquet"
    _run("steps", path, {"trace": trace_cfg, "partition": PARTITION}, source=[])
    return path


SMALL = {"invocations": 24, "stratified": {"min_per_kind": 8}}


def test_the_stage_writes_a_family_trace_and_candidates_with_the_family_in_provenance(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    steps = _steps_artifact(tmp_path, SMALL)
    family = {"spec": "tests.families.softmax_family:FAMILY", "device": "interpret"}
    _run("trace", tmp_path / "trace.parquet", {"trace": SMALL, "partition": PARTITION, "family": family},
         source=[], steps=str(steps))  # fmt: skip
    _run("candidates", tmp_path / "candidates.parquet", {"family": family})
    trace, cands = artifacts.read(tmp_path / "trace.parquet"), artifacts.read(tmp_path / "candidates.parquet")
    assert len(trace) == 24 and set(trace["family"]) == {"row-softmax"} == set(cands["family"])
    loaded = load(family["spec"], device="interpret")
    for name in ("trace", "candidates"):
        prov = artifacts.read_provenance(tmp_path / f"{name}.parquet")
        record = prov["extra"]["family"]
        assert {k: record[k] for k in ("name", "version", "spec", "source_blake3", "files")} == {
            "name": "row-softmax", "version": "1", "spec": family["spec"],
            "source_blake3": loaded.source_blake3, "files": ["tests/families/softmax_family.py"],
        }  # fmt: skip
        # its features, so an analysis of the artifacts needs no import of the family
        assert record["feature_order"] == ["tokens", "width", "dtype"]
        assert record["features"]["tokens"] == {
            "kind": "int", "capture_fixed": True, "pad_to": [1, 2, 4, 8, 16, 32, 64], "min": 1, "max": None,
        }  # fmt: skip
        assert replay.family_identity(prov) == f"row-softmax 1 (source {loaded.source_blake3[:16]})"
    assert str(steps) in artifacts.read_provenance(tmp_path / "trace.parquet")["inputs"]


def test_a_family_raising_in_the_trace_stage_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    steps = _steps_artifact(tmp_path, SMALL)
    out = tmp_path / "trace.parquet"
    for spec, says in (
        ("tests.families.broken_family:RAISES", "family 'row-softmax': shapes() raised KeyError"),
        (
            "tests.families.no_such_module:X",
            "family 'tests.families.no_such_module:X': importing tests.families.no_such_module raised "
            "ModuleNotFoundError",
        ),
    ):
        family = {"spec": spec, "device": "interpret"}
        with pytest.raises(SystemExit) as err:
            _run("trace", out, {"trace": SMALL, "partition": PARTITION, "family": family},
                 source=[], steps=str(steps))  # fmt: skip
        assert str(err.value).startswith(f"rule trace failed: {says}") and "\n" not in str(err.value)
        assert not out.exists() and not artifacts.sidecar(out).exists()


def test_attention_trace_and_candidates_are_unchanged_but_for_the_family_column(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    cfg = {**SMALL, "sampler": "stratified"}
    _run(
        "trace", tmp_path / "trace.parquet", {"trace": cfg, "partition": PARTITION, "family": None}, source=[]
    )
    written = artifacts.read(tmp_path / "trace.parquet")
    built, provenance = invocations.build(cfg, PARTITION, base_dir=ROOT)
    assert list(written.columns) == [*built.columns, "family"] and set(written["family"]) == {"attention"}
    pd.testing.assert_frame_equal(written.drop(columns="family"), built, check_exact=True)
    prov = artifacts.read_provenance(tmp_path / "trace.parquet")["extra"]
    assert prov["family"] == {"name": "attention"} and prov["settings"] == provenance["settings"]

    from headroom.families.attention.candidates import build

    study_cfg = defaults.study()
    params = {
        "tiles": study_cfg["tiles"], "rope": study_cfg["rope"], "native": [], "generation": 2,
        "varlen": False, "family": None,
    }  # fmt: skip
    _run("candidates", tmp_path / "candidates.parquet", params)
    cands = artifacts.read(tmp_path / "candidates.parquet")
    expected = build(study_cfg["tiles"], study_cfg["rope"], [], generation=2)
    pd.testing.assert_frame_equal(cands.drop(columns="family"), expected, check_exact=True)
    assert list(cands.columns)[-1] == "family" and set(cands["family"]) == {"attention"}


#: The committed references of kernel families (data/reference/h200), and the family each measured.
FAMILY_REFERENCES = {"rmsnorm-6x160": "rmsnorm", "moe-6x160": "moe", "moe-azure-conv-6x160": "moe"}


def test_attention_references_read_as_attention_with_or_without_a_family_column():
    # the attention references, recorded before families (retired references, default-gen2 among
    # them, are out of main: data/reference/retired.tsv); the families' carry their family
    recorded = [
        p
        for p in sorted((ROOT / "data" / "reference").rglob("trace.parquet"))
        if p.parent.name not in FAMILY_REFERENCES
    ]
    assert {p.parent.name for p in recorded} >= {
        "default-flashinfer-6x160",
        "azure-conv-flashinfer-6x160",
        "mooncake-conv-flashinfer-3x30",
    }
    for path in recorded:  # the later ones carry the column and the identity: attention's
        table = artifacts.read_table(path)
        assert contracts.family_of(table) == contracts.ATTENTION, path.parent.name
        assert replay.family_identity(artifacts.read_provenance(path)) in (None, contracts.ATTENTION)
    for name, family in FAMILY_REFERENCES.items():
        table = artifacts.read_table(ROOT / "data/reference/h200" / name / "trace.parquet")
        assert contracts.family_of(table) == family, name
    assert contracts.family_of(pd.DataFrame({"family": ["rmsnorm"] * 2})) == "rmsnorm"
    with pytest.raises(ValueError, match="mixes the rows of families 'a', 'b'"):
        contracts.family_of(pd.DataFrame({"family": ["a", "b"]}))


def test_a_recorded_folder_whose_trace_and_candidates_name_other_families_is_refused(tmp_path):
    def prov(name, version, source):
        return {"rule": "x", "extra": {"family": {"name": name, "version": version, "source_blake3": source}}}

    trace, _ = study.family_trace(
        softmax_family.FAMILY,
        step_table.build({**TRACE, **SMALL}, PARTITION, base_dir=ROOT),
        {**TRACE, **SMALL},
    )
    artifacts.write(
        trace, tmp_path / "trace.parquet", kind="trace", provenance=prov("row-softmax", "1", "a" * 64)
    )
    cands = study.candidates_table(softmax_family.FAMILY)
    artifacts.write(
        cands,
        tmp_path / "candidates.parquet",
        kind="candidates",
        provenance=prov("row-softmax", "2", "b" * 64),
    )
    found = replay.identity_conflicts(tmp_path, ["trace.parquet", "candidates.parquet"])
    assert len(found) == 1 and "for family 'row-softmax" in found[0], found
