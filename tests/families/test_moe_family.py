"""The fused-MoE family (headroom/families/moe) on the interpreter: the contract, the engine's steps
as MoE calls, the portfolio a table gives, every candidate (ours and the native grouped GEMM)
against the float64 reference, the router's distributions, and `headroom tune` writing a table that
`from_config_table` reads back."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from headroom.core import cli
from headroom.families import Step, check, contract, expand, from_config_table, load
from headroom.families.moe import space


@pytest.fixture(autouse=True)
def _interpreter_env(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


STEPS = [
    Step(0, 0.0, "prefill-only", (), ((40, 40),), 40),
    Step(1, 0.02, "decode-only", (41, 30, 17), (), 3),
    Step(2, 0.04, "mixed", (42, 31), ((16, 64),), 18),
    Step(3, 0.06, "decode-only", (43,), (), 1),
]


@pytest.fixture(scope="module")
def smoke():
    return load("headroom.families.moe.family:SMOKE", device="interpret").family


def test_a_step_is_one_call_whose_m_is_its_tokens(smoke):
    calls = expand.expand(smoke, STEPS)
    assert calls["tokens"].tolist() == [40, 3, 18, 1]
    assert calls["step_kind"].tolist() == ["prefill-only", "decode-only", "mixed", "decode-only"]
    assert calls["shape_key"].iloc[0].startswith("tokens=40|dtype=float16|experts=8|")
    assert smoke.features["tokens"].capture_fixed and smoke.features["tokens"].pad_to[-1] == 512


def test_the_portfolio_is_the_tables_configs_the_defaults_and_the_native(smoke):
    ids = [c.id for c in smoke.candidates()]
    table_ids = {cid for _, cid in smoke.config_table.entries}
    assert table_ids <= set(ids) and ids[-1] == "torch-grouped-mm"
    assert {"m16-n32-k64-g1-w4-s3", "m64-n64-k32-g8-w4-s3"} <= set(ids)  # the untuned default
    assert len(ids) == len(set(ids)) <= space.MAX_PORTFOLIO + 1
    contract.check_family(smoke)


def test_every_candidate_matches_the_float64_reference(smoke):
    calls = expand.expand(smoke, STEPS)
    results = check.check(smoke, calls, device="cpu", seed=0)
    assert set(results["status"]) == {"passed"}, results[results["status"] != "passed"].to_dict("records")
    assert results["candidate"].nunique() == len(smoke.candidates())


def test_the_weights_are_a_seed_0_draw_made_once_per_device(smoke):
    import math

    import torch

    ly = smoke.layer
    w = smoke.weights("cpu")
    assert smoke.weights("cpu") is w and w.dtype == torch.float16
    g = torch.Generator().manual_seed(0)
    want = (torch.randn(ly.experts, ly.n, ly.hidden, generator=g) / math.sqrt(ly.hidden)).half()
    assert torch.equal(w, want)  # the CPU's stream, as before the draw moved to the device's own


def test_routing_is_distinct_per_token_and_skewed_routing_has_hot_experts():
    import torch

    from headroom.families.moe.family import route

    g = torch.Generator().manual_seed(0)
    uniform = route(4000, 16, 4, "uniform", 0.0, g)
    skewed = route(4000, 16, 4, "skewed", 1.2, g)
    for ids in (uniform, skewed):
        assert ids.shape == (4000, 4) and all(len(set(r)) == 4 for r in ids.tolist()[:200])
    top = lambda ids: torch.bincount(ids.flatten(), minlength=16).max().item() / ids.numel()  # noqa: E731
    assert top(uniform) < 0.08 < 0.12 < top(skewed)


def test_the_grid_fits_shared_memory_and_the_tuner_budget():
    configs = space.configs(2)
    assert 100 < len(configs) <= 200
    assert all(space.smem_bytes(c, 2) <= space.SMEM_BYTES for c in configs)


def test_tune_writes_a_table_that_from_config_table_reads_back(tmp_path, capsys):
    spec = "headroom.families.moe.family:SMOKE"
    args = ["tune", spec, "--out", str(tmp_path), "--m", "1,16,48", "--max-configs", "3",
            "--device", "interpret", "--calls", "1", "--replays", "1"]  # fmt: skip
    assert cli.main(args) == 0
    table_path = tmp_path / "E=8,N=64,device_name=interpreter.json"
    table = from_config_table(table_path)
    assert [m for m, _ in table.entries] == [1, 16, 48]
    grid = {c["BLOCK_SIZE_M"] for c in space.configs(2)[:3]}
    assert {json.loads(json.dumps(dict(c)))["BLOCK_SIZE_M"] for _, c in table.configs} <= grid
    timings = pd.read_parquet(tmp_path / "tune.parquet")
    assert len(timings) == 9 and timings["us"].gt(0).all()
    single = json.loads(table_path.with_suffix(".single.json").read_text())
    assert set(single) == set(space.GRID)
    assert "best single config" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, says",
    [
        (["tests.families.softmax_family:FAMILY", "--out", "x"], "not a MoE family"),
        (
            ["headroom.families.moe.family:SMOKE", "--out", "x", "--m", "4,a"],
            "--m must be comma-separated ints",
        ),
        (
            ["headroom.families.moe.family:SMOKE", "--out", "x", "--m", "0,4"],
            "--m must be distinct ints >= 1",
        ),
        (["headroom.families.moe.family:SMOKE", "--out", "x", "--calls", "0"], "--calls must be >= 1"),
    ],
)
def test_tune_refuses_a_bad_argument_in_one_line(args, says, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["tune", *args, "--device", "interpret"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err
    assert not (tmp_path / "x").exists()


def test_the_native_is_unsupported_where_sm90s_grouped_gemm_has_no_kernel(smoke, monkeypatch):
    from headroom.families.moe.family import NATIVE, QWEN3

    native = next(c for c in smoke.candidates() if c.id == NATIVE)
    shape = expand.expand(smoke, STEPS[:1])["shape"].map(json.loads).iloc[0]
    assert smoke.supports(native, shape)  # the CPU build takes float16
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # compiled: bfloat16 with 16-aligned K and N only
    assert not smoke.supports(native, shape)
    qwen = expand.expand(QWEN3, STEPS[:1])["shape"].map(json.loads).iloc[0]
    assert QWEN3.supports(native, qwen) and not QWEN3.supports(native, {**qwen, "hidden": 2047})


def test_a_users_table_is_scored_with_its_configs_added_as_candidates(tmp_path):
    from headroom.families import write_config_table
    from headroom.families.moe.family import SMOKE, MoEFamily

    theirs = {"BLOCK_SIZE_M": 32, "BLOCK_SIZE_N": 32, "BLOCK_SIZE_K": 32, "GROUP_SIZE_M": 4,
              "num_warps": 4, "num_stages": 2}  # fmt: skip
    path = tmp_path / "E=8,N=64,device_name=theirs.json"
    write_config_table(path, {1: space.default_config(1, 8), 256: theirs})
    family = MoEFamily(SMOKE.layer, table=path)
    assert "m32-n32-k32-g4-w4-s2" in [c.id for c in family.candidates()]
    assert family.config_table.choose(100) == "m16-n32-k64-g1-w4-s3"  # nearer to 1 than to 256
    assert family.config_table.choose(200) == "m32-n32-k32-g4-w4-s2"
    contract.check_family(family)
