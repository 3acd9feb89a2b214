"""The lifecycle stage on the interpreter: its rows as the policies read them, plan build costs, the
fitted policies whose lookups it times, and the switch pairs."""

import logging

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from headroom.core import contracts
from headroom.decide import policy_eval
from headroom.families.attention import lifecycle as attention
from headroom.families.attention.keying import ATTENTION
from headroom.measure import lifecycle
from tests.measure.measure_helpers import FIT, interpreter_only, tiny_candidates, tiny_trace


@interpreter_only
def test_lifecycle_on_the_interpreter_parses_for_the_policies():
    cands = tiny_candidates()
    cfg = {
        "dispatch_lookups": 2000,
        "dispatch_repeats": 3,
        "switch_reps": 2,
        "switch_invocations": 1,
        "switch_pairs": 1,
        "warmup_reps": 0,
    }
    df = attention.run(tiny_trace(), cands, {**cfg, "plan_reps": 2}, device="interpret", policies=FIT)
    assert set(df["kind"]) == {"compile", "cache", "dispatch", "switch", "plan"}
    plans = df[df["kind"] == "plan"]  # tiny_candidates are generation 1: no plans
    assert sorted(plans["candidate"]) == sorted(cands["candidate"]) and (plans["status"] == "skipped").all()
    for kind in ("compile", "cache"):
        part = df[df["kind"] == kind]
        assert sorted(part["candidate"]) == sorted(cands["candidate"])
        assert (part["status"] == "skipped").all() and part["reason"].str.contains("interpreter").all()
        assert part["value"].isna().all()
    disp = df[df["kind"] == "dispatch"].set_index("policy")
    assert sorted(disp.index) == sorted(lifecycle.DISPATCH_POLICIES)
    assert (disp["value"] >= 0).all() and (disp["unit"] == "ns").all() and (disp["raw_ns"] > 0).all()
    sw = df[df["kind"] == "switch"]
    assert (
        len(sw) == 1
        and sw.iloc[0]["mode"] == "eager"
        and sw.iloc[0]["candidate"] != sw.iloc[0]["candidate_b"]
    )
    np.testing.assert_allclose(sw["value"], sw["alternating_us"] - sw["same_us"])
    assert (sw["work_bytes"] == 0).all()  # no L2 on the interpreter: nothing written between calls
    contracts.check(
        "lifecycle", pa.Table.from_pandas(df, preserve_index=False)
    )  # what the stage writes (a nullable column once failed here on the GPU)
    costs = policy_eval.lifecycle_costs(df)  # the analysis reads exactly this table
    assert set(costs.dispatch_us) == set(lifecycle.DISPATCH_POLICIES)
    assert costs.compile_s == {}  # skipped rows charge nothing


def test_plan_build_cost_per_generation_2_candidate_and_shape():
    from headroom.families.attention.candidates import build

    tiles = [{"block_m": 16, "block_n": 16, "num_warps": 1, "num_stages": 1}]
    cands = build(tiles, ["unfused", "q_fused"], ["math"])
    trace = tiny_trace()
    rows = pd.DataFrame(
        attention.plan_rows(trace, cands, {"plan_reps": 3}, "interpret", 10000.0, logging.getLogger())
    )
    ours = rows[rows["candidate"].str.startswith("t0")]
    assert (ours["status"] == "ok").all() and (ours["value"] > 0).all() and (ours["unit"] == "us").all()
    assert sorted(set(ours["shape_key"])) == sorted(set(trace["shape_key"]))  # every distinct shape
    native = rows[rows["candidate"] == "native-sdpa-math"]
    assert len(native) == 1 and native.iloc[0]["status"] == "skipped"


def test_plan_builds_hold_one_shapes_inputs_at_a_time(monkeypatch):
    # a long-context trace's shapes hold ~5 GB of inputs each (the Mooncake study ran out of memory
    # when they were made together): each shape's are released before the next shape's are made
    import gc
    import weakref

    from headroom.families.attention import inputs
    from headroom.families.attention.candidates import build

    made, alive = [], []
    real = inputs.input_sets

    def watched(inv, n, device, seed):
        gc.collect()
        alive.append(sum(ref() is not None for ref in made))
        sets = real(inv, n, device, seed=seed)
        made.append(weakref.ref(sets[0][1]))
        return sets

    monkeypatch.setattr(inputs, "input_sets", watched)
    tiles = [{"block_m": 16, "block_n": 16, "num_warps": 1, "num_stages": 1}]
    trace = tiny_trace()
    attention.plan_rows(
        trace, build(tiles, ["unfused"]), {"plan_reps": 1}, "interpret", 10000.0, logging.getLogger()
    )
    assert len(made) == trace["shape_key"].nunique() and alive == [0] * len(made)


def test_dispatch_times_the_fitted_registry_policies():
    from headroom.decide import measured, registry

    trace = pd.concat([tiny_trace()] * 4, ignore_index=True).assign(invocation=lambda t: range(len(t)))
    names = ["a", "b", "c"]
    fitted = lifecycle.fitted_policies(trace, names, **FIT, keying=ATTENTION)
    assert set(fitted) == set(registry.REGISTRY) == set(lifecycle.DISPATCH_POLICIES)
    shapes = lifecycle.lookup_shapes(trace, FIT["train_fraction"])
    assert [s["invocation"] for s in shapes] == list(range(6, 12))  # the test part, in trace order
    for name, policy in fitted.items():
        assert all(policy.lookup(s) in names for s in shapes), name
    # The clustered lookup is the analysis' own fit: the policies stage, fitting on the same train
    # rows with the same settings, gets the same centroids (k-means sees shapes, not latencies).
    opts = measured.Options(clusters=FIT["clusters"])
    n_train, _ = measured.split(len(trace), FIT["train_fraction"], opts.validation_fraction)
    us = np.random.default_rng(1).random((n_train, 3))
    ours = registry.make("clustered").fit(registry.Train(trace.iloc[:n_train], us, tuple(names), clusters=2))
    np.testing.assert_allclose(fitted["clustered"].centroids, ours.centroids)
    test = trace.iloc[n_train:]
    keyed = [fitted["clustered"].key(s) for s in shapes]
    assert keyed == ours.keys(test)
    # lookup and choose go through the same fitted table: the answer timed is the answer scored
    for name in ("global", "phase-keyed", "exact-key", "bucketed", "clustered", "regret-aware"):
        p = fitted[name]
        assert [p.lookup(s) for s in shapes] == [names[i] for i in p.choose(test)], name
    # A nearest-centroid lookup is dearer than a constant one.
    assert lifecycle._loop_ns(fitted["clustered"].lookup, shapes * 200) > lifecycle._loop_ns(
        fitted["global"].lookup, shapes * 200
    )
    with pytest.raises(ValueError, match="train_fraction"):
        lifecycle.fitted_policies(trace, names, train_fraction=1.0, clusters=2, seed=0, keying=ATTENTION)


def test_switch_plan_pairs_different_tiles():
    cfg = lifecycle.settings({"switch_invocations": 2, "switch_pairs": 5})
    plan = attention.switch_plan(tiny_trace(), tiny_candidates(), cfg)
    # 3 candidates over 2 tiles: the pairs with different tiles are (t0u, t1u) and (t0f, t1u).
    assert len(plan) == 2 * 2
    assert all(a.tile != b.tile for _, a, b in plan)
    assert sorted({int(inv.invocation) for inv, _, _ in plan}) == [0, 2]


def test_switch_work_between_calls_writes_before_every_call_and_is_bounded():
    import torch

    assert lifecycle.work_between(0, "cpu")(len) is len  # 0: back to back, nothing wrapped
    wrap = lifecycle.work_between(4096, "cpu")
    calls = []
    fn = wrap(lambda x: calls.append(x) or x * 2)
    for i in range(3):
        wrap.buffer.zero_()
        assert fn(i) == 2 * i and int(wrap.buffer.sum()) == 4096  # written on every call
    assert calls == [0, 1, 2] and wrap.buffer.dtype == torch.uint8
    assert lifecycle.settings({})["switch_work_l2"] == 1.0  # the default study: one L2 between calls
    for bad in (True, -0.5, 17, "l2"):
        with pytest.raises(ValueError, match="lifecycle.switch_work_l2"):
            lifecycle.settings({"switch_work_l2": bad})
