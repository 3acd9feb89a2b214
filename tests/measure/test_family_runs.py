"""The generic measuring stages of a kernel family on the CPU (headroom.measure.family_runs): the
portfolio times every admitted candidate on every invocation, the cold compile runs each candidate
in a fresh process, the lifecycle adds the dispatch and switch costs; a family's failure is one error
naming the family, the candidate and the shape."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from headroom.core import contracts
from headroom.decide.costs import lifecycle_costs
from headroom.families import Candidate, FamilyError, Step, load
from headroom.families.expand import expand
from headroom.measure import family_runs, lifecycle, portfolio
from tests.families import softmax_family
from tests.measure.measure_helpers import interpreter_only

SMOKE = "examples.rmsnorm.family:SMOKE"
FIXED = {"sampler": "fixed", "reps": 3, "warmup_reps": 0}
#: token counts of the engine steps: tokens=1 comes back at the third step
TOKENS = [1, 2, 1, 4]


@pytest.fixture(autouse=True)
def _interpreter_env(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # load(..., device="cpu") sets it for the process


def steps(tokens=TOKENS) -> list[Step]:
    return [Step(i, 0.01 * i, "decode-only", (9,) * t, (), t) for i, t in enumerate(tokens)]


def run_portfolio(family, ids, *, run=1, settings=FIXED, tokens=TOKENS, seed=0):
    trace = expand(family, steps(tokens))
    return family_runs.portfolio(family, trace, ids, run=run, settings=settings, device="cpu", seed=seed)


@interpreter_only
def test_rmsnorm_smoke_every_candidate_on_every_invocation_eager_only_on_the_cpu():
    fam = load(SMOKE, device="cpu").family
    ids = [c.id for c in fam.candidates()][:2]
    rows, samples = run_portfolio(fam, ids)
    # graph mode needs CUDA: 'both' times eager only here; one row per invocation x candidate
    assert list(rows.columns) == list(family_runs.PORTFOLIO_COLUMNS) and set(rows["mode"]) == {"eager"}
    assert len(rows) == len(TOKENS) * 2 and not rows.duplicated(["invocation", "candidate"]).any()
    assert sorted(rows["candidate"].unique()) == sorted(ids)
    # the repeated shape is timed at each of its invocations
    assert rows[rows["shape_key"] == "tokens=1|hidden=512|dtype=float16"]["invocation"].nunique() == 2
    assert (
        (rows["median_us"] > 0).all() and (rows["reps"] == 3).all() and (rows["stop_reason"] == "fixed").all()
    )
    assert (rows["timing_method"] == "host_clock").all() and rows["host_us"].isna().all()
    assert (~rows["fused"]).all() and (rows["backend"] == "family").all() and (rows["run"] == 1).all()
    assert (rows["buffer_sets"] == 2).all()  # no L2 on the CPU: the minimum rotation
    # x and out of 4 tokens and w, float16
    assert (
        rows.loc[rows["shape_key"].str.startswith("tokens=4|"), "set_bytes"].eq(2 * (2 * 4 * 512 + 512)).all()
    )
    cells = samples.groupby(["mode", "invocation", "candidate"])
    assert (cells.size() == 3).all() and len(cells) == len(rows)
    assert sorted(samples["rep"].unique()) == [0, 1, 2] and (samples["latency_us"] > 0).all()
    merged = samples.merge(rows, on=["mode", "invocation", "candidate"], suffixes=("", "_row"))
    assert (merged["position"] == merged["position_row"]).all()
    np.testing.assert_allclose(cells["latency_us"].median().sort_index(),
                               rows.set_index(["mode", "invocation", "candidate"])["median_us"].sort_index())  # fmt: skip
    contracts.PORTFOLIO_SAMPLES.check(pa.Table.from_pandas(samples, preserve_index=False))
    # the portfolio contract's types hold; its `tile` is the attention candidates' and not written here
    assert set(contracts.PORTFOLIO.required_names) - set(rows.columns) == {"tile"}
    contracts.PORTFOLIO.check(pa.Table.from_pandas(rows.assign(tile=0), preserve_index=False))


def test_set_bytes_are_the_tensor_bytes_of_one_input_set():
    rows, _ = run_portfolio(softmax_family.FAMILY, ["torch"], tokens=[4])
    assert rows["set_bytes"].tolist() == [4 * 64 * 4] and rows["working_set_bytes"].tolist() == [
        2 * 4 * 64 * 4
    ]


def test_candidate_order_is_portfolio_candidate_order_and_differs_by_run():
    fam, ids = softmax_family.FAMILY, ["torch", "exp-sum"]
    first = {}
    for run in (1, 2):
        rows, _ = run_portfolio(fam, ids, run=run, seed=7)
        lead = rows[rows["position"] == 0].sort_values("invocation")["candidate"].tolist()
        cands = sorted(ids)
        assert lead == [
            cands[portfolio.candidate_order(2, seed=7, run=run, index=i)[0]] for i in range(len(TOKENS))
        ]
        assert all(a != b for a, b in zip(lead, lead[1:], strict=False))  # never the same one twice in a row
        first[run] = lead
    assert all(a != b for a, b in zip(first[1], first[2], strict=True))


class Recording(softmax_family.RowSoftmax):
    """Records what it is asked: each prepared function must be called on its own input set."""

    def __init__(self, fail: str | None = None, fail_call: str | None = None):
        super().__init__()
        self.fail, self.fail_call, self.prepared, self.called = fail, fail_call, [], []

    def prepare(self, candidate, shape, inputs):
        if candidate.id == self.fail:
            raise RuntimeError("no plan for this shape")
        self.prepared.append((candidate.id, id(inputs)))
        inner = super().prepare(candidate, shape, inputs)

        def fn(x):
            if candidate.id == self.fail_call:
                raise ValueError("launch failed")
            self.called.append((candidate.id, id(inputs), id(x)))
            return inner(x)

        return fn


def test_each_input_set_has_its_own_prepared_function_called_on_it():
    fam = Recording()
    rows, _ = run_portfolio(fam, ["torch", "exp-sum"], tokens=[2, 2, 8])
    # two shapes x two candidates x two rotating sets, prepared once each (not per invocation)
    assert len(fam.prepared) == 8 and len(set(fam.prepared)) == 8
    assert all(bound == given for _, bound, given in fam.called)
    assert len({given for _, _, given in fam.called}) == 4  # both sets of both shapes were timed


def test_a_candidate_a_shape_does_not_support_has_no_row_there():
    rows, _ = run_portfolio(softmax_family.PARTIAL, ["torch", "exp-sum"], tokens=[4, 16, 4])
    got = rows.groupby("candidate")["invocation"].apply(sorted).to_dict()
    assert got == {"torch": [0, 1, 2], "exp-sum": [0, 2]}
    assert rows[rows["invocation"] == 1]["position"].tolist() == [0]


def test_the_adaptive_sampler_of_the_portfolio_settings_decides_the_samples():
    adaptive = {"sampler": "adaptive", "warmup_reps": 0,
                "adaptive": {"min_samples": {"eager": 4}, "max_samples": {"eager": 6}, "max_time_s": 5.0}}  # fmt: skip
    rows, samples = run_portfolio(softmax_family.FAMILY, ["torch"], settings=adaptive)
    assert rows["reps"].between(4, 6).all() and set(rows["stop_reason"]) <= {"target", "count_cap"}
    assert samples.groupby("invocation").size().tolist() == rows["reps"].tolist()
    with pytest.raises(ValueError, match="portfolio.mode"):
        run_portfolio(softmax_family.FAMILY, ["torch"], settings={"mode": "fast"})


@pytest.mark.parametrize(
    "family, ids, says",
    [
        (Recording(fail="exp-sum"), ["torch", "exp-sum"],
         "family 'row-softmax': prepare('exp-sum', tokens=1|width=64|dtype=float32) raised RuntimeError: no plan"),
        (Recording(fail_call="torch"), ["torch"],
         "family 'row-softmax': candidate 'torch' on tokens=1|width=64|dtype=float32 (first call) raised ValueError"),
        (softmax_family.FAMILY, ["torch", "nope"], "family 'row-softmax': no candidate nope (it has torch, exp-sum)"),
    ],
)  # fmt: skip
def test_a_family_or_candidate_that_breaks_is_one_error_naming_it(family, ids, says):
    with pytest.raises(FamilyError) as err:
        run_portfolio(family, ids)
    assert says in str(err.value) and "\n" not in str(err.value)


def test_a_trace_of_another_family_or_run_zero_is_refused():
    trace = expand(softmax_family.FAMILY, steps()).assign(family="rmsnorm")
    with pytest.raises(ValueError, match="trace holds family \\['rmsnorm'\\], not 'row-softmax'"):
        family_runs.portfolio(
            softmax_family.FAMILY, trace, ["torch"], run=1, settings=FIXED, device="cpu", seed=0
        )
    with pytest.raises(ValueError, match="run must be a positive int"):
        run_portfolio(softmax_family.FAMILY, ["torch"], run=0)
    with pytest.raises(ValueError, match="no admitted candidates"):
        run_portfolio(softmax_family.FAMILY, [])


# -- cold compile: each candidate in a fresh process -------------------------------------------------

_PREPARED: set[str] = set()  # per process: a candidate's first prepare "compiles"
COMPILE_S = 0.3


class Cold(softmax_family.RowSoftmax):
    """A family whose first prepare of `slow` in a process takes COMPILE_S (a compile), whose
    `broken` raises and whose `hang` never returns."""

    def candidates(self):
        return [Candidate("slow"), Candidate("broken"), Candidate("hang")]

    def prepare(self, candidate, shape, inputs):
        if candidate.id == "broken":
            raise RuntimeError("ptxas died")
        if candidate.id == "hang":
            time.sleep(60)
        if candidate.id not in _PREPARED:
            _PREPARED.add(candidate.id)
            time.sleep(COMPILE_S)
        return super().prepare(Candidate("torch"), shape, inputs)


COLD = Cold()
SHAPE = {"tokens": 2, "width": 64, "dtype": "float32"}


def test_cold_compile_is_the_first_prepare_and_call_in_a_fresh_process_net_of_the_warm_one():
    rows = family_runs.cold_compile("tests.measure.test_family_runs:COLD", ["slow", "broken"], [SHAPE],
                                    device="cpu", timeout_s=120)  # fmt: skip
    df = pd.DataFrame(rows)
    assert df[["kind", "candidate"]].values.tolist() == [
        ["compile", "broken"], ["cache", "broken"], ["compile", "slow"], ["cache", "slow"]
    ]  # fmt: skip
    slow = df[(df["candidate"] == "slow") & (df["kind"] == "compile")].iloc[0]
    assert (
        slow["status"] == "ok"
        and slow["device"] == "interpret"
        and slow["shape_key"] == "tokens=2|width=64|dtype=float32"
    )
    assert slow["compile_s"] == slow["value"] >= COMPILE_S * 0.9 and slow["first_call_s"] >= COMPILE_S
    assert slow["warm_s"] < COMPILE_S / 2 and slow["cache_bytes"] == 0 and slow["specializations"] == 0
    broken = df[df["candidate"] == "broken"]
    assert (broken["status"] == "failed").all() and broken["value"].isna().all()
    assert broken["reason"].str.contains("prepare('broken', tokens=2|width=64|dtype=float32) raised RuntimeError: ptxas died", regex=False).all()  # fmt: skip
    assert set(contracts.LIFECYCLE.names) <= set(df.columns)
    assert lifecycle_costs(df).compile_s == {"slow": slow["compile_s"]}  # the analysis reads these rows


@interpreter_only
def test_cold_compile_of_the_rmsnorm_smoke_family_on_the_interpreter():
    cand = load(SMOKE, device="cpu").family.candidates()[0].id
    rows = family_runs.cold_compile(SMOKE, [cand], [{"tokens": 3, "hidden": 512, "dtype": "float16"}],
                                    device="cpu", timeout_s=120)  # fmt: skip
    compile_row, cache_row = rows
    assert (compile_row["kind"], cache_row["kind"]) == ("compile", "cache")
    assert compile_row["status"] == "ok" and compile_row["candidate"] == cand, compile_row["reason"]
    assert (
        compile_row["first_call_s"] > 0 and compile_row["compile_s"] >= 0 and compile_row["toolchain_s"] > 0
    )
    assert cache_row["value"] == 0.0  # the interpreter writes no cache


def test_cold_compile_timeout_and_bad_arguments():
    rows = family_runs.cold_compile("tests.measure.test_family_runs:COLD", ["hang"], [SHAPE], device="cpu",
                                    timeout_s=1)  # fmt: skip
    assert [r["status"] for r in rows] == ["failed", "failed"]
    assert "timed out after 1 s" in rows[0]["reason"]
    with pytest.raises(ValueError, match="needs the family's spec"):
        family_runs.cold_compile(COLD, ["slow"], [SHAPE], device="cpu", timeout_s=10)
    with pytest.raises(ValueError, match="device must be"):
        family_runs.cold_compile(
            "tests.measure.test_family_runs:COLD", ["slow"], [SHAPE], device="tpu", timeout_s=10
        )


# -- the lifecycle stage of a family ---------------------------------------------------------------


@interpreter_only
def test_a_familys_lifecycle_has_compile_dispatch_and_switch_rows_keyed_on_its_features():
    from headroom.policies.shapes import Keying

    family = load(SMOKE, device="cpu").family
    trace = expand(family, steps([1, 2, 1, 4, 2, 8, 1, 2]))
    ids = [c.id for c in family.candidates()][:2]
    cfg = {"dispatch_lookups": 200, "dispatch_repeats": 3, "switch_invocations": 2, "switch_pairs": 1,
           "switch_reps": 2, "warmup_reps": 0, "switch_work_l2": 0}  # fmt: skip
    fit = {"train_fraction": 0.5, "clusters": 2, "seed": 0}
    df = family_runs.lifecycle(family, SMOKE, trace, ids, cfg, device="cpu", policies=fit,
                               keying=Keying.of_features(family.features))  # fmt: skip
    assert sorted(df.loc[df["kind"] == "compile", "candidate"]) == sorted(ids)
    assert set(df.loc[df["kind"] == "dispatch", "policy"]) == set(lifecycle.DISPATCH_POLICIES)
    switch = df[df["kind"] == "switch"]
    assert len(switch) == 2 and set(switch["candidate"]) | set(switch["candidate_b"]) == set(ids)
    costs = lifecycle_costs(df)
    assert set(costs.dispatch_us) == set(lifecycle.DISPATCH_POLICIES) and set(costs.compile_s) == set(ids)
    with pytest.raises(ValueError, match="train_fraction"):
        family_runs.lifecycle(family, SMOKE, trace, ids, cfg, device="cpu", policies={}, keying=None)
