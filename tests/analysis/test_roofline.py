"""Roofline terms against FLOPs and bytes computed by hand (worked out in the comments)."""

from __future__ import annotations

import math
import subprocess
import sys

import pandas as pd
import pytest

from headroom.analysis import roofline
from kernels import split as split_rule
from tests import analysis_sets as S

# Prefill: B=1, Sq=Skv=4, Hq=2, Hkv=1, D=2, float16 (2 bytes)
PREFILL = {
    "phase": "prefill",
    "batch": 1,
    "q_len": 4,
    "kv_len": 4,
    "heads_q": 2,
    "heads_kv": 1,
    "head_dim": 2,
    "dtype": "float16",
    "shape_key": "p4",
}
# Decode: B=2, Sq=1, Skv=5, Hq=4, Hkv=2, D=2, float16
DECODE = {
    "phase": "decode",
    "batch": 2,
    "q_len": 1,
    "kv_len": 5,
    "heads_q": 4,
    "heads_kv": 2,
    "head_dim": 2,
    "dtype": "float16",
    "shape_key": "d5",
}


def test_causal_pairs_bottom_right():
    assert roofline.causal_pairs(4, 4) == 1 + 2 + 3 + 4
    assert roofline.causal_pairs(1, 5) == 5  # decode sees the whole cache
    assert roofline.causal_pairs(2, 5) == 4 + 5  # chunk after a 3-token prefix
    with pytest.raises(ValueError, match="q_len"):
        roofline.causal_pairs(5, 4)


def test_prefill_flops_and_bytes_by_hand():
    # flops = 4 * B * Hq * D * pairs = 4 * 1 * 2 * 2 * 10 = 160
    # tiles 2x2: query block 0 (rows 0-1) visits 1 key block, block 1 (rows 2-3) visits 2:
    #   executed = (1 + 2) * 2*2 * 4*D = 96 per (batch, head), x2 heads = 192
    #   K/V loaded = (2 + 4 visible keys) * D * 2 (K and V) * 2 bytes = 48, x2 heads = 96
    # q = o = 1*2*4*2*2 = 32 B; k+v = 2*1*1*4*2*2 = 32 B; cos+sin of 4 positions = 2*4*2*2 = 32 B
    # compulsory = 32 + 32 + 32 + 32 = 128; K/V re-read from L2 = 96 - 32 = 64
    fused = roofline.traffic(PREFILL, 2, 2, True, 1000)
    assert fused["flops"] == 160
    assert fused["executed_flops"] == 192
    assert fused["compulsory_bytes"] == 128
    assert fused["intermediate_bytes"] == 0
    assert fused["launches"] == 1
    # the whole working set fits L2 (hot timing loop): everything at L2 bandwidth
    assert (fused["residency"], fused["hbm_bytes"], fused["l2_traffic_bytes"]) == ("l2", 0, 192)

    # unfused: RoPE writes rotated q (32 B) and k (1*1*4*2*2 = 16 B) and attention reads them back
    unfused = roofline.traffic(PREFILL, 2, 2, False, 1000)
    assert unfused["intermediate_bytes"] == 48
    assert unfused["working_set_bytes"] == 176
    assert unfused["launches"] == 3  # RoPE on q, RoPE on k, attention
    assert (unfused["hbm_bytes"], unfused["l2_traffic_bytes"]) == (0, 128 + 64 + 2 * 48)

    # L2 of 100 B: working set spills; the 48 B intermediate is written back to HBM, re-read from L2
    spilled = roofline.traffic(PREFILL, 2, 2, False, 100)
    assert (spilled["residency"], spilled["hbm_bytes"], spilled["l2_traffic_bytes"]) == ("hbm", 176, 112)
    # L2 of 40 B: even the intermediate does not fit, its re-read goes to HBM too
    tiny = roofline.traffic(PREFILL, 2, 2, False, 40)
    assert (tiny["hbm_bytes"], tiny["l2_traffic_bytes"]) == (224, 64)


def test_decode_flops_and_bytes_by_hand():
    # pairs = 5; flops = 4 * 2 * 4 * 2 * 5 = 320
    # GQA packing: 2 query heads per KV head in M padded to 16; programs = B*Hkv*1 = 4;
    # key blocks = ceil(5/4) = 2: executed = 4 * 16*4*2 * 4*D = 4096
    # K/V loaded = 4 programs * 5 keys * D * 2 * 2 B = 160 = compulsory K/V: no re-read
    # q = o = 2*4*1*2*2 = 32; k+v = 160; tables = 2*1*2*2 = 8 -> compulsory 232
    fused = roofline.traffic(DECODE, 16, 4, True, None)
    assert fused["flops"] == 320
    assert fused["executed_flops"] == 4096
    assert fused["compulsory_bytes"] == 232
    assert fused["residency"] == "hbm"  # unknown L2 size: nothing assumed resident
    assert (fused["hbm_bytes"], fused["l2_traffic_bytes"]) == (232, 0)
    unfused = roofline.traffic(DECODE, 16, 4, False, None)
    assert unfused["intermediate_bytes"] == 32  # decode rotates q only: the cache is rotated already
    assert unfused["hbm_bytes"] == 232 + 2 * 32


def _calibration(l2_bytes):
    rows = [
        ("hbm_bytes_per_s", 1e9, "bytes/s", 10 * l2_bytes, "hbm"),
        ("hbm_bytes_per_s", 9e12, "bytes/s", l2_bytes / 2, "hbm"),  # never left L2: rejected
        ("l2_bytes_per_s", 20.0, "GB/s", l2_bytes / 2, "l2"),
        ("launch_eager_us", 5.0, "us", 0, "launch"),
        ("launch_graph_us", 1000.0, "ns", 0, "launch"),
        ("matmul_flops_per_s", 1e10, "flop/s", 0, "compute"),
    ]
    return pd.DataFrame(
        [
            {"name": n, "value": v, "unit": u, "working_set_bytes": w, "regime": r, "status": "ok"}
            for n, v, u, w, r in rows
        ]
    )


def test_constants_only_from_the_matching_regime():
    values, reasons = roofline.calibrated_constants(_calibration(100), 100)
    assert values == {
        "hbm_bytes_per_s": 1e9,
        "l2_bytes_per_s": 2e10,
        "launch_eager_us": 5.0,
        "launch_graph_us": 1.0,
        "matmul_flops_per_s": 1e10,
    }
    assert reasons == {}
    only_resident = _calibration(100).iloc[1:]
    values, reasons = roofline.calibrated_constants(only_resident, 100)
    assert "hbm_bytes_per_s" not in values
    assert reasons["hbm_bytes_per_s"] == "no ok row measured in the matching regime"


def test_predicted_time_and_fusion_split_by_hand():
    trace = pd.DataFrame([PREFILL])
    cands = pd.DataFrame(
        [
            {"candidate": "t0-unfused", "tile": 0, "block_m": 2, "block_n": 2, "fused": False},
            {"candidate": "t0-fused", "tile": 0, "block_m": 2, "block_n": 2, "fused": True},
        ]
    )
    timings = pd.DataFrame(
        [
            {"candidate": "t0-unfused", "shape_key": "p4", "mode": "eager", "median_us": 12.0},
            {"candidate": "t0-fused", "shape_key": "p4", "mode": "eager", "median_us": 6.0},
        ]
    )
    df = roofline.predict(trace, cands, _calibration(100), l2_bytes=100, timings=timings)
    assert len(df) == 4 and set(df.status) == {"ok"}
    row = df.set_index(["candidate", "mode"])
    # fused, spilled (working set 128 > 100): memory = 128 B / 1e9 + 64 B / 2e10 = 0.128 + 0.0032 us;
    # compute = 192 / 1e10 = 0.0192 us; eager adds 1 launch x 5 us
    assert row.loc[("t0-fused", "eager"), "memory_us"] == pytest.approx(0.1312)
    assert row.loc[("t0-fused", "eager"), "compute_us"] == pytest.approx(0.0192)
    assert row.loc[("t0-fused", "eager"), "predicted_us"] == pytest.approx(5.1312)
    assert row.loc[("t0-fused", "graph"), "predicted_us"] == pytest.approx(1.1312)
    # unfused: memory = 176/1e9 + 112/2e10 = 0.176 + 0.0056; 2 launches
    # unfused prefill launches RoPE on q, RoPE on k, then attention: 3 launches
    assert row.loc[("t0-unfused", "eager"), "predicted_us"] == pytest.approx(0.1816 + 15.0)
    fe = row.loc[("t0-fused", "eager")]
    assert fe["traffic_saved_us"] == pytest.approx(0.0504)
    assert fe["launches_saved_us"] == pytest.approx(10.0)
    assert fe["fusion_saving_pred_us"] == pytest.approx(10.0504)
    assert fe["fusion_saving_measured_us"] == pytest.approx(6.0)
    assert fe["measured_over_predicted"] == pytest.approx(6.0 / 5.1312)
    assert row.loc[("t0-fused", "graph"), "launches_saved_us"] == pytest.approx(2.0)
    assert math.isnan(row.loc[("t0-fused", "graph"), "measured_us"])  # no graph timings given
    assert math.isnan(row.loc[("t0-unfused", "eager"), "traffic_saved_us"])  # split lives on fused rows


def test_missing_calibration_is_skipped_with_the_reason_not_a_number():
    trace = S.trace("AC")
    skipped = pd.DataFrame(
        [
            {
                "name": "hbm_bytes_per_s",
                "value": float("nan"),
                "unit": "bytes/s",
                "working_set_bytes": 0,
                "regime": "hbm",
                "status": "skipped",
                "reason": "no GPU (device: interpret)",
            }
        ]
    )
    df = roofline.predict(trace, S.candidates(), skipped, l2_bytes=None)
    assert set(df.status) == {"skipped"}
    assert df.predicted_us.isna().all()
    assert df.reason.str.contains("not in calibration.parquet").all()
    spilled = df[df.residency == "hbm"]
    assert spilled.reason.str.contains("no GPU").all()


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="dtype"):
        roofline.traffic({**PREFILL, "dtype": "int7"}, 2, 2, True, None)
    with pytest.raises(ValueError, match="heads_q"):
        roofline.traffic({**PREFILL, "heads_q": 3, "heads_kv": 2}, 2, 2, True, None)
    with pytest.raises(ValueError, match=r"candidates: missing column\(s\) \['block_m'\]"):
        roofline.predict(pd.DataFrame([PREFILL]), S.candidates().drop(columns="block_m"), None, l2_bytes=None)


def test_residency_follows_the_measured_working_set_and_cold_timing():
    # the call alone fits a 1000-byte L2, but the portfolio rotated 4000 bytes of input sets
    rotated = roofline.traffic(PREFILL, 2, 2, False, 1000, working_set_bytes=4000)
    assert (rotated["residency"], rotated["hbm_bytes"], rotated["l2_traffic_bytes"]) == ("hbm", 176, 112)
    cold = roofline.traffic(PREFILL, 2, 2, True, 1000, cold=True)
    assert (cold["residency"], cold["hbm_bytes"], cold["l2_traffic_bytes"]) == ("hbm", 128, 64)
    trace = pd.DataFrame([PREFILL])
    cands = pd.DataFrame([{"candidate": "t0-fused", "tile": 0, "block_m": 2, "block_n": 2, "fused": True}])
    timings = pd.DataFrame(
        [
            {
                "candidate": "t0-fused",
                "shape_key": "p4",
                "mode": "eager",
                "median_us": 6.0,
                "working_set_bytes": 4000,
            }
        ]
    )
    df = roofline.predict(trace, cands, _calibration(1000), l2_bytes=1000, timings=timings).set_index("mode")
    assert df.loc["eager", "residency"] == "hbm"  # the measurement's rotating sets spill L2
    assert df.loc["graph", "residency"] == "l2"  # no graph timing: the call's own working set


def test_l2_size_from_environment_then_calibration():
    cal = pd.DataFrame([{"name": "l2_bytes", "value": 123.0, "status": "ok"}])
    assert roofline.l2_bytes_of(S.environment("cuda"), cal) == 50 * 2**20
    assert roofline.l2_bytes_of(pd.DataFrame([{"device": "interpret", "l2_bytes": 0}]), cal) == 123.0
    assert roofline.l2_bytes_of(None, cal.assign(status="skipped")) is None


def test_decode_block_m_cap_and_split_kv_reduction_launch():
    # the decode kernel packs Hq/Hkv = 4 rows: block_m 128 is capped at max(16, 4) = 16
    assert split_rule.decode_block_m(128, 4) == 16
    assert split_rule.decode_block_m(64, 32) == 32
    shape = {**DECODE, "batch": 8, "heads_q": 32, "heads_kv": 8, "kv_len": 1024, "head_dim": 64}
    capped = roofline.traffic(shape, 128, 64, True, None)
    # 8*8 programs x 16 rows x 1024 keys x 4*64 FLOP
    assert capped["executed_flops"] == 8 * 8 * 16 * 1024 * 4 * 64
    # 64 programs on 132 SMs: want ceil(4*132/64) = 9 splits, at most 1024 // 256 = 4 -> 4 splits,
    # so a reduction kernel follows: 2 launches fused, 3 unfused
    split = roofline.traffic(shape, 128, 64, True, None, sm_count=132)
    assert (split["decode_splits"], split["launches"]) == (4, 2)
    assert roofline.traffic(shape, 128, 64, False, None, sm_count=132)["launches"] == 3
    assert roofline.traffic(shape, 128, 64, True, None)["launches"] == 1  # SM count unknown: no split


def test_native_candidates_are_left_out_of_the_model():
    trace = pd.DataFrame([PREFILL, DECODE])
    cands = pd.DataFrame(
        [
            {
                "candidate": "t0-fused",
                "tile": 0,
                "block_m": 2,
                "block_n": 2,
                "fused": True,
                "backend": "triton",
            },
            {
                "candidate": "native-sdpa-cudnn",
                "tile": -1,
                "block_m": 0,
                "block_n": 0,
                "fused": False,
                "backend": "sdpa-cudnn",
            },
        ]
    )
    df = roofline.predict(trace, cands, _calibration(100), l2_bytes=100)
    assert set(df.candidate) == {"t0-fused"}
    assert len(df) == 2 * 2 and set(df.status) == {"ok"}  # shapes x modes


def test_generation_2_launch_counts_follow_the_placement():
    """kernels.plan launches 3 kernels for unfused prefill (RoPE q, RoPE k, attention), 2 for
    q_fused (RoPE k, attention), 1 for fused; decode over a rotated cache rotates only q, and a
    split decode adds the reduction launch (generation 2's default variant merges outside)."""

    def count(shape, rope, generation=2, sm_count=None):
        t = roofline.traffic(
            shape, 2, 2, rope != "unfused", None, sm_count=sm_count, rope=rope, generation=generation
        )
        return t["launches"]

    assert [count(PREFILL, r) for r in ("unfused", "q_fused", "fused")] == [3, 2, 1]
    assert [count(PREFILL, r, generation=1) for r in ("unfused", "fused")] == [3, 1]
    assert [count(DECODE, r) for r in ("unfused", "q_fused", "fused")] == [2, 1, 1]
    shape = {**DECODE, "batch": 8, "heads_q": 32, "heads_kv": 8, "kv_len": 1024, "head_dim": 64}
    assert [count(shape, r, sm_count=132) for r in ("unfused", "q_fused", "fused")] == [3, 2, 2]
    assert [count(shape, r, generation=1, sm_count=132) for r in ("unfused", "fused")] == [3, 2]
    # generation 3 (varlen decode family, placement q_fused) launches generation 2's q_fused sequence
    assert [count(s, "q_fused", generation=3, sm_count=132) for s in (PREFILL, DECODE, shape)] == [2, 1, 2]
    with pytest.raises(ValueError, match="generation 3 has placement q_fused only"):
        count(PREFILL, "fused", generation=3)


def test_predict_reads_placement_and_generation_of_each_candidate():
    trace = pd.DataFrame([PREFILL])
    rows = [
        {
            "candidate": f"t0-{r}",
            "tile": 0,
            "block_m": 2,
            "block_n": 2,
            "fused": r != "unfused",
            "rope": r,
            "generation": 2,
        }
        for r in ("unfused", "fused", "q_fused")
    ]
    df = roofline.predict(trace, pd.DataFrame(rows), _calibration(100), l2_bytes=100)
    eager = df[df["mode"] == "eager"].set_index("candidate")
    assert eager["launches"].to_dict() == {"t0-unfused": 3, "t0-fused": 1, "t0-q_fused": 2}
    assert eager.loc["t0-q_fused", "launches_saved_us"] == pytest.approx(5.0)  # 3 - 2 launches x 5 us


def test_roofline_follows_the_kernels_split_rule(monkeypatch):
    """The split plan and decode's row-block rule live once, in kernels/split.py: changing them
    there changes the roofline's splits, launches and executed FLOPs."""
    shape = {**DECODE, "batch": 8, "heads_q": 32, "heads_kv": 8, "kv_len": 1024, "head_dim": 64}
    before = roofline.traffic(shape, 128, 64, True, None, sm_count=132)
    assert (before["decode_splits"], before["launches"]) == (4, 2)
    monkeypatch.setattr(split_rule, "decode_split_plan", lambda programs, kv_len, sm_count: (1, kv_len))
    unsplit = roofline.traffic(shape, 128, 64, True, None, sm_count=132)
    assert (unsplit["decode_splits"], unsplit["launches"]) == (1, 1)
    monkeypatch.setattr(split_rule, "decode_block_m", lambda block_m, rows: 32)
    wider = roofline.traffic(shape, 128, 64, True, None, sm_count=132)
    assert wider["executed_flops"] == 2 * before["executed_flops"]  # 32 rows per program, not 16


def test_roofline_imports_without_torch_or_triton():
    """The analysis environment has neither: the roofline reads kernels' pure-Python modules."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'triton'):\n"
        "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "from headroom.analysis import roofline\n"
        "import kernels\n"
        "shape = dict(phase='prefill', batch=1, q_len=4, kv_len=4, heads_q=2, heads_kv=1, head_dim=2, dtype='float16')\n"
        "assert roofline.traffic(shape, 2, 2, False, None)['launches'] == 3\n"
        "assert 'torch' not in sys.modules and 'triton' not in sys.modules\n"
        "try:\n"
        "    kernels.attention\n"
        "except ImportError as exc:\n"
        "    assert 'needs torch and triton' in str(exc)\n"
        "else:\n"
        "    raise AssertionError('kernels.attention imported without torch')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
