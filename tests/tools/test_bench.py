"""tools/bench.py: the kernel benchmark checks before it times, times through the project's harness,
and writes the tables the `kernel_bench` rule promises (bench.md, bench.json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools import bench

ROOT = Path(__file__).resolve().parents[2]


def _row(impl, family, us, phase="prefill", batch=1, kv_len=64, **extra):
    q_len = kv_len if phase == "prefill" else 1
    row = dict(kind="time", phase=phase, batch=batch, q_len=q_len, kv_len=kv_len, impl=impl, family=family,
               median_us=us, tflops=1.0, gbps=2.0, status="ok")  # fmt: skip
    return {**row, **extra}


def test_summary_picks_the_best_of_each_family_and_divides_them():
    rows = [
        _row("m64n64w4s3-fused", "triton", 10.0),
        _row("m64n64w4s3-g2-unfused", "triton", 12.0),
        _row("m64n64w4s3-attn-only", "attn-only", 8.0),
        _row("m128n64w8s3-attn-only", "attn-only", 7.0),
        _row("sdpa-flash", "sdpa", 20.0),
        _row("sdpa-cudnn", "sdpa", 5.0, status="RuntimeError: no kernel"),  # not run: not the best
    ]
    (s,) = bench.summarize(rows)
    assert (s["best_candidate"], s["best_sdpa"]) == ("m64n64w4s3-fused", "sdpa-flash")
    assert s["best_fused_us"] == 10.0 and s["best_unfused_us"] == 12.0 and s["best_attn_only_us"] == 7.0
    assert s["ratio_candidate_vs_sdpa"] == pytest.approx(2.0)
    assert s["fused_over_attn_only"] == pytest.approx(10.0 / 8.0)  # the same tile's attention alone


def test_the_candidates_are_the_tiles_crossed_with_each_generations_placements():
    tiles = [{"block_m": 64, "block_n": 64, "num_warps": 4, "num_stages": 3}]
    names = [bench.impl_name(c) for c in bench.candidate_rows(tiles, [1, 2])]
    assert names == [
        "m64n64w4s3-unfused", "m64n64w4s3-fused",
        "m64n64w4s3-g2-unfused", "m64n64w4s3-g2-fused", "m64n64w4s3-g2-q_fused",
    ]  # fmt: skip


def _run(tmp_path, *args, interpret="1"):
    env = {**os.environ, "TRITON_INTERPRET": interpret, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "tools" / "bench.py"), "--out", str(tmp_path), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def test_smoke_run_checks_times_and_writes_the_rules_outputs(tmp_path):
    proc = _run(tmp_path, "--smoke", "--generations", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    payload = json.loads((tmp_path / "bench.json").read_text())
    checks = [r for r in payload["rows"] if r["kind"] == "check"]
    assert {r["check"] for r in checks} == {"prefill", "decode", "chunk"}
    assert all(r["status"] == "passed" for r in checks) and payload["broken"] == {}
    timed = {r["impl"] for r in payload["rows"] if r["kind"] == "time" and r["status"] == "ok"}
    assert {"m128n64w8s3-g2-unfused", "m128n64w8s3-g2-fused", "m128n64w8s3-g2-q_fused"} <= timed
    assert "m128n64w8s3-attn-only" in timed and not any(i.endswith("-fused") and "g2" not in i for i in timed)
    assert [s["phase"] for s in payload["summary"]] == ["prefill", "decode"]
    assert "measure/timing.Harness" in payload["env"]["timing"]
    md = (tmp_path / "bench.md").read_text()
    assert "| phase | B | Sq | Skv | best SDPA | µs | best candidate |" in md and "All timings" in md
    assert not (tmp_path / "bench_partial.json").exists()


def test_smoke_without_the_interpreter_is_refused(tmp_path):
    proc = _run(tmp_path, "--smoke", interpret="0")
    assert proc.returncode != 0 and "TRITON_INTERPRET=1" in proc.stderr
    assert not (tmp_path / "bench.json").exists()
