"""The portfolio stage: three runs in three fresh processes on the interpreter (rows, samples, the
seeded candidate order, the noise report over them, the samplers), its settings, and both modes on
CUDA."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest

from headroom.core import artifacts, contracts
from headroom.families.attention import portfolio as attention
from headroom.measure import noise, portfolio
from tests.measure.measure_helpers import (
    REPS,
    ROOT,
    cuda_candidates,
    cuda_only,
    cuda_trace,
    interpreter_only,
    tiny_candidates,
    tiny_trace,
)

DRIVER = textwrap.dedent(
    """
    import os, sys
    os.environ["TRITON_INTERPRET"] = "1"
    import pandas as pd
    from headroom.core import artifacts, defaults
    from headroom.families.attention import portfolio
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
def test_adaptive_sampler_in_a_portfolio_run(caplog):
    """On the interpreter every cell is noisy and slow: a tiny target can only end by a cap, and
    each cell keeps every sample it took; a huge target ends each cell at the minimum count. The
    run's log says where each candidate's untimed seconds went."""
    trace = tiny_trace().iloc[[1]]
    cands = tiny_candidates().iloc[:2]
    adaptive = {"min_samples": {"eager": 2}, "max_samples": {"eager": 3}, "max_time_s": 60.0}
    for target, reasons, counts in ((1e-9, {"count_cap"}, {3}), (1e9, {"target"}, {2})):
        section = {
            "sampler": "adaptive",
            "warmup_reps": 1,
            "adaptive": {**adaptive, "target_rse_pct": {"eager": target}},
        }
        with caplog.at_level("INFO"):
            rows, samples = attention.run(trace, cands, section, run=1, device="interpret", progress=False)
        table = caplog.text.split("untimed seconds by candidate:\n")[1].splitlines()
        assert "eager warm-up" in table[0] and table[0].split()[-1] == "all"
        assert sorted(line.split()[0] for line in table[2:4]) == sorted(cands["candidate"])
        caplog.clear()
        assert set(rows["stop_reason"]) == reasons and set(rows["reps"]) == counts
        per_cell = samples.groupby("candidate").size()
        assert (per_cell.loc[rows["candidate"]].to_numpy() == rows["reps"].to_numpy()).all()
        assert np.isfinite(rows["rse_pct"]).all()
        contracts.check("portfolio", artifacts.to_table(rows))  # the new columns are typed


def test_untimed_table_sums_each_candidates_kinds_most_first():
    table = attention.untimed_table(
        {"a": {"prepare": 0.5, "eager warm-up": 1.0}, "b": {"prepare": 3.0, "eager warm-up": 0.25}}
    ).splitlines()
    assert table[0].split() == ["prepare", "eager", "warm-up", "all"]
    assert [line.split() for line in table[2:]] == [
        ["b", "3.0", "0.25", "3.25"],
        ["a", "0.5", "1.00", "1.50"],
    ]


def test_adaptive_settings_are_checked_by_name():
    with pytest.raises(ValueError, match="portfolio.sampler"):
        portfolio.settings({"sampler": "nvbench"})
    with pytest.raises(ValueError, match=r"portfolio.adaptive \(graph\).*max_samples"):
        portfolio.settings({"adaptive": {"max_samples": {"graph": 2}}})  # below the minimum, 3
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


def test_bad_settings_and_no_candidates_are_named():
    with pytest.raises(ValueError, match="portfolio.mode"):
        portfolio.settings({"mode": "fast"})
    with pytest.raises(ValueError, match="unknown key"):
        portfolio.settings({"repz": 3})
    with pytest.raises(ValueError, match="no admitted candidates"):
        attention.run(tiny_trace(), tiny_candidates().iloc[0:0], {}, run=1, device="interpret")


@pytest.mark.gpu
@cuda_only
def test_portfolio_both_modes_on_cuda():
    trace, candidates = cuda_trace(), cuda_candidates()
    rows, samples = attention.run(
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
    # Eager is GPU time with the host enqueued ahead ('spin-events'), so the empty kernel's floor is a
    # few µs in both modes, not the host's 18-40 µs launch path (the two were 3.14 and 3.26 µs on the
    # H200 on 2026-12-04, in either order from day to day): both under 10 µs.
    assert set(rows.loc[rows["mode"] == "eager", "timing_method"]) == {"spin-events"}
    assert ((floors > 0) & (floors < 10.0)).all(), floors.to_dict()


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
        rows, samples = attention.run(
            cuda_trace(), cuda_candidates(), section, run=1, device="cuda", progress=False
        )
        assert set(rows["stop_reason"]) == {reason}
        assert rows.groupby("mode")["reps"].unique().map(set).to_dict() == {m: {n} for m, n in counts.items()}
        assert (rows.loc[rows["mode"] == "graph", "timed_calls"] == 10 * counts["graph"]).all()
        assert len(samples) == rows["reps"].sum() and np.isfinite(rows["rse_pct"]).all()
