"""What a kernel family's verdict ships (issue 32): the recommendation keyed on the family's declared
features, its attention columns and decoder-layer model null, and a dispatch table about the
family (its identity, its candidates' params, its policies' keys) that chooses as the engine's
refit policy on every trace row."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from headroom import dispatch, policies
from headroom.analysis import recommendation
from headroom.core import artifacts, contracts
from headroom.decide import engine, measured
from tests import family_sets as F


@pytest.fixture(scope="module")
def made():
    return F.recommend()


def _scope(table: pd.DataFrame, scope: str) -> pd.Series:
    return table[table["scope"] == scope].iloc[0]


def test_the_table_meets_its_contract_with_the_attention_columns_null(made):
    _, _, table, _ = made
    contracts.check("recommendation", artifacts.to_table(table))
    assert set(table["scope"]) == {"eager", "graph", "graph@decode-only", "eager@mixed"}
    for c in ("tile", "block_m", "block_n", "rope", "generation", "fused", "heads_q", "heads_kv", "head_dim", "dtype",
              "kernel_source_blake3"):  # fmt: skip
        assert table[c].isna().all(), c
    for c in recommendation.LAYER_COLUMNS:  # attention's decoder-layer model does not apply
        assert table[c].isna().all(), c
    assert set(table["backend"]) == {"family"}
    assert set(table["kernel_family"]) == {"toy"} and set(table["family_version"]) == {"2"}
    assert set(table["family_source_blake3"]) == {"f" * 64}
    for r in table.itertuples():  # the shipped candidate's launch: its params, warps and stages
        assert json.loads(r.params) == F.CONFIGS[r.kernel]
        assert r.num_warps == F.CONFIGS[r.kernel]["num_warps"]
        assert r.num_stages == F.CONFIGS[r.kernel]["num_stages"]
    assert (table["gpu_name"] == "NVIDIA H200").all() and (table["torch"] == "2.13.0").all()


def test_the_graph_mode_ships_the_capture_keyed_policy_on_the_familys_features(made):
    tr, d, table, content = made
    row = _scope(table, "graph")
    pg = d[(d["mode"] == "graph") & (d["figure"] == "policy_gain")].iloc[0]
    assert (row["verdict"], row["ship"], row["policy"]) == ("continue", "policy", "batch-keyed")
    assert (row["expected_gain_pct"], row["expected_gain_ci_low"]) == (pg["estimate"], pg["ci_low"])
    data = content["scopes"]["graph"]["policy"]
    assert data["features"] == ["dtype", "tokens", "hidden"]  # the category, then the capture-fixed ints
    assert policies.Keying.from_dict(data["keying"]) == F.KEYING
    assert {k for k, _ in data["table"]} >= {"float16|tokens=1|hidden=512", "float16|tokens=4|hidden=512"}


def test_the_loaded_table_chooses_as_the_engines_refit_policy_on_every_row(made, tmp_path):
    tr, d, _, content = made
    table = dispatch.load(_write(tmp_path, content), mode="graph")
    opts, costs, modes = measured.checked_modes(
        tr, F.timings(tr, 0.3), None, 0.5, F.FAST, None, None, F.KEYING
    )
    md = {m.mode: m for m in modes}["graph"]
    L = engine.layout(md, opts, costs, 0.5, 0)
    arm = d[(d["mode"] == "graph") & (d["figure"] == "policy_gain")].iloc[0]["selected_fusion"]
    fitted = recommendation.refit(md, L, opts, "batch-keyed", arm, 0)
    for shape in md.features.to_dict("records"):  # a trace row as it is: its integer step, its step_kind
        assert table.choose(**shape).id == fitted.lookup(shape)
    assert table.choose(tokens=3, hidden=512, dtype="float16").id == F.SMALL
    assert table.choose(tokens=40, hidden=512, dtype="float16").id == F.LARGE
    unseen = table.choose(tokens=4000, hidden=512, dtype="float16")  # never seen: the fallback
    assert unseen.id == fitted.candidates[fitted.fallback]
    assert unseen.params == F.CONFIGS[unseen.id] and unseen.tile is None and unseen.backend == "family"


def test_the_profile_routes_by_step_and_a_prefill_only_step_is_served_as_mixed(made, tmp_path):
    _, _, table, content = made
    assert content["profile"] == {"decode-only": "graph@decode-only", "mixed": "eager@mixed"}
    assert content["step_of_kind"] == dict(measured.STEP_KIND_OF_FAMILY_STEP)
    loaded = dispatch.load(_write(tmp_path, content))
    shape = {"tokens": 3, "hidden": 512, "dtype": "float16"}
    for step, scope in (
        ("decode-only", "graph@decode-only"),
        ("mixed", "eager@mixed"),
        ("prefill-only", "eager@mixed"),
    ):
        assert loaded.scope_of({**shape, "step": step}) == scope
        assert loaded.choose(**shape, step=step).id == _scope(table, scope)["kernel"]
    assert loaded.scope_of({**shape, "step": 12, "step_kind": "prefill-only"}) == "eager@mixed"
    with pytest.raises(dispatch.DispatchError, match="routes by `step`"):
        loaded.choose(**shape)
    with pytest.raises(dispatch.DispatchError, match="not in the deployment profile"):
        loaded.choose(**shape, step="decode")


def test_its_identity_is_the_gpus_and_the_familys(made):
    _, _, _, content = made
    assert content["identity"]["hard"] == {
        "gpu_name": "NVIDIA H200",
        "sm_count": 132,
        "family": "toy",
        "family_version": "2",
        "family_source_blake3": "f" * 64,
    }
    assert content["identity"]["soft"] == {"driver": "580.1", "torch": "2.13.0", "triton": "3.6.0"}
    assert content["family"] == {k: F.RECORD[k] for k in ("name", "version", "spec", "source_blake3")} | {
        "features": {n: F.RECORD["features"][n] for n in F.RECORD["feature_order"]},
        "feature_order": F.RECORD["feature_order"],
    }
    assert list(content["candidates"]) == sorted(content["candidates"])
    for cid, facts in content["candidates"].items():
        assert facts["params"] == F.CONFIGS[cid] and facts["tile"] is None and facts["fused"] is None


def test_an_attention_record_is_the_attention_table(made):
    """family={'name': 'attention'} (attention's trace provenance) builds attention's table."""
    from headroom.decide import decision, figures
    from tests import analysis_sets as S
    from tests.recommendation_sets import FAST, META

    tr = S.trace("ABC" * 8)
    tm = S.timings(tr, lambda k, t, f, r, m, i: S.BASE_US[k] * (0.8 if f else 1.0) * (1.05 if t else 1.0))
    d = decision.decide(figures.study_figures(tr, tm, **FAST), None, S.environment(), min_test_invocations=5)
    args = (d, tr, tm, None, S.candidates(), S.calibration(), S.environment())
    kw = dict(meta=META, policies={"train_fraction": 0.5, **FAST}, intermediate_ratio=3.5)
    plain, content = recommendation.build(*args, **kw)
    tagged, tagged_content = recommendation.build(*args, **kw, family={"name": "attention"})
    pd.testing.assert_frame_equal(plain, tagged)
    assert content == tagged_content
    assert "family" not in content and "step_of_kind" not in content
    assert not any("keying" in e["policy"] for e in content["scopes"].values())
    assert not set(plain.columns) & {"kernel_family", "family_version", "family_source_blake3", "params"}


def test_a_decision_without_kernel_rows_ships_the_engines_global_kernel(made):
    _, d, table, _ = made
    # no fused arm, no native: no kernel_vs_ rows; the gap's row names the global kernel
    assert not d["figure"].str.startswith("kernel_vs_").any()
    gap = d[(d["mode"] == "graph@decode-only") & (d["figure"] == "gap_to_oracle")].iloc[0]
    assert (gap["kernel"], gap["runs_agree"]) == (F.SMALL, 3)
    assert d.loc[d["figure"] != "gap_to_oracle", "kernel"].isna().all()
    row = _scope(table, "graph@decode-only")
    assert (row["ship"], row["kernel"], row["runs_agree"]) == ("kernel", F.SMALL, 3)
    assert row["alternative"] == "" and row["faster_native"] == ""  # no alternative to compare with


def _write(tmp_path, content: dict):
    path = tmp_path / "dispatch.json"
    path.write_text(json.dumps(content, allow_nan=False))
    return path


def test_headroom_recommend_states_no_per_layer_figure_for_a_family(made):
    from headroom.core import recommend

    _, _, table, _ = made
    said = recommend.lines(table[table["scope"] == "graph"], "Continue in graph mode.")
    assert (
        said[1]
        == f"Ship: graph mode: the batch-keyed dispatch policy (dispatch.json; global kernel {F.LARGE}, 3/3 runs agree)"
    )
    assert said[2].startswith("How sure: graph mode: expected gain +") and "layer" not in said[2]
