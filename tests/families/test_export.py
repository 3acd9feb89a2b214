"""`headroom export` (issue 32): an autotune family's dispatch table as Triton configs per key range,
in JSON and as a Python file of triton.Config; what is not one is refused in one line."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

from headroom import dispatch, policies
from headroom.core import artifacts, cli
from headroom.families import export
from tests import family_sets as F
from tests.dispatch import tables

BATCH = {
    "float16|tokens=1|hidden=512": F.SMALL,
    "float16|tokens=4|hidden=512": F.SMALL,
    "float16|tokens=32|hidden=512": F.LARGE,
    "float16|tokens=600|hidden=512": F.LARGE,  # above the largest capture size: its own key
}
SHAPE = {"tokens": 3, "hidden": 512, "dtype": "float16"}


def _table(name: str = "batch-keyed", keys: dict | None = None, fallback: str = F.MID) -> dict:
    policy = tables.family_policy(name, BATCH if keys is None else keys, fallback)
    return tables.family_table({"graph": tables.scope(policy)})


def _file(tmp_path: Path, content: dict) -> Path:
    path = tmp_path / "dispatch.json"
    artifacts.write_file(path, json.dumps(content).encode())
    return path


def _export(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(["export", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_batch_keyed_exports_each_padded_range_with_its_config(tmp_path, capsys):
    code, out, err = _export(capsys, str(_file(tmp_path, _table())))
    assert code == 0, err
    data = json.loads(out)
    assert (data["format"], data["study"], data["family"]["name"], data["family"]["version"]) == (
        "triton-configs",
        "hand",
        "toy",
        "2",
    )
    graph = data["scopes"]["graph"]
    assert (graph["policy"], graph["keys"]) == ("batch-keyed", ["dtype", "tokens", "hidden"])
    got = [(e["key"]["tokens"], e["candidate"]) for e in graph["configs"]]
    # tokens 1 is its own capture size (min 1 below it), 3..4 pad to 4, 17..32 to 32, 600 is exact
    assert got == [([1, 1], F.SMALL), ([3, 4], F.SMALL), ([17, 32], F.LARGE), ([600, 600], F.LARGE)]
    assert all(e["key"]["dtype"] == "float16" and e["key"]["hidden"] == [512, 512] for e in graph["configs"])
    small = graph["configs"][0]["config"]
    assert small == {"kwargs": {"BLOCK": 128}, "num_warps": 1, "num_stages": 3, "num_ctas": 1}
    assert graph["default"] == {
        "candidate": F.MID,
        "config": {"kwargs": {"BLOCK": 512}, "num_warps": 2, "num_stages": 3, "num_ctas": 1},
    }


def test_every_range_holds_what_the_table_chooses_at_its_ends(tmp_path):
    """The export and headroom.dispatch agree: at each range's low and high end the loaded table
    chooses the exported candidate; between the ranges, the default."""
    path = _file(tmp_path, _table())
    loaded = dispatch.load(path)
    graph = export.export(*dispatch.read_table(path))["scopes"]["graph"]
    for e in graph["configs"]:
        for tokens in e["key"]["tokens"]:
            assert loaded.choose(**{**SHAPE, "tokens": tokens}).id == e["candidate"], tokens
    for tokens in (5, 16, 33, 599):  # keys the fit never saw
        assert loaded.choose(**{**SHAPE, "tokens": tokens}).id == graph["default"]["candidate"]


def test_the_python_file_defines_triton_configs_and_config_for(tmp_path, capsys):
    triton = pytest.importorskip("triton")
    out = tmp_path / "toy_configs.py"
    code, said, err = _export(capsys, str(_file(tmp_path, _table())), "--format", "python", "--out", str(out))
    assert code == 0, err
    assert said.startswith(f"wrote {out}: 1 scope(s), 4 key range(s)")
    spec = importlib.util.spec_from_file_location("toy_configs", out)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pairs = module.CONFIGS["graph"]
    assert pairs[0][0] == {"dtype": "float16", "tokens": (1, 1), "hidden": (512, 512)}
    assert pairs[-1][0] is None and all(isinstance(c, triton.Config) for _, c in pairs)
    cfg = module.config_for("graph", **SHAPE)
    assert (cfg.kwargs, cfg.num_warps, cfg.num_stages) == ({"BLOCK": 128}, 1, 3)
    assert module.config_for("graph", **{**SHAPE, "tokens": 20}).kwargs == {"BLOCK": 2048}
    assert module.config_for("graph", **{**SHAPE, "tokens": 9}).kwargs == {"BLOCK": 512}  # the default
    assert module.FAMILY["name"] == "toy" and module.STEP_OF_KIND["prefill-only"] == "mixed"


def _scope(tmp_path: Path, content: dict) -> dict:
    return export.export(*dispatch.read_table(_file(tmp_path, content)))["scopes"]["graph"]


def test_bucketed_exact_key_and_global_are_exported_too(tmp_path):
    bucketed = _table(
        "bucketed", {"float16|tokens=8|hidden=512": F.SMALL, "float16|tokens=1|hidden=512": F.LARGE}
    )
    graph = _scope(tmp_path, bucketed)
    assert [(e["key"]["tokens"], e["key"]["hidden"]) for e in graph["configs"]] == [
        ([1, 1], [257, 512]),
        ([5, 8], [257, 512]),
    ]
    exact = _table("exact-key", {"tokens=3|hidden=512|dtype=float16": F.SMALL})
    graph = _scope(tmp_path, exact)
    assert graph["configs"][0]["key"] == {"tokens": 3, "hidden": 512, "dtype": "float16"}
    glob = _table("global", {}, F.LARGE)
    graph = _scope(tmp_path, glob)
    assert graph["configs"] == [] and graph["default"]["candidate"] == F.LARGE


def test_a_study_folder_exports_every_scope_of_its_table(tmp_path, capsys):
    from tests.recommendation_sets import write_study

    _, d, table, content = F.recommend()
    folder = write_study(tmp_path / "results" / "toy", d, table, content)
    code, out, err = _export(capsys, str(folder))
    assert code == 0, err
    data = json.loads(out)
    assert set(data["scopes"]) == set(content["scopes"]) and data["profile"] == content["profile"]
    assert data["scopes"]["graph"]["policy"] == "batch-keyed"
    loaded = dispatch.load(folder, mode="graph")
    for e in data["scopes"]["graph"]["configs"]:
        assert loaded.choose(**{**SHAPE, "tokens": e["key"]["tokens"][1]}).id == e["candidate"]


@pytest.mark.parametrize(
    "case, says",
    [
        ("attention", "study 'hand': an attention table, not a kernel family's"),
        ("callables", "family 'toy': candidate 'mine' is not a Triton config"),
        ("clustered", "scope eager: policy clustered keys on k-means clusters, not on ranges"),
    ],
)
def test_what_is_not_an_autotune_familys_ranged_table_is_refused_in_one_line(tmp_path, capsys, case, says):
    if case == "attention":
        content = tables.global_table()
    elif case == "callables":
        cands = tables.family_candidates({"mine": {}})
        policy = tables.family_policy("global", {}, "mine")
        content = tables.family_table({"eager": tables.scope(policy)}, cands)
    else:
        policy = policies.make("clustered", F.KEYING)
        policy.set_centroids([1.0, 9.0], [1.0, 1.0], [[0.0, 0.0], [3.0, 0.0]])
        policy.candidates, policy.table, policy.fallback = (F.SMALL, F.LARGE), {0: 0, 1: 1}, 0
        content = tables.family_table({"eager": tables.scope(policy.to_dict())})
    code, out, err = _export(capsys, str(_file(tmp_path, content)))
    assert code == cli.EXIT_ERROR and out == ""
    assert err.count("\n") == 1 and says in err and "Traceback" not in err


def test_a_config_id_that_does_not_name_its_warps_and_stages_is_not_an_autotune_config():
    assert export.triton_config("BLOCK128-w1-s3", F.CONFIGS[F.SMALL]) is not None
    assert export.triton_config("fast", F.CONFIGS[F.SMALL]) is None
    assert export.triton_config("w1-s3", {"num_warps": True, "num_stages": 3}) is None


def test_a_folder_without_a_table_is_not_run(tmp_path, capsys):
    code, _, err = _export(capsys, str(tmp_path))
    assert code == cli.EXIT_NOT_RUN and "holds no dispatch.json" in err


def test_a_forged_table_is_refused_as_load_refuses_it(tmp_path, capsys):
    content = _table()
    path = _file(tmp_path, content)
    forged = copy.deepcopy(content)
    forged["scopes"]["graph"]["policy"]["fallback"] = 0
    path.write_text(json.dumps(forged))  # its sidecar no longer matches
    code, _, err = _export(capsys, str(path))
    assert code == cli.EXIT_ERROR and "cannot export:" in err and "BLAKE3" in err
