"""What the verdict ships (issue 20): the recommendation's kernel, policy or phase pair on surfaces
with known answers, the dispatch table's choices on every trace row, what a figure is worth per
decoder layer, and `headroom recommend`."""

from __future__ import annotations

import json
import shutil
import zlib

import numpy as np
import pandas as pd
import pytest

from headroom import dispatch
from headroom.analysis import recommendation
from headroom.core import artifacts, cli, contracts, layout
from tests import analysis_sets as S
from tests.recommendation_sets import recommend, write_study


def _noise(run, inv, tile, fused, scale):
    key = zlib.crc32(f"{run}|{inv}|{tile}|{fused}".encode())
    return 1.0 + scale * np.random.default_rng(key).standard_normal()


def _fused_tile0(k, t, f, r, m, i):
    """Fused 20% faster on every shape, tile 0 best by 5%: one kernel (t0-fused) to ship."""
    return S.BASE_US[k] * (0.8 if f else 1.0) * (1.05 if t else 1.0) * _noise(r, i, t, f, 0.001)


def _c_wants_tile2(k, t, f, r, m, i):
    """Decode C wants tile 2, every other shape tile 0 (by 40%): batch-keyed learns it in graph mode."""
    fast = (k == "C" and t == 2) or (k != "C" and t == 0)
    return S.BASE_US[k] * (0.6 if fast else 1.0) * _noise(r, i, t, f, 0.002)


def _phase_split(k, t, f, r, m, i):
    """Decode 30% faster fused, prefill 30% faster unfused, tiles equal: a pure phase split."""
    better = f if S.SHAPES[k][0] == "decode" else not f
    return S.BASE_US[k] * (0.7 if better else 1.0) * _noise(r, i, t, f, 0.002)


def _rows(tr: pd.DataFrame) -> list[dict]:
    return tr.to_dict("records")


def test_a_stop_ships_the_decisions_kernel_for_every_shape(tmp_path):
    path = tmp_path / "dispatch.json"
    tr, d, table, _ = recommend(_fused_tile0, "ABC" * 8, out=path)
    contracts.check("recommendation", artifacts.to_table(table))
    row = table[table["scope"] == "graph"].iloc[0]
    kernel = d[(d["mode"] == "graph") & (d["figure"] == "kernel_vs_best_unfused")].iloc[0]
    assert (row["verdict"], row["ship"], row["policy"]) == ("stop", "kernel", "global")
    assert (row["kernel"], row["runs_agree"]) == (kernel["kernel"], kernel["runs_agree"]) == ("t0-fused", 3)
    assert (
        row["speedup"] == kernel["estimate"] and row["speedup_ci_low"] == kernel["ci_low"]
    )  # read, not recomputed
    assert (row["block_n"], row["fused"], row["generation"], row["backend"]) == (32, True, 1, "triton")
    table_ = dispatch.load(path, mode="graph")
    assert {table_.choose(**r).id for r in _rows(tr)} == {"t0-fused"}
    unseen = {**_rows(tr)[0], "shape_key": "Z", "batch": 999, "q_len": 77, "kv_len": 77}
    assert table_.choose(**unseen).id == "t0-fused"
    assert table_.expected_gain_pct() == [0.0, None, None]


def test_a_continue_ships_the_refit_policy_whose_choices_the_table_repeats_on_every_row(tmp_path):
    path = tmp_path / "dispatch.json"
    tr, d, table, content = recommend(_c_wants_tile2, "ADCC" * 6, out=path)
    row = table[table["scope"] == "graph"].iloc[0]
    pg = d[(d["mode"] == "graph") & (d["figure"] == "policy_gain")].iloc[0]
    assert (row["verdict"], row["ship"], row["policy"]) == ("continue", "policy", "batch-keyed")
    assert row["policy"] == pg["selected_policy"]
    assert (row["expected_gain_pct"], row["expected_gain_ci_low"]) == (pg["estimate"], pg["ci_low"])
    table_ = dispatch.load(path, mode="graph")
    assert table_.features() == ("phase", "batch")  # graph mode: only what is fixed at capture
    # the engine's fitted object (headroom.policies) and the loaded table choose alike on every row
    engine_policy = recommendation.refit(*_refit_args(tr, "batch-keyed", pg["selected_fusion"]))
    for r in _rows(tr):
        chosen = table_.choose(**r)
        assert chosen.id == engine_policy.lookup(r)
        assert chosen.tile == (2 if r["shape_key"] == "C" else 0), r  # the surface's own answer
    # a padded batch it never saw goes to the policy's fallback: the global kernel of its arm
    unseen = table_.choose(phase="decode", batch=128)
    assert unseen.id == engine_policy.candidates[engine_policy.fallback] and unseen.tile == 0
    assert len(content["scopes"]["graph"]["policy"]["candidates"]) == 2  # only the candidates it uses


def _refit_args(tr, name, arm):
    """(md, layout, opts, name, arm, seed) of the graph mode, as the recommendation fits."""
    from headroom.decide import engine
    from headroom.decide.policy_eval import checked_modes

    tm = S.timings(tr, _c_wants_tile2, modes=("graph",))
    opts, costs, modes = checked_modes(tr, tm, None, 0.5, {"bootstrap_resamples": 300, "random_draws": 20})
    md = modes[0]
    return md, engine.layout(md, opts, costs, 0.5, 0), opts, name, arm, 0


def test_a_pure_phase_split_ships_one_kernel_per_phase(tmp_path):
    path = tmp_path / "dispatch.json"
    tr, d, table, _ = recommend(_phase_split, "ACBCAC" * 8, out=path)
    row = table[table["scope"] == "graph"].iloc[0]
    split = d[(d["mode"] == "graph") & (d["figure"] == "phase_split_gain")].iloc[0]
    assert (row["ship"], row["policy"]) == ("phase-pair", "phase-keyed")
    assert row["expected_gain_pct"] == split["estimate"] > 0
    table_ = dispatch.load(path, mode="graph")
    for r in _rows(tr):
        assert table_.choose(**r).fused == (r["phase"] == "decode"), r


def test_the_profile_routes_each_step_to_its_part(tmp_path):
    def lat(k, t, f, r, m, i):  # graph: C wants tile 2; eager flat
        fast = m == "graph" and ((k == "C") == (t == 2))
        return S.BASE_US[k] * (0.6 if fast else 1.0) * _noise(r, i, t, f, 0.001)

    path = tmp_path / "dispatch.json"
    tr, d, table, content = recommend(lat, "ACDC" * 8, modes=("graph", "eager"), out=path)
    assert content["profile"] == {"decode-only": "graph@decode-only", "mixed": "eager@mixed"}
    assert set(table["scope"]) == {"graph", "eager", "graph@decode-only", "eager@mixed"}
    profile = dispatch.load(path)
    assert profile.choose(phase="decode", batch=8).tile == 2  # C: graph@decode-only's batch-keyed
    assert profile.choose(step="decode-only", phase="decode", batch=32).tile != 2  # D: tiles 0, 1 alike
    prefill = _rows(tr)[0]
    assert profile.scope_of(prefill) == "eager@mixed"
    assert profile.choose(**prefill).id == table[table["scope"] == "eager@mixed"]["kernel"].iloc[0]
    with pytest.raises(ValueError, match="not in the deployment profile"):
        profile.choose(step="prefill-only", phase="prefill")
    with pytest.raises(ValueError, match=r"keys on \['phase', 'batch'\]; missing \['batch'\]"):
        profile.choose(phase="decode")


def test_a_figure_per_decoder_layer_is_its_share_of_attention_plus_the_layers_gemms():
    feats = S.trace("AC")
    flops, bw, ratio = 5.0e14, 4.0e12, 3.5
    gemm = recommendation.gemm_us(feats, ratio, flops, bw)
    d = 4 * 32  # heads_q x head_dim
    params = d * (d + 2 * 2 * 32) + d * d + 3 * d * ratio * d
    assert gemm[0] == pytest.approx(max(2 * 256 * params / flops, params * 2 / bw) * 1e6)  # A: 256 tokens
    assert gemm[1] == pytest.approx(max(2 * 8 * params / flops, params * 2 / bw) * 1e6)  # C: batch 8
    worth = {"attention": 30.0, "layer": 120.0}
    assert recommendation.per_layer(worth, 10.0) == pytest.approx(2.5)
    assert recommendation.per_layer(worth, 10.0, of_oracle=True) == pytest.approx(10 / 1.1 * 0.25)


def test_layer_columns_follow_the_calibration_and_are_nan_without_one():
    _, _, table, _ = recommend(_fused_tile0, "ABC" * 8)
    row = table[table["scope"] == "graph"].iloc[0]
    assert 0 < row["attention_layer_pct"] < 100
    assert row["speedup_layer_pct"] == pytest.approx((row["speedup"] - 1) * row["attention_layer_pct"])
    assert recommendation.rates(S.calibration().assign(status="skipped")) != recommendation.rates(
        S.calibration()
    )
    assert all(np.isnan(recommendation.rates(None)))


# -- headroom recommend ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def study(tmp_path_factory):
    _, d, table, content = recommend(_c_wants_tile2, "ADCC" * 6)
    return write_study(tmp_path_factory.mktemp("rec") / "results" / "hand", d, table, content)


def test_recommend_prints_three_lines(study, capsys):
    code = cli.main(["--results", str(study.parent), "recommend"])
    out = capsys.readouterr().out.splitlines()
    assert code == 0 and len(out) == 3
    assert out[0].startswith("Verdict: Continue") and out[1].startswith("Ship: graph mode: the batch-keyed")
    assert out[2].startswith("How sure: graph mode: ") and "×" in out[2] and "of a layer" in out[2]


def test_recommend_json_is_the_artifact(study, capsys):
    code = cli.main(["--results", str(study.parent), "recommend", "hand", "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["study"] == "hand"
    assert [r["alternative"] for r in data["rows"]] == ["best_unfused"]


def test_recommend_errors_name_what_is_wrong(study, tmp_path, capsys):
    study = shutil.copytree(study, tmp_path / "copy" / "results" / "hand")
    assert cli.main(["--results", str(study.parent), "recommend", "other"]) == cli.EXIT_USAGE
    missing = tmp_path / "results" / "empty"
    missing.mkdir(parents=True)
    (missing / "decision.parquet").write_bytes((study / "decision.parquet").read_bytes())
    (missing / "decision.parquet.blake3").write_bytes((study / "decision.parquet.blake3").read_bytes())
    assert cli.main(["--results", str(missing.parent), "recommend"]) == cli.EXIT_NOT_RUN
    assert "recommendation.parquet does not exist" in capsys.readouterr().err
    (study / "recommendation.parquet").write_bytes(b"PAR1 corrupt")
    assert cli.main(["--results", str(study.parent), "recommend"]) == cli.EXIT_ERROR
    assert "rerun the pipeline" in capsys.readouterr().err


def test_verify_covers_the_dispatch_table(study, tmp_path):
    from headroom.core import verify

    study = shutil.copytree(study, tmp_path / "v" / "results" / "hand")
    assert study / "dispatch.json" in layout.hashed_files(study.parent)
    assert not [p for p in verify.verify_results(study.parent)[0] if "dispatch.json" in p]
    (study / "dispatch.json").write_text("{}")
    problems, _ = verify.verify_results(study.parent)
    assert any("dispatch.json: BLAKE3 mismatch" in p for p in problems), problems
