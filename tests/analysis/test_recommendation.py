"""What the verdict ships (issue 20): the recommendation's kernel, policy or phase pair on surfaces
with known answers, the dispatch table's choices on every trace row, what a figure is worth per
decoder layer, and `headroom recommend`."""

from __future__ import annotations

import json
import re
import shutil
import zlib

import numpy as np
import pandas as pd
import pytest

from headroom import dispatch
from headroom.analysis import recommendation
from headroom.core import artifacts, cli, contracts, layout
from tests import analysis_sets as S
from tests.recommendation_sets import TAMPER, recommend, two_studies, write_study


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


# -- issue 31 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("case", list(TAMPER))
def test_verify_and_recommend_refuse_a_table_the_recommendation_did_not_record(tmp_path, capsys, case):
    """Cases 1-4: a forged table with a fresh sidecar, another study's copied in, a deleted one, a link to
    /etc/passwd with a matching sidecar: `verify` names the file and both hashes, `recommend` (and
    --json) refuses instead of showing a dispatch_blake3 that is not the file's."""
    from headroom.core import verify

    hand, other = two_studies(tmp_path / "results")
    assert not verify.verify_results(hand.parent, "hand", hand)[0]
    tamper, says = TAMPER[case]
    tamper(hand, other)
    problems, _ = verify.verify_results(hand.parent, "hand", hand)
    assert any(re.search(says, p) for p in problems), problems
    code = cli.main(["--results", str(hand.parent), "verify", "--study", "hand"])
    assert code == cli.EXIT_ERROR and re.search(says, capsys.readouterr().out)
    for args in ([], ["--json"]):
        code = cli.main(["--results", str(hand.parent), "recommend", "hand", *args])
        out = capsys.readouterr()
        assert code == cli.EXIT_ERROR and out.out == "" and re.search(says, out.err), out
        assert len(out.err.strip().splitlines()) == 1


def test_recommend_json_without_its_decision_exits_as_recommend_does(study, tmp_path, capsys):
    """Case 7: decision.parquet deleted, `recommend --json` exits 1 with the one-line reason, as plain
    `recommend` does, instead of printing the rows."""
    study = shutil.copytree(study, tmp_path / "c" / "results" / "hand")
    (study / "decision.parquet").unlink()
    said = []
    for args in ([], ["--json"]):
        code = cli.main(["--results", str(study.parent), "recommend", *args])
        out = capsys.readouterr()
        assert code == cli.EXIT_ERROR and out.out == "" and len(out.err.strip().splitlines()) == 1, out
        said.append(out.err)
    assert said[0] == said[1] and "decision.parquet: artifact does not exist" in said[0]


def _native_rows(speedups: dict[str, tuple[float, float, float]]) -> list[dict]:
    return [
        {"alternative": alt, "speedup": s, "speedup_ci_low": lo, "speedup_ci_high": hi}
        for alt, (s, lo, hi) in speedups.items()
    ]


def test_a_native_faster_than_every_kernel_of_ours_is_named():
    """Case 29 (the rule): a native whose speedup (ours over it) is below 1 with its CI; the fastest one."""
    nan = float("nan")
    rows = _native_rows(
        {
            "best_unfused": (0.5, 0.4, 0.6),  # not a native
            "native-sdpa-math": (0.290, 0.2, 0.4),
            "native-sdpa-flash": (0.7, 0.5, 1.1),  # its CI reaches 1: not shown faster
            "native-flex": (0.5, nan, nan),  # no CI: the estimate alone
        }
    )
    assert recommendation.faster_native(rows)["alternative"] == "native-sdpa-math"
    assert recommendation.faster_native(rows[2:3]) is None
    assert recommendation.faster_native(rows[3:])["alternative"] == "native-flex"
    assert recommendation.faster_native(_native_rows({"native-flex": (1.2, 1.1, 1.3)})) is None


def test_recommend_and_the_report_say_when_a_native_is_the_faster_choice(study):
    """Case 29 (what is said): `headroom recommend`'s ship line and the report's answer name the native
    and the figure; the rows keep every column and add faster_native, faster_native_speedup."""
    from headroom.core import recommend as text
    from headroom.report import ship
    from headroom.report.sections import answer

    table = artifacts.read(study / "recommendation.parquet")
    assert {"faster_native", "faster_native_speedup"} <= set(table.columns)
    assert set(table["faster_native"]) == {""} and table["faster_native_speedup"].isna().all()
    native = table.iloc[[0]].assign(
        alternative="native-sdpa-math", speedup=0.290, speedup_ci_low=0.2, speedup_ci_high=0.4
    )
    table = pd.concat([table, native], ignore_index=True).assign(
        faster_native="native-sdpa-math", faster_native_speedup=0.290
    )
    said = text.lines(table, "No decision. Because.")[1]
    # ours is shipped here (a policy): the native faster than our best kernel is named beside it
    assert (
        "but native-sdpa-math runs faster than our best kernel: ours runs at 0.290× [0.200, 0.400] its speed"
        in said
    )
    (x,) = ship.what_to_ship(table, None, None)
    assert x.faster_native.alternative == "native-sdpa-math"
    assert "But native-sdpa-math runs faster than our best kernel in graph: " in answer.ship_line(x)
    assert "0.290× [0.200, 0.400] its speed" in answer.ship_line(x)
