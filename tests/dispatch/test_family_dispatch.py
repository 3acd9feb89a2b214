"""A kernel family's dispatch table (issue 32): valid for the GPU and the family (name, version,
source), choosing on the family's declared features (kind, min, max), routing by step, its policies
carrying the family's keys; attention's tables as they were."""

from __future__ import annotations

import copy
import json
import re
import warnings

import pytest

from headroom import dispatch, policies
from headroom.core import artifacts
from tests import family_sets as F
from tests.dispatch import tables

BATCH = {
    "float16|tokens=1|hidden=512": F.SMALL,
    "float16|tokens=4|hidden=512": F.SMALL,
    "float16|tokens=32|hidden=512": F.LARGE,
}
SHAPE = {"tokens": 3, "hidden": 512, "dtype": "float16"}


def _graph(**top) -> dict:
    return tables.family_table(
        {"graph": tables.scope(tables.family_policy("batch-keyed", BATCH, F.MID))}, **top
    )


def _profiled() -> dict:
    decode = tables.scope(tables.family_policy("batch-keyed", BATCH, F.MID))
    mixed = tables.scope(tables.family_policy("global", {}, F.LARGE))
    return tables.family_table(
        {"graph@decode-only": decode, "eager@mixed": mixed},
        profile={"decode-only": "graph@decode-only", "mixed": "eager@mixed"},
    )


def _write(tmp_path, content: dict):
    path = tmp_path / "dispatch.json"
    artifacts.write_file(path, json.dumps(content).encode())
    return path


def _identity() -> dict:
    return {**tables.FAMILY_IDENTITY["hard"], **tables.FAMILY_IDENTITY["soft"]}


def test_the_familys_identity_loads_quietly_and_chooses_on_its_features(tmp_path):
    path = _write(tmp_path, _graph())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = dispatch.load(path, identity=_identity())
    assert table.features() == ("dtype", "tokens", "hidden")
    chosen = table.choose(**SHAPE)  # tokens 3 pads to 4
    assert (chosen.id, chosen.params, chosen.num_warps, chosen.tile) == (F.SMALL, F.CONFIGS[F.SMALL], 1, None)
    assert table.choose(**{**SHAPE, "tokens": 17}).id == F.LARGE  # pads to 32
    assert table.choose(**{**SHAPE, "tokens": 9}).id == F.MID  # pads to 16: unseen, the fallback


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("family", "rmsnorm", "kernel family"),
        ("family_version", "3", "family version"),
        ("family_source_blake3", "0" * 64, "family source hash"),
        ("gpu_name", "NVIDIA A100-SXM4-80GB", "GPU model"),
        ("sm_count", 114, "SM count"),
    ],
)
def test_another_family_version_source_or_gpu_is_refused(tmp_path, key, value, says):
    path = _write(tmp_path, _graph())
    with pytest.raises(
        dispatch.DispatchRefused,
        match=re.escape(f"{says}: the table is for ") + rf".*, this is {re.escape(repr(value))}",
    ):
        dispatch.load(path, identity={**_identity(), key: value})


def test_an_attention_identity_is_refused_for_lacking_the_familys_keys(tmp_path):
    path = _write(tmp_path, _graph())
    attention = {**tables.IDENTITY["hard"], "gpu_name": "NVIDIA H200", "sm_count": 132}
    with pytest.raises(dispatch.DispatchRefused, match=r"identity lacks \['family', 'family_version'"):
        dispatch.load(path, identity=attention)


def test_another_torch_only_warns(tmp_path):
    path = _write(tmp_path, _graph())
    with pytest.warns(dispatch.VersionWarning, match="torch '2.14.0' differs from the study's '2.13.0'"):
        dispatch.load(path, identity={**_identity(), "torch": "2.14.0"})


@pytest.mark.parametrize(
    "given, says",
    [
        ({"tokens": 0}, "feature tokens=0: must be an integer in [1, 4096]"),
        ({"tokens": 4097}, "feature tokens=4097: must be an integer in [1, 4096]"),
        ({"tokens": 3.0}, "feature tokens=3.0: must be an integer"),
        ({"tokens": True}, "feature tokens=True: must be an integer"),
        ({"hidden": 0}, "feature hidden=0: must be an integer >= 1"),
        ({"dtype": 16}, "feature dtype=16: must be a string"),
    ],
)
def test_a_feature_outside_its_declaration_is_refused(tmp_path, given, says):
    table = dispatch.load(_write(tmp_path, _graph()))
    with pytest.raises(dispatch.DispatchError, match=re.escape(says)):
        table.choose(**{**SHAPE, **given})


def test_a_missing_feature_is_named(tmp_path):
    table = dispatch.load(_write(tmp_path, _graph()))
    with pytest.raises(dispatch.DispatchError, match=r"graph \(batch-keyed\).*missing \['hidden'\]"):
        table.choose(tokens=3, dtype="float16")


def test_a_float_feature_takes_finite_numbers_in_its_range():
    spec = dispatch.family_features(
        {"features": {"scale": {"kind": "float", "min": 0.0, "max": 2.0}, "n": {"kind": "int"}}}
    )
    assert spec["scale"].accepts(1) and spec["scale"].accepts(0.5) and not spec["scale"].accepts(2.5)
    assert not spec["scale"].accepts(float("nan")) and not spec["scale"].accepts(True)
    assert spec["n"].accepts(-3) and spec["n"].allowed() == "an integer"  # declared without bounds
    assert spec["shape_key"].kind == "str"


def test_the_profile_routes_by_step_kind_and_serves_prefill_only_as_mixed(tmp_path):
    table = dispatch.load(_write(tmp_path, _profiled()))
    assert table.features() == ("step", "dtype", "tokens", "hidden")
    assert table.choose(**SHAPE, step="decode-only").id == F.SMALL
    assert table.choose(**SHAPE, step="prefill-only").id == F.LARGE
    assert table.choose(**SHAPE, step="mixed").id == F.LARGE
    # a trace row: its integer step is an index; its step_kind routes
    assert table.choose(**SHAPE, step=7, step_kind="decode-only").id == F.SMALL
    with pytest.raises(dispatch.DispatchError, match=r"step 7 is not in the deployment profile"):
        table.choose(**SHAPE, step=7)
    with pytest.raises(dispatch.DispatchError, match=r"routes by `step`"):
        table.choose(**SHAPE, phase="decode")  # attention's phase routes nothing here


def _break(content: dict, where: str) -> dict:
    out = copy.deepcopy(content)
    if where == "no step_of_kind":
        del out["step_of_kind"]
    elif where == "attention hard identity":
        out["identity"] = tables.IDENTITY
    elif where == "a tile":
        next(iter(out["candidates"].values()))["tile"] = 0
    elif where == "no params":
        del next(iter(out["candidates"].values()))["params"]
    elif where == "a feature kind":
        out["family"]["features"]["tokens"]["kind"] = "integer"
    return out


@pytest.mark.parametrize(
    "where, field",
    [
        ("no step_of_kind", r"\(the table itself\): 'step_of_kind' is a required property"),
        ("attention hard identity", r"identity.hard"),
        ("a tile", r"candidates\.BLOCK128-w1-s3\.tile: 0 is not of type 'null'"),
        ("no params", r"candidates\.BLOCK128-w1-s3: 'params' is a required property"),
        ("a feature kind", r"family\.features\.tokens\.kind: 'integer' is not one of"),
    ],
)
def test_a_malformed_family_table_is_refused_naming_the_field(tmp_path, where, field):
    with pytest.raises(dispatch.DispatchError, match=field):
        dispatch.load(_write(tmp_path, _break(_graph(), where)))


def test_a_policy_keyed_on_other_features_than_the_familys_is_refused(tmp_path):
    other = policies.Keying.of_features({"tokens": {"kind": "int", "capture_fixed": True}})
    wrong = tables.family_table(
        {
            "graph": tables.scope(
                tables.family_policy("batch-keyed", {"tokens=4": F.SMALL}, F.MID, keying=other)
            )
        }
    )
    with pytest.raises(
        dispatch.DispatchError, match=r"scopes.graph.policy.keying: not the keys of family 'toy'"
    ):
        dispatch.load(_write(tmp_path, wrong))
    attention_keyed = tables.family_table(
        {
            "eager": tables.scope(
                {"policy": "global", "candidates": [F.MID], "fallback": 0, "table": [[None, 0]]}
            )
        }
    )
    with pytest.raises(dispatch.DispatchError, match=r"policy.keying: not the keys of family 'toy'"):
        dispatch.load(_write(tmp_path, attention_keyed))


def test_an_attention_table_with_a_familys_policy_is_refused(tmp_path):
    policy = tables.family_policy("global", {}, "t0-q_fused")
    with pytest.raises(dispatch.DispatchError, match=r"policy.keying: not the keys of attention"):
        dispatch.load(_write(tmp_path, tables.table({"eager": tables.scope(policy)})))


def test_a_familys_clustered_policy_reads_back_with_its_keys_vector_length(tmp_path):
    from tests.family_sets import KEYING

    policy = policies.make("clustered", KEYING)
    policy.set_centroids([1.0, 9.0], [1.0, 1.0], [[0.0, 0.0], [3.0, 0.0]])
    policy.candidates, policy.table, policy.fallback = (F.SMALL, F.LARGE), {0: 0, 1: 1}, 0
    content = tables.family_table({"eager": tables.scope(policy.to_dict())})
    table = dispatch.load(_write(tmp_path, content))
    assert table.choose(**{**SHAPE, "tokens": 1}).id == F.SMALL
    assert table.choose(**{**SHAPE, "tokens": 4000}).id == F.LARGE
    broken = copy.deepcopy(content)
    broken["scopes"]["eager"]["policy"]["mean"] = [1.0, 9.0, 0.0]
    with pytest.raises(dispatch.DispatchError, match=r"k-means vectors of length \[2, 3\]; its keys give 2"):
        dispatch.load(_write(tmp_path, broken))


def test_an_attention_table_holds_no_family_field():
    """Attention's dispatch.json is as it was: no family, step_of_kind or policy keying written."""
    from tests.recommendation_sets import recommend

    content = recommend(lambda k, t, f, r, m, i: 100.0 * (0.9 if t == 1 else 1.0), "ABC" * 8)[3]
    assert not {"family", "step_of_kind"} & set(content)
    assert not any("keying" in e["policy"] for e in content["scopes"].values())
    assert all("params" not in c for c in content["candidates"].values())
    with pytest.raises(
        dispatch.DispatchError, match=r"field step_of_kind: \"only in a kernel family's table\" was expected"
    ):
        dispatch.validate({**content, "step_of_kind": {}})


def test_a_family_with_a_config_table_ships_a_table_whose_keys_carry_it(tmp_path):
    """A family's config table is in its record and in its policies' keys (Keying.of_record reads
    it back), so the shipped policy's keys are the family's and the table loads and chooses."""
    from headroom.analysis import recommendation
    from headroom.policies import Keying

    table_record = {"feature": "tokens", "entries": [[1, F.SMALL], [32, F.LARGE]],
                    "configs": [[F.SMALL, {}], [F.LARGE, {}]], "source": "t.json", "blake3": "b" * 64}  # fmt: skip
    record = {**F.RECORD, "config_table": table_record}
    keying = Keying.of_record(record)
    assert keying.table == ((1, F.SMALL), (32, F.LARGE)) and keying.table_feature == "tokens"
    scopes = {"graph": tables.scope(tables.family_policy("batch-keyed", BATCH, F.MID, keying=keying))}
    content = tables.family_table(scopes, family=recommendation.family_record(record))
    assert content["family"]["config_table"] == table_record
    table = dispatch.load(_write(tmp_path, content), identity=_identity())
    assert table.choose(**SHAPE).id == F.SMALL
