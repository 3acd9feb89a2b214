"""The family contract (headroom.families, docs/families.md): a family written only against the
docs is loaded by spec, expanded over the serving engine's steps and checked against its reference;
every way a family can break the contract is one error naming the family and the method."""

from __future__ import annotations

import math
from dataclasses import replace

import pandas as pd
import pytest

from headroom.core import cli
from headroom.families import (
    Candidate,
    FamilyError,
    Feature,
    Step,
    check,
    contract,
    expand,
    from_callables,
    load,
)
from tests.families import softmax_family


@pytest.fixture(autouse=True)
def _interpreter_env(monkeypatch):
    # load(..., device="interpret") sets TRITON_INTERPRET for the process, as the CLI wants; a test
    # gives the variable back as it found it
    monkeypatch.setenv("TRITON_INTERPRET", "1")


STEPS = [
    Step(0, 0.0, "prefill-only", (), ((48, 48),), 48),
    Step(1, 0.02, "decode-only", (49, 30, 17), (), 3),
    Step(2, 0.04, "mixed", (50, 31), ((16, 64),), 18),
    Step(3, 0.06, "decode-only", (51, 32, 19), (), 3),
]


def test_a_family_written_against_the_docs_loads_by_spec_with_its_source_hash():
    loaded = load("tests.families.softmax_family:RowSoftmax", device="interpret")
    assert loaded.family.name == "row-softmax" and len(loaded.source_blake3) == 64
    assert loaded.files == (softmax_family.__file__,)
    again = load("tests.families.softmax_family:FAMILY", device="interpret")
    assert again.source_blake3 == loaded.source_blake3


@pytest.mark.parametrize(
    "spec, says",
    [
        ("tests.families.softmax_family", "package.module:ATTRIBUTE"),
        ("tests.families.nothing_here:X", "importing tests.families.nothing_here raised ModuleNotFoundError"),
        ("tests.families.softmax_family:NOPE", "has no attribute 'NOPE'"),
        ("tests.families.softmax_family:torch", "name must be a str"),
    ],
)
def test_a_bad_spec_is_one_error_naming_it(spec, says):
    with pytest.raises(FamilyError, match="family ") as err:
        load(spec, device="interpret")
    assert says in str(err.value) and "\n" not in str(err.value)


def test_steps_expand_to_one_call_each_with_the_framework_columns():
    df = expand.expand(softmax_family.FAMILY, STEPS)
    assert list(df.columns[: len(expand.COLUMNS)]) == list(expand.COLUMNS)
    assert df["tokens"].tolist() == [48, 3, 18, 3] and df["step_kind"].tolist() == [s.kind for s in STEPS]
    assert df["shape_key"].iloc[1] == "tokens=3|width=64|dtype=float32" == df["shape_key"].iloc[3]
    assert (
        expand.distinct_shapes(df)
        .set_index("shape_key")["calls"]
        .to_dict()["tokens=3|width=64|dtype=float32"]
        == 2
    )


class Broken(softmax_family.RowSoftmax):
    def __init__(self, shapes=None, candidates=None, raises=None):
        super().__init__()
        self._s, self._c, self._r = shapes, candidates, raises

    def shapes(self, step):
        if self._r:
            raise KeyError("decode_kv_lens")
        return self._s if self._s is not None else super().shapes(step)

    def candidates(self):
        return self._c if self._c is not None else super().candidates()


@pytest.mark.parametrize(
    "family, says",
    [
        (Broken(shapes={"tokens": 1}), "shapes(step 0) must return a list of dicts"),
        (Broken(shapes=[{"tokens": 1, "width": 4}]), "lacks feature(s) dtype"),
        (Broken(shapes=[{"tokens": "1", "width": 4, "dtype": "float32"}]), "feature 'tokens' (int) got '1'"),
        (
            Broken(shapes=[{"tokens": True, "width": 4, "dtype": "float32"}]),
            "feature 'tokens' (int) got True",
        ),
        (Broken(shapes=[{"tokens": 0, "width": 4, "dtype": "float32"}]), "'tokens' = 0 is outside [1, None]"),
        (Broken(shapes=[{"tokens": 1, "width": 4, "dtype": "a|b"}]), "without '|' or '='"),
        (
            Broken(shapes=[{"tokens": 1, "width": 4, "dtype": "f", "x": [1]}]),
            "'x' = [1] is not a JSON scalar",
        ),
        (Broken(shapes=[{"tokens": 1, "width": 4, "dtype": "f", "step": 3}]), "framework's own columns"),
        (Broken(raises=True), "shapes() raised KeyError: 'decode_kv_lens'"),
        (Broken(shapes=[]), "shapes() returned no call in any of 4 steps"),
    ],
)
def test_malformed_shapes_are_one_error_naming_the_family_and_method(family, says):
    with pytest.raises(FamilyError, match="family 'row-softmax'") as err:
        expand.expand(family, STEPS)
    assert says in str(err.value)


@pytest.mark.parametrize(
    "found, says",
    [
        ([], "non-empty list of Candidate"),
        (["torch"], "is not a headroom.families.Candidate"),
        ([Candidate("a"), Candidate("a")], "candidate ids a repeat"),
    ],
)
def test_malformed_candidates_are_one_error(found, says):
    family = Broken(candidates=found)
    with pytest.raises(FamilyError, match="candidates()") as err:
        check.check(family, expand.expand(family, STEPS), device="interpret")
    assert says in str(err.value)


@pytest.mark.parametrize(
    "make, says",
    [
        (lambda: Feature("string"), "kind 'string' is not one of"),
        (lambda: Feature("int", pad_to=[4, 2]), "pad_to must be ascending"),
        (lambda: Feature("category", min=0), "min must be a finite number"),
        (lambda: Feature("float", min=2.0, max=1.0), "min 2.0 is above max 1.0"),
        (lambda: Candidate("has space"), "must match"),
        (lambda: Candidate("ok", {"tile": [1, 2]}), "params tile are not JSON scalars"),
    ],
)
def test_contract_types_refuse_bad_values(make, says):
    with pytest.raises(FamilyError, match=None) as err:
        make()
    assert says in str(err.value)


def test_a_family_lacking_a_method_or_declaring_a_framework_column_is_refused():
    class NoCost(softmax_family.RowSoftmax):
        cost = None

    with pytest.raises(FamilyError, match="no method cost"):
        contract.check_family(NoCost())

    class Clash(softmax_family.RowSoftmax):
        features = {"step": Feature("int")}

    with pytest.raises(FamilyError, match="feature name 'step'"):
        contract.check_family(Clash())


def test_every_candidate_is_checked_against_the_reference_twice_per_shape():
    family = softmax_family.WRONG
    results = check.check(family, expand.expand(family, STEPS), device="interpret")
    assert len(results) == 3 * 3  # three shapes (tokens 48, 3, 18), three candidates
    by = results.groupby("candidate")["status"].agg(set).to_dict()
    assert by == {"torch": {"passed"}, "exp-sum": {"passed"}, "off-by-one": {"failed"}}
    bad = results[results["candidate"] == "off-by-one"].iloc[0]
    assert bad["rel_err"] > bad["tolerance"] and "rel_err" in bad["reason"] and bad["dtype"] == "float32"


def test_unsupported_shapes_are_recorded_not_failed():
    family = softmax_family.PARTIAL
    results = check.check(family, expand.expand(family, STEPS), device="interpret")
    exp = results[results["candidate"] == "exp-sum"].set_index("shape_key")["status"]
    assert exp.to_dict() == {
        "tokens=48|width=64|dtype=float32": "unsupported",
        "tokens=3|width=64|dtype=float32": "passed",
        "tokens=18|width=64|dtype=float32": "unsupported",
    }


def test_a_raise_the_family_names_unsupported_is_recorded_so_and_others_stay_errors():
    def no_kernel(x):
        raise RuntimeError("No available kernel. Aborting execution.")

    f = softmax_family.FAMILY
    base = from_callables(
        {"none": no_kernel, "broken": lambda x: 1 / 0}, name="nk", version="1", features=f.features,
        shapes=f.shapes, inputs=f.inputs, reference=f.reference, tolerance=f.tolerance, cost=f.cost,
    )  # fmt: skip

    class NamesIt:  # the optional member: a reason for what it knows, None for the rest
        def __getattr__(self, name):
            return getattr(base, name)

        def unsupported(self, candidate, exc):
            return "backend has no kernel for this shape" if "No available kernel" in str(exc) else None

    for family, none_status in ((base, "error"), (NamesIt(), "unsupported")):
        results = check.check(family, expand.expand(family, STEPS[:1]), device="interpret")
        by = results.set_index("candidate")
        assert by.loc["none", "status"] == none_status and by.loc["broken", "status"] == "error"
        assert "ZeroDivisionError" in by.loc["broken", "reason"]


def test_a_function_that_is_not_repeatable_fails_on_its_second_call():
    state = {"calls": 0}

    def accumulating(x):
        state["calls"] += 1
        return softmax_family.torch.softmax(x, dim=-1) * state["calls"]

    f = softmax_family.FAMILY
    family = from_callables(
        {"acc": accumulating}, name="acc", version="1", features=f.features, shapes=f.shapes,
        inputs=f.inputs, reference=f.reference, tolerance=f.tolerance, cost=f.cost,
    )  # fmt: skip
    results = check.check(family, expand.expand(family, STEPS[:1]), device="interpret")
    assert results["status"].tolist() == ["failed"] and "not repeatable" in results["reason"].iloc[0]


def test_nan_outputs_and_wrong_shapes_fail():
    ref = check.arrays(pd.Series([1.0, 2.0]).to_numpy(), "ref")
    nan = check.compare(pd.Series([1.0, math.nan]).to_numpy(), ref, (1e-3, 1e-3), "c")
    assert nan["status"] == "failed" and nan["nan_count"] == 1 and "1 NaN elements" in nan["reason"]
    short = check.compare(pd.Series([1.0]).to_numpy(), ref, (1e-3, 1e-3), "c")
    assert short["status"] == "failed" and "output shapes" in short["reason"]


def test_a_tensor_output_is_compared_where_it_lies_with_the_numbers_of_the_host_path():
    import torch

    g = torch.Generator().manual_seed(0)
    ref64 = torch.randn(64, 8, generator=g, dtype=torch.float64)
    out = (ref64 + 1e-3 * torch.randn(64, 8, generator=g, dtype=torch.float64)).half()
    out[3, 2] = math.nan
    on_device = check.compare(out, check.arrays(ref64, "ref"), (1e-2, 1e-2), "c")
    on_host = check.compare(out.double().numpy(), check.arrays(ref64.numpy(), "ref"), (1e-2, 1e-2), "c")
    assert on_device == on_host and on_device["nan_count"] == 1 and on_device["rel_err"] == math.inf
    out[3, 2] = 0.5
    a = check.compare(out, check.arrays(ref64, "ref"), (1e-2, 1e-2), "c")
    b = check.compare(out.double().numpy(), check.arrays(ref64.numpy(), "ref"), (1e-2, 1e-2), "c")
    assert a["max_abs_err"] == b["max_abs_err"] and a["rel_err"] == pytest.approx(b["rel_err"], rel=1e-12)


def test_a_study_trace_becomes_steps_whose_calls_cover_its_window():
    from headroom.core import defaults
    from headroom.trace import invocations, step_table

    trace_cfg = {**defaults.section("trace"), "invocations": None}
    part = defaults.section("partition")
    steps = step_table.build(trace_cfg, part)
    _, prov = invocations.build(trace_cfg, part)
    calls = steps["prefill_chunks"].map(len) + (steps["decode_kv_lens"].map(len) > 0)
    assert calls.sum() == prov["window_invocations"]
    assert set(steps["kind"]) == {"prefill-only", "decode-only"}  # the default engine does not chunk
    chunked = {**trace_cfg, "batching": {**trace_cfg["batching"], "max_batched_tokens": 512}}
    mixed = step_table.build(chunked, part)
    assert "mixed" in set(mixed["kind"])
    row = mixed[mixed["kind"] == "mixed"].iloc[0]
    # the step's budget holds before its chunks are rounded up to trace.round_to
    rounding = trace_cfg["round_to"] * len(row["prefill_chunks"])
    assert (
        row["tokens"]
        == len(row["decode_kv_lens"]) + sum(q for q, _ in row["prefill_chunks"])
        <= 512 + rounding
    )


def test_family_check_verb_runs_the_example_family_on_the_interpreter(capsys):
    code = cli.main(
        ["family", "check", "examples.rmsnorm.family:SMOKE", "--device", "interpret", "--max-shapes", "2"]
    )
    out = capsys.readouterr().out
    assert code == 0 and "family rmsnorm 1" in out and "BLOCK128-w1-s3" in out
    assert "checked 2 shapes x 4 candidates" in out


def test_family_check_verb_exits_1_naming_a_failing_candidate(capsys):
    code = cli.main(["family", "check", "tests.families.softmax_family:WRONG", "--device", "interpret"])
    out = capsys.readouterr().out
    assert code == 1 and "failed: off-by-one on tokens=" in out


def test_family_check_verb_refuses_a_broken_family_in_one_line(capsys):
    code = cli.main(["family", "check", "tests.families.softmax_family:NOPE", "--device", "interpret"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_USAGE and err.count("\n") == 1 and "has no attribute 'NOPE'" in err


def test_the_triton_adapter_launches_each_config_with_its_hooks():
    from examples.rmsnorm import family as rms

    fam = rms.SMOKE
    ids = [c.id for c in fam.candidates()]
    assert ids == ["BLOCK128-w1-s3", "BLOCK256-w2-s3", "BLOCK1024-w4-s3", "BLOCK4096-w8-s3"]
    assert fam.candidates()[0].params == {"BLOCK": 128, "num_warps": 1, "num_stages": 3, "num_ctas": 1}
    seen = []
    config = rms.rmsnorm_kernel.configs[0]
    hooked = replace_pre_hook(config, lambda nargs: seen.append(nargs["BLOCK"]))
    try:
        shape = {"tokens": 3, "hidden": 512, "dtype": "float16"}
        inputs = fam.inputs(shape, seed=1, device="cpu")
        out = fam.prepare(fam.candidates()[0], shape, inputs)(inputs)
        assert seen == [128] and out is inputs["out"] and not out.isnan().any()
    finally:
        hooked()


def replace_pre_hook(config, hook):
    old = config.pre_hook
    config.pre_hook = hook
    return lambda: setattr(config, "pre_hook", old)


def test_step_is_a_frozen_value():
    from dataclasses import FrozenInstanceError

    with pytest.raises(FrozenInstanceError):
        STEPS[0].tokens = 3  # type: ignore[misc]
    assert replace(STEPS[0], tokens=5).tokens == 5


def test_family_check_json_is_the_rows_and_a_bad_count_is_a_usage_error(capsys):
    import json

    code = cli.main(
        ["family", "check", "tests.families.softmax_family:PARTIAL", "--device", "interpret", "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["family"] == "row-softmax"
    assert {r["status"] for r in out["rows"]} == {"passed", "unsupported"}
    assert set(out["rows"][0]) == set(check.COLUMNS)
    code = cli.main(["family", "check", "tests.families.softmax_family:FAMILY", "--max-shapes", "0"])
    assert code == cli.EXIT_USAGE and "--max-shapes must be >= 1" in capsys.readouterr().err
