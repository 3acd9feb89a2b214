"""The measurement stages on the Triton interpreter: three portfolio runs in three fresh processes,
lifecycle rows, skipped GPU-only rows. Shapes are the smallest the kernels take, so the
interpreter's ~0.1 s per call keeps this module fast."""

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from headroom.analysis import policies
from headroom.core import artifacts, contracts, defaults
from headroom.measure import calibrate, graph_sweep, inputs, lifecycle, noise, portfolio
from headroom.measure.candidates import build as build_candidates
from headroom.measure.timing import cuda_available as portfolio_cuda

ROOT = Path(__file__).resolve().parents[2]
# In-process tests on CPU tensors need kernels built for the interpreter (conftest decides).
interpreter_only = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="kernels were imported compiled (a GPU machine)"
)
cuda_only = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") == "1" or not portfolio_cuda(), reason="needs a CUDA GPU"
)
REPS = 2
PARTITION = {"heads_q": 2, "heads_kv": 1, "head_dim": 32, "dtype": "float32", "rope_base": 10000.0}


def tiny_trace() -> pd.DataFrame:
    rows = [("prefill", 1, 16, 16), ("decode", 1, 1, 32), ("prefill", 1, 32, 32)]
    return pd.DataFrame(
        [
            {
                "invocation": i,
                "phase": ph,
                "batch": b,
                "q_len": q,
                "kv_len": kv,
                "heads_q": 2,
                "heads_kv": 1,
                "head_dim": 32,
                "dtype": "float32",
                "shape_key": f"{ph}|b{b}|q{q}|kv{kv}|h2/1|d32|float32",
            }
            for i, (ph, b, q, kv) in enumerate(rows)
        ]
    )


def tiny_candidates() -> pd.DataFrame:
    tiles = [
        {"block_m": 16, "block_n": 16, "num_warps": 1, "num_stages": 1},
        {"block_m": 32, "block_n": 16, "num_warps": 1, "num_stages": 1},
    ]
    return build_candidates(tiles, ["unfused", "fused"], generation=1).iloc[:3].reset_index(drop=True)


DRIVER = textwrap.dedent(
    """
    import os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    import pandas as pd
    from headroom.core import artifacts, defaults
    from headroom.measure import portfolio
    trace, cands, run, out = pd.read_parquet(sys.argv[1]), pd.read_parquet(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    rows, samples = portfolio.run(trace, cands, {"sampler": "fixed", "reps": REPS, "warmup_reps": 0, "mode": "both"}, run=run,
                                  device="interpret", progress=False)
    artifacts.write(rows, f"{out}/run-{run}.parquet", kind="portfolio", provenance={"test": run})
    artifacts.write(samples, f"{out}/run-{run}-samples.parquet", kind="portfolio_samples", provenance={"test": run})
    """
).replace("REPS", str(REPS))


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory):
    """Three portfolio runs, each its own process (started side by side)."""
    out = tmp_path_factory.mktemp("portfolio")
    tiny_trace().to_parquet(out / "trace.parquet")
    tiny_candidates().to_parquet(out / "candidates.parquet")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                DRIVER,
                str(out / "trace.parquet"),
                str(out / "candidates.parquet"),
                str(run),
                str(out),
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for run in (1, 2, 3)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    return out


def _load(out: Path, suffix: str = "") -> pd.DataFrame:
    return pd.concat([artifacts.read(out / f"run-{r}{suffix}.parquet") for r in (1, 2, 3)], ignore_index=True)


def test_three_runs_come_from_three_processes(three_runs):
    rows = _load(three_runs)
    pids = rows.groupby("run")["pid"].unique()
    assert all(len(p) == 1 for p in pids)
    assert len({int(p[0]) for p in pids}) == 3
    assert os.getpid() not in {int(p[0]) for p in pids}
    assert rows["started_at"].str.endswith("+00:00").all()
    assert set(rows["device"]) == {"interpret"} and set(rows["timing_method"]) == {"host_clock"}


def test_row_and_sample_counts(three_runs):
    rows = _load(three_runs)
    # mode 'both' without CUDA runs eager only: one row per invocation x admitted candidate.
    assert set(rows["mode"]) == {"eager"}
    assert rows.groupby("run").size().tolist() == [3 * 3] * 3
    assert not rows.duplicated(["run", "mode", "invocation", "candidate"]).any()
    con = duckdb.connect()
    glob = str(three_runs / "run-*-samples.parquet")
    counts = con.execute(
        f"SELECT run, mode, invocation, candidate, count(*) AS n, sum(calls) AS calls "
        f"FROM read_parquet('{glob}') GROUP BY ALL"
    ).df()
    assert len(counts) == 3 * 3 * 3
    assert (counts["n"] == REPS).all() and (counts["calls"] == REPS).all()
    assert con.execute(f"SELECT count(*) FROM read_parquet('{glob}')").fetchone()[0] == 3 * 3 * 3 * REPS
    assert (rows["reps"] == REPS).all()
    for path in sorted(three_runs.glob("run-*.parquet")):
        artifacts.verify(path)  # the sidecar hash matches the bytes


def test_rows_summarize_their_samples(three_runs):
    rows, samples = _load(three_runs), _load(three_runs, "-samples")
    assert np.isfinite(samples["latency_us"]).all() and (samples["latency_us"] > 0).all()
    med = samples.groupby(["run", "mode", "invocation", "candidate"])["latency_us"].median().rename("m")
    joined = rows.join(med, on=["run", "mode", "invocation", "candidate"])
    np.testing.assert_allclose(joined["median_us"], joined["m"])
    assert (rows["floor_us"] > 0).all()
    np.testing.assert_allclose(rows["floor_ratio"], rows["median_us"] / rows["floor_us"])
    assert rows["graph_launch_us"].isna().all()  # no CUDA: no graph launch to measure
    assert (rows["working_set_bytes"] == rows["set_bytes"] * rows["buffer_sets"]).all()


def test_candidate_order_rotates_between_invocations(three_runs):
    samples = _load(three_runs, "-samples")
    orders = (
        samples[samples["rep"] == 0]
        .sort_values("position")
        .groupby(["run", "invocation"])["candidate"]
        .apply(tuple)
    )
    for run, per_run in orders.groupby(level="run"):
        assert all(sorted(o) == sorted(per_run.iloc[0]) for o in per_run)  # each a permutation
        assert len(set(per_run)) > 1, f"run {run}: every invocation used the same order"
        firsts = [o[0] for o in per_run]
        assert all(a != b for a, b in zip(firsts, firsts[1:], strict=False))


def test_noise_report_over_the_three_runs(three_runs):
    rows, samples = _load(three_runs), _load(three_runs, "-samples")
    rs = noise.rel_std(samples)
    assert len(rs) == 27 and (rs["n"] == REPS).all()
    spread = noise.median_spread(rows)
    assert (spread["runs"] == 3).all() and (spread["spread_pct"] >= 0).all()
    stability = noise.winner_stability(rows)
    assert len(stability) == 3 and (stability["runs"] == 3).all()
    assert len(noise.run_summary(rows, samples)) == 3


def test_fixed_sampler_records_why_each_cell_stopped(three_runs):
    rows = _load(three_runs)
    assert (rows["stop_reason"] == "fixed").all() and (rows["cell_wall_s"] > 0).all()
    summary = noise.sampler_summary(rows)
    assert summary["cells"].tolist() == [9, 9, 9] and summary["fixed"].tolist() == [9, 9, 9]
    assert (summary["samples"] == 9 * REPS).all() and (summary["target"] == 0).all()


@interpreter_only
def test_adaptive_sampler_in_a_portfolio_run():
    """On the interpreter every cell is noisy and slow: a tiny target can only end by a cap, and
    each cell keeps every sample it took; a huge target ends each cell at the minimum count."""
    trace = tiny_trace().iloc[[1]]
    cands = tiny_candidates().iloc[:2]
    adaptive = {"min_samples": {"eager": 2}, "max_samples": {"eager": 3}, "max_time_s": 60.0}
    for target, reasons, counts in ((1e-9, {"count_cap"}, {3}), (1e9, {"target"}, {2})):
        section = {
            "sampler": "adaptive",
            "warmup_reps": 0,
            "adaptive": {**adaptive, "target_rse_pct": {"eager": target}},
        }
        rows, samples = portfolio.run(trace, cands, section, run=1, device="interpret", progress=False)
        assert set(rows["stop_reason"]) == reasons and set(rows["reps"]) == counts
        per_cell = samples.groupby("candidate").size()
        assert (per_cell.loc[rows["candidate"]].to_numpy() == rows["reps"].to_numpy()).all()
        assert np.isfinite(rows["rse_pct"]).all()
        contracts.check("portfolio", artifacts.to_table(rows))  # the new columns are typed


def test_adaptive_settings_are_checked_by_name():
    with pytest.raises(ValueError, match="portfolio.sampler"):
        portfolio.settings({"sampler": "nvbench"})
    with pytest.raises(ValueError, match=r"portfolio.adaptive \(graph\).*max_samples"):
        portfolio.settings({"adaptive": {"max_samples": {"graph": 3}}})
    with pytest.raises(ValueError, match="portfolio.adaptive.target_rse_pct: unknown key"):
        portfolio.settings({"adaptive": {"target_rse_pct": {"prefill": 1.0}}})
    rules = portfolio.stop_rules(portfolio.settings({"sampler": "adaptive"}))
    assert (
        set(rules) == {"eager", "graph"}
        and portfolio.stop_rules(portfolio.settings({"sampler": "fixed"})) == {}
    )


def test_candidate_order_properties():
    n = 4
    orders = [portfolio.candidate_order(n, seed=0, run=1, index=i) for i in range(40)]
    assert all(sorted(o) == list(range(n)) for o in orders)
    firsts = [int(o[0]) for o in orders]
    assert np.bincount(firsts, minlength=n).tolist() == [10] * n  # every candidate leads equally often
    assert len({tuple(o[1:]) for o in orders}) > 1  # followers are shuffled, not a fixed cycle
    np.testing.assert_array_equal(orders[3], portfolio.candidate_order(n, seed=0, run=1, index=3))
    with pytest.raises(ValueError, match="n must"):
        portfolio.candidate_order(0, seed=0, run=1, index=0)


def test_inputs_follow_the_trace_row():
    row = next(tiny_trace().itertuples(index=False))
    sets = inputs.input_sets(row, 2, "interpret", seed=1)
    q, k, v = sets[0]
    assert q.shape == (1, 2, 16, 32) and k.shape == v.shape == (1, 1, 16, 32)
    assert str(q.dtype) == "torch.float32"
    assert not np.array_equal(sets[0][1].numpy(), sets[1][1].numpy())  # distinct sets
    assert (q != 0).all()
    assert inputs.set_bytes(row) == (2 * 16 * 32 + 2 * 16 * 32) * 4


def test_bad_trace_and_settings_are_named():
    bad = tiny_trace()
    bad.loc[0, "kv_len"] = bad.loc[0, "q_len"] - 1  # q_len < kv_len is a chunk over a cache; > is not
    with pytest.raises(ValueError, match="invocation 0.*q_len <= kv_len"):
        inputs.check_trace(bad)
    bad = tiny_trace()
    bad.loc[1, "q_len"] = 2
    with pytest.raises(ValueError, match="invocation 1.*decode"):
        inputs.check_trace(bad)
    with pytest.raises(ValueError, match="portfolio.mode"):
        portfolio.settings({"mode": "fast"})
    with pytest.raises(ValueError, match="unknown key"):
        portfolio.settings({"repz": 3})
    with pytest.raises(ValueError, match="no admitted candidates"):
        portfolio.run(tiny_trace(), tiny_candidates().iloc[0:0], {}, run=1, device="interpret")


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
    df = lifecycle.run(tiny_trace(), cands, {**cfg, "plan_reps": 2}, device="interpret", policies=FIT)
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
    costs = policies.lifecycle_costs(df)  # the analysis reads exactly this table
    assert set(costs.dispatch_us) == set(lifecycle.DISPATCH_POLICIES)
    assert costs.compile_s == {}  # skipped rows charge nothing


def test_plan_build_cost_per_generation_2_candidate_and_shape():
    from headroom.measure.candidates import build

    tiles = [{"block_m": 16, "block_n": 16, "num_warps": 1, "num_stages": 1}]
    cands = build(tiles, ["unfused", "q_fused"], ["math"])
    trace = tiny_trace()
    rows = pd.DataFrame(
        lifecycle.plan_rows(trace, cands, {"plan_reps": 3}, "interpret", 10000.0, logging.getLogger())
    )
    ours = rows[rows["candidate"].str.startswith("t0")]
    assert (ours["status"] == "ok").all() and (ours["value"] > 0).all() and (ours["unit"] == "us").all()
    assert sorted(set(ours["shape_key"])) == sorted(set(trace["shape_key"]))  # every distinct shape
    native = rows[rows["candidate"] == "native-sdpa-math"]
    assert len(native) == 1 and native.iloc[0]["status"] == "skipped"


FIT = {"train_fraction": 0.5, "clusters": 2, "seed": 0}


def test_dispatch_times_the_fitted_registry_policies():
    from headroom.analysis import crossrun, registry

    trace = pd.concat([tiny_trace()] * 4, ignore_index=True).assign(invocation=lambda t: range(len(t)))
    names = ["a", "b", "c"]
    fitted = lifecycle.fitted_policies(trace, names, **FIT)
    assert set(fitted) == set(registry.REGISTRY) == set(lifecycle.DISPATCH_POLICIES)
    shapes = lifecycle.lookup_shapes(trace, FIT["train_fraction"])
    assert [s["invocation"] for s in shapes] == list(range(6, 12))  # the test part, in trace order
    for name, policy in fitted.items():
        assert all(policy.lookup(s) in names for s in shapes), name
    # The clustered lookup is the analysis' own fit: the policies stage, fitting on the same train
    # rows with the same settings, gets the same centroids (k-means sees shapes, not latencies).
    opts = crossrun.Options(clusters=FIT["clusters"])
    n_train, _ = crossrun.split(len(trace), FIT["train_fraction"], opts.validation_fraction)
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
        lifecycle.fitted_policies(trace, names, train_fraction=1.0, clusters=2, seed=0)


def test_switch_plan_pairs_different_tiles():
    cfg = lifecycle.settings({"switch_invocations": 2, "switch_pairs": 5})
    plan = lifecycle.switch_plan(tiny_trace(), tiny_candidates(), cfg)
    # 3 candidates over 2 tiles: the pairs with different tiles are (t0u, t1u) and (t0f, t1u).
    assert len(plan) == 2 * 2
    assert all(a.tile != b.tile for _, a, b in plan)
    assert sorted({int(inv.invocation) for inv, _, _ in plan}) == [0, 2]


def test_graph_sweep_and_calibrate_skip_without_cuda():
    df = graph_sweep.run(tiny_candidates(), {}, PARTITION, device="interpret")
    cfg = graph_sweep.settings({})
    assert len(df) == len(cfg["shapes"]) * len(cfg["regimes_l2"]) * 2 * 2
    assert (df["status"] == "skipped").all() and df["reason"].str.contains("no CUDA").all()
    assert df["median_us"].isna().all() and df["working_set_bytes"].isna().all()
    assert set(df["regime"]) == {"0.25xL2", "0.5xL2", "2xL2", "8xL2"}
    assert graph_sweep.fusion_speedups(df).empty
    cal = calibrate.run({}, device="interpret")
    assert set(cal["name"]) == set(calibrate.NAMES)
    assert (cal["status"] == "skipped").all() and cal["value"].isna().all() and (cal["reason"] != "").all()


def test_graph_sweep_speedups_on_hand_made_rows():
    rows = pd.DataFrame(
        [
            {
                "shape_key": "s",
                "regime": "0.25xL2",
                "regime_multiple": 0.25,
                "mode": m,
                "fused": f,
                "median_us": us,
                "status": "ok",
            }
            for m, f, us in (
                ("eager", False, 30.0),
                ("eager", True, 10.0),
                ("graph", False, 11.0),
                ("graph", True, 10.0),
            )
        ]
    )
    table = graph_sweep.speedup_table(rows).iloc[0]
    assert table["eager_speedup"] == pytest.approx(3.0) and table["graph_speedup"] == pytest.approx(1.1)


def _cuda_trace() -> pd.DataFrame:
    rows = [("prefill", 1, 256, 256), ("decode", 4, 1, 1024)]
    return pd.DataFrame(
        [
            {
                "invocation": i,
                "phase": ph,
                "batch": b,
                "q_len": q,
                "kv_len": kv,
                "heads_q": 8,
                "heads_kv": 2,
                "head_dim": 64,
                "dtype": "bfloat16",
                "shape_key": f"{ph}|b{b}|q{q}|kv{kv}|h8/2|d64|bfloat16",
            }
            for i, (ph, b, q, kv) in enumerate(rows)
        ]
    )


def _cuda_candidates() -> pd.DataFrame:
    """One tile crossed with every RoPE placement of the default study."""
    tiles = [{"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 2}]
    return build_candidates(tiles, defaults.section("rope"))


@pytest.mark.gpu
@cuda_only
def test_portfolio_both_modes_on_cuda():
    trace, candidates = _cuda_trace(), _cuda_candidates()
    rows, samples = portfolio.run(
        trace,
        candidates,
        {"sampler": "fixed", "reps": 40, "warmup_reps": 5, "graph_calls": 10, "mode": "both"},
        run=1,
        device="cuda",
        progress=False,
    )
    # one row per (mode, invocation, candidate): both modes x the trace x the candidates
    assert set(rows["mode"]) == {"eager", "graph"}
    assert len(rows) == 2 * len(trace) * len(candidates)
    assert not rows.duplicated(["mode", "invocation", "candidate"]).any()
    assert set(rows["candidate"]) == set(candidates["candidate"])
    graph = rows[rows["mode"] == "graph"]
    assert (
        (graph["reps"] == 4).all()
        and (graph["calls_per_sample"] == 10).all()
        and (graph["timed_calls"] == 40).all()
    )
    assert (samples[samples["mode"] == "graph"]["calls"] == 10).all()
    np.testing.assert_allclose(graph["median_us"] * 10, graph["graph_replay_us"], rtol=0.2)
    assert (rows["median_us"] > 0).all() and np.isfinite(rows["graph_launch_us"]).all()
    floors = rows.groupby("mode")["floor_us"].first()
    assert floors["graph"] < floors["eager"]  # a launch inside a graph is cheaper than from the host


@pytest.mark.gpu
@cuda_only
def test_calibrate_and_graph_sweep_on_cuda():
    cal = calibrate.run({"reps": 10, "matmul_n": 4096}, device="cuda").set_index("name")
    assert (cal["status"] == "ok").all()
    assert 1e11 < cal.loc["hbm_bytes_per_s", "value"] < cal.loc["l2_bytes_per_s", "value"]
    assert cal.loc["hbm_bytes_per_s", "working_set_bytes"] > cal.loc["l2_bytes", "value"]
    assert cal.loc["l2_bytes_per_s", "working_set_bytes"] <= cal.loc["l2_bytes", "value"]
    part = {"heads_q": 8, "heads_kv": 2, "head_dim": 64, "dtype": "bfloat16"}
    df = graph_sweep.run(_cuda_candidates(), {"reps": 10, "regimes_l2": [0.5, 4.0]}, part, device="cuda")
    assert (df["status"] == "ok").all() and (df["median_us"] > 0).all()
    assert set(df["residency"]) == {"l2-resident", "spilled"}
    assert np.isfinite(df["fusion_speedup"]).all()


def _compile_inputs():
    trace = tiny_trace()
    shapes = [
        {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in trace.to_dict("records")
    ]
    return trace, shapes, next(tiny_candidates().itertuples(index=False))


def _check_child_result(res: dict, trace: pd.DataFrame) -> None:
    assert "error" not in res, res.get("error")
    assert [s["shape_key"] for s in res["shapes"]] == list(trace["shape_key"])
    assert all(s["first_s"] > 0 and s["second_s"] > 0 and s["new_bytes"] == 0 for s in res["shapes"])
    assert res["cache_bytes"] == 0 and res["toolchain_s"] > 0 and res["pid"] != os.getpid()


@interpreter_only
def test_cold_compile_child_plumbing_on_the_interpreter():
    """The forked path end to end (spec out, result back), one fresh process per candidate; the
    interpreter compiles nothing, so its cache stays empty and no shape counts as a specialization."""
    from headroom.measure import cold_compile

    trace, shapes, cand = _compile_inputs()
    with cold_compile.Server(interpret=True, project_root=ROOT) as server:
        first = lifecycle._compile_one(cand, shapes, 10000.0, 300, server=server)
        second = lifecycle._compile_one(cand, shapes, 10000.0, 300, server=server)
    _check_child_result(first, trace)
    _check_child_result(second, trace)
    assert first["pid"] != second["pid"]


@interpreter_only
def test_cold_compile_fallback_starts_a_fresh_interpreter(caplog):
    from headroom.measure import cold_compile

    trace, shapes, cand = _compile_inputs()
    _check_child_result(
        lifecycle._spawned(lifecycle._spec(cand, shapes, 10000.0), 300, interpret=True), trace
    )
    # A forked child that fails (here: compiled kernels and no CUDA) is retried in a freshly started
    # process, whose own failure is what the row records.
    with cold_compile.Server(interpret=False, project_root=ROOT) as server, caplog.at_level(logging.WARNING):
        res = lifecycle._compile_one(cand, shapes, 10000.0, 300, server=server)
    assert "again in a freshly started process" in caplog.text
    assert res["error"].startswith("cold-compile child exited")


@interpreter_only
def test_cold_compile_child_that_outlives_its_timeout_is_killed(tmp_path):
    from headroom.measure import cold_compile

    _, shapes, cand = _compile_inputs()
    spec = lifecycle._spec(cand, shapes, 1e4)
    with cold_compile.Server(interpret=True, project_root=ROOT) as server:
        assert "error" not in server.compile(spec, str(tmp_path / "a"), timeout_s=300)  # the server is up
        res = server.compile(spec, str(tmp_path / "b"), timeout_s=0.001)
        assert res["timed_out"] and res["error"] == "cold-compile child timed out after 0.001 s"
        assert lifecycle._compile_one(cand, shapes, 1e4, 0.001, server=server)["timed_out"]  # no retry


@pytest.mark.gpu
@cuda_only
def test_portfolio_adaptive_sampler_on_cuda():
    """Both modes stop by the adaptive rule: a loose target at the minimum count, an unreachable
    minimum time at the count cap (graph: counted in replays)."""
    adaptive = {"min_samples": {"eager": 6, "graph": 3}, "max_samples": {"eager": 12, "graph": 5}}
    for extra, reason, counts in (
        ({"target_rse_pct": {"eager": 50.0, "graph": 50.0}}, "target", {"eager": 6, "graph": 3}),
        ({"min_time_s": 1e3, "max_time_s": 60.0}, "count_cap", {"eager": 12, "graph": 5}),
    ):
        section = {
            "sampler": "adaptive",
            "warmup_reps": 3,
            "graph_calls": 10,
            "adaptive": {**adaptive, **extra},
        }
        rows, samples = portfolio.run(
            _cuda_trace(), _cuda_candidates(), section, run=1, device="cuda", progress=False
        )
        assert set(rows["stop_reason"]) == {reason}
        assert rows.groupby("mode")["reps"].unique().map(set).to_dict() == {m: {n} for m, n in counts.items()}
        assert (rows.loc[rows["mode"] == "graph", "timed_calls"] == 10 * counts["graph"]).all()
        assert len(samples) == rows["reps"].sum() and np.isfinite(rows["rse_pct"]).all()


@pytest.mark.gpu
@cuda_only
def test_cold_compile_on_cuda_forked_and_spawned_agree():
    """A forked child compiles cold as a freshly started one does: the same specializations, new
    cache files, the toolchain timed."""
    from headroom.measure import cold_compile

    trace = _cuda_trace()
    shapes = [
        {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in trace.to_dict("records")
    ]
    cand = next(_cuda_candidates().itertuples(index=False))
    with cold_compile.Server(interpret=False, project_root=ROOT) as server:
        forked = lifecycle._compile_one(cand, shapes, 10000.0, 600, server=server)
    spawned = lifecycle._spawned(lifecycle._spec(cand, shapes, 10000.0), 600, interpret=False)
    for res in (forked, spawned):
        assert "error" not in res, res.get("error")
        assert res["toolchain_s"] > 0 and res["cache_bytes"] > 0 and res["pid"] != os.getpid()
        assert res["shapes"][0]["new_bytes"] > 0  # the first shape compiled the candidate's kernels
    compiled = [[s["new_bytes"] > 0 for s in r["shapes"]] for r in (forked, spawned)]
    assert compiled[0] == compiled[1]
