"""The dispatch table a server loads (issue 20): its refusals and warnings, a corrupt or foreign file,
no torch on the path to a choice, and a chosen candidate run through kernels.deploy matching the
float64 reference on the interpreter."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from headroom import dispatch, policies
from headroom.core import artifacts
from tests.dispatch import tables
from tests.recommendation_sets import TAMPER, recommend, two_studies

ROOT = Path(__file__).resolve().parents[2]


def _surface(k, t, f, r, m, i):  # decode C wants tile 2 in graph mode: a batch-keyed policy ships
    from tests import analysis_sets as S

    fast = (k == "C" and t == 2) or (k != "C" and t == 0)
    return S.BASE_US[k] * (0.6 if fast else 1.0) * (1.0 + 0.002 * ((r * 7 + i * 3 + t) % 5 - 2))


@pytest.fixture(scope="module")
def content():
    return recommend(_surface, "ADCC" * 6)[3]


def _write(tmp_path: Path, content: dict, sidecar: bool = True) -> Path:
    path = tmp_path / "dispatch.json"
    data = json.dumps(content).encode()
    artifacts.write_file(path, data) if sidecar else path.write_bytes(data)
    return path


def _identity(content: dict) -> dict:
    return {**content["identity"]["hard"], **content["identity"]["soft"]}


def test_the_identity_it_was_recorded_on_loads_quietly(content, tmp_path):
    path = _write(tmp_path, content)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        table = dispatch.load(path, mode="graph", identity=_identity(content))
    assert table.choose(phase="decode", batch=8).tile == 2


@pytest.mark.parametrize(
    "key, value, says",
    [
        ("gpu_name", "NVIDIA A100-SXM4-80GB", "GPU model"),
        ("sm_count", 114, "SM count"),
        ("heads_q", 32, "partition (heads_q)"),
        ("heads_kv", 8, "partition (heads_kv)"),
        ("head_dim", 128, "partition (head_dim)"),
        ("dtype", "bfloat16", "dtype"),
        ("kernel_source_blake3", "0" * 64, "kernel source hash"),
    ],
)
def test_another_machine_partition_dtype_or_kernel_source_is_refused(content, tmp_path, key, value, says):
    path = _write(tmp_path, content)
    with pytest.raises(
        dispatch.DispatchRefused,
        match=re.escape(f"{says}: the table is for ") + rf".*, this is {re.escape(repr(value))}",
    ):
        dispatch.load(path, mode="graph", identity={**_identity(content), key: value})


def test_an_identity_without_a_hard_key_is_refused(content, tmp_path):
    ident = _identity(content)
    del ident["sm_count"]
    with pytest.raises(dispatch.DispatchRefused, match=r"identity lacks \['sm_count'\]"):
        dispatch.load(_write(tmp_path, content), mode="graph", identity=ident)


@pytest.mark.parametrize("key", dispatch.SOFT)
def test_other_driver_torch_or_triton_versions_only_warn(content, tmp_path, key):
    path = _write(tmp_path, content)
    with pytest.warns(dispatch.VersionWarning, match=rf"{key} '9.9' differs from the study's"):
        table = dispatch.load(path, mode="graph", identity={**_identity(content), key: "9.9"})
    assert table.choose(phase="decode", batch=8).tile == 2


@pytest.mark.parametrize(
    "edit, says",
    [
        (lambda p: p.write_text("{not json"), "not a dispatch table"),
        (lambda p: p.write_text(json.dumps({"schema_version": 99})), "dispatch schema 99"),
        (lambda p: p.unlink(), "no dispatch table here"),
    ],
)
def test_a_corrupt_foreign_or_missing_table_is_refused_with_the_reason(content, tmp_path, edit, says):
    path = _write(tmp_path, content, sidecar=False)
    edit(path)
    if path.exists():
        artifacts.record_hash(path)
    with pytest.raises(dispatch.DispatchError, match=says):
        dispatch.load(path)


def test_bytes_that_differ_from_their_sidecar_are_refused(content, tmp_path):
    path = _write(tmp_path, content)
    path.write_text(path.read_text().replace("batch-keyed", "exact-key"))
    with pytest.raises(dispatch.DispatchError, match="BLAKE3"):
        dispatch.load(path, mode="graph")


def test_a_malformed_policy_or_unknown_scope_is_refused(content, tmp_path):
    bad = copy.deepcopy(content)
    bad["scopes"]["graph"]["policy"]["table"] = [["decode|b8", 7]]
    with pytest.raises(dispatch.DispatchError, match="out of range"):
        dispatch.load(_write(tmp_path, bad), mode="graph")
    with pytest.raises(dispatch.DispatchError, match=r"no scope 'eager'; it holds \['graph'\]"):
        dispatch.load(_write(tmp_path, content), mode="eager")


def test_loading_and_choosing_import_neither_torch_nor_sklearn(content, tmp_path):
    path = _write(tmp_path, content)  # verified against its sidecar on the way
    code = (
        "import sys; from headroom import dispatch; "
        f"t = dispatch.load({str(path)!r}, mode='graph'); c = t.choose(phase='decode', batch=8); "
        "bad = [m for m in ('torch', 'sklearn', 'scipy', 'triton') if m in sys.modules]; "
        "print(c.id, bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env={"PYTHONPATH": str(ROOT)}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    chosen, bad = out.stdout.split()
    assert chosen.startswith("t2-") and bad == "[]", out.stdout


def test_the_kernel_source_hash_covers_kernels_only_and_follows_an_edit():
    code = {"kernels/a.py": "1" * 64, "headroom/x.py": "2" * 64}
    h = dispatch.kernel_source_blake3(code)
    assert h == dispatch.kernel_source_blake3({**code, "headroom/x.py": "3" * 64})
    assert h != dispatch.kernel_source_blake3({**code, "kernels/a.py": "4" * 64})
    with pytest.raises(dispatch.DispatchError, match="no kernels/ source"):
        dispatch.kernel_source_blake3({"headroom/x.py": "2" * 64})
    current = dispatch.current_kernel_code(ROOT)
    assert "kernels/__init__.py" in current and all(p.startswith("kernels/") for p in current)


# -- issue 31: what load() checks, from the file alone and from its study folder ----------------------
def _one_line(exc) -> str:
    text = str(exc.value)
    assert "\n" not in text and len(text) < 600, text
    return text


def test_a_table_of_one_scope_and_no_profile_loads_that_scope(tmp_path):
    """Case 21: a CPU study (eager only) has no deployment profile and one scope: load() answers for it."""
    path = tmp_path / "dispatch.json"
    path.write_text(json.dumps(tables.global_table("t0-unfused", scopes=("eager",))))
    table = dispatch.load(path)
    assert table.mode == "eager" and table.choose(phase="prefill").id == "t0-unfused"
    path.write_text(json.dumps(tables.global_table("t0-unfused", scopes=("eager", "graph"))))
    with pytest.raises(
        dispatch.DispatchError, match=r"no deployment profile; load one of its scopes \['eager', 'graph'\]"
    ):
        dispatch.load(path)


def test_a_native_candidate_is_a_route_target(tmp_path):
    """Issue 33, item 3: a table that routes decodes to a native (cuDNN SDPA) and prefills to ours
    loads and chooses each; the chosen candidate says it is native (a server runs it through torch)."""
    policy = {"policy": "phase-keyed", "candidates": ["t0-q_fused", "native-sdpa-cudnn"], "fallback": 0,
              "table": [["prefill", 0], ["decode", 1]]}  # fmt: skip
    entry = {**tables.scope(policy), "kernel": "native-sdpa-cudnn"}
    path = tmp_path / "dispatch.json"
    path.write_text(json.dumps(tables.table({"eager": entry}, {**tables.CANDIDATES, **tables.NATIVE})))
    table = dispatch.load(path)
    native, ours = table.choose(phase="decode", batch=8), table.choose(phase="prefill", batch=1)
    assert (native.id, native.native, native.backend, native.tile, native.rope) == (
        "native-sdpa-cudnn", True, "sdpa-cudnn", -1, "unfused"
    )  # fmt: skip
    assert (ours.id, ours.native) == ("t0-q_fused", False)
    claimed = {**tables.NATIVE["native-sdpa-cudnn"], "backend": "triton"}  # one of ours needs a tile
    path.write_text(
        json.dumps(tables.table({"eager": entry}, {**tables.CANDIDATES, "native-sdpa-cudnn": claimed}))
    )
    with pytest.raises(dispatch.DispatchError, match="tile: -1 is less than the minimum of 0"):
        dispatch.load(path)


def _set(*keys, value):
    """An edit of the table: the value at keys (a key None: the first key there) set to value."""

    def edit(table):
        node = table
        for k in keys[:-1]:
            node = node[next(iter(node)) if k is None else k]
        node[next(iter(node)) if keys[-1] is None else keys[-1]] = value

    return edit


def _clustered(content):
    content["scopes"]["graph"]["policy"] = {
        "policy": "clustered",
        "features": list(policies.make("clustered").features),
        "candidates": [next(iter(content["candidates"]))],
        "fallback": 0,
        "table": [[0, 0]],
        "mean": [0.0] * 6,  # one short of the k-means vector's 7
        "std": [1.0] * 7,
        "centroids": [[0.0] * 7],
    }


@pytest.mark.parametrize(
    "edit, field",
    [
        (_set("identity", "hard", value=[]), "field identity.hard: [] is not of type 'object'"),
        (
            _set("profile", value={"decode-only": "nope"}),
            "field profile.decode-only: scope 'nope' is not among",
        ),
        (_set("step_of_phase", value="abc"), "field step_of_phase: 'abc' is not of type 'object'"),
        (_set("scopes", "graph", "policy", "fallback", value=0.9), "field scopes.graph.policy.fallback: 0.9"),
        (_set("candidates", None, "block_m", value="64"), "block_m: '64' is not of type 'integer', 'null'"),
        (_set("candidates", None, "rope", value=["fused"]), "rope: ['fused'] is not one of"),
        (_set("schema_version", value=True), "dispatch schema True (field schema_version)"),
        (_set("schema_version", value=1.0), "dispatch schema 1.0 (field schema_version)"),
        (
            _set("identity", "hard", "sm_count", value="132"),
            "field identity.hard.sm_count: '132' is not of type",
        ),
        (_set("identity", "hard", "kernel_source_blake3", value="k" * 64), "kernel_source_blake3: 'kkk"),
        (
            _set("scopes", "graph", "policy", "table", value=[["decode|b8"]]),
            "policy.table[0]: ['decode|b8'] is too short",
        ),
        (
            _set("scopes", "graph", "policy", "policy", value="oracle"),
            "policy.policy: 'oracle' is not one of",
        ),
        (
            _set("scopes", "graph", "policy", "features", value=["phase"]),
            "policy.features: ['phase'] is not batch-keyed's",
        ),
        (
            _set("scopes", "graph", "kernel", value="t9-fused"),
            "field scopes.graph: names candidates ['t9-fused']",
        ),
        (_set("scopes", "graph", "expected_gain_pct", value=[0.0]), "expected_gain_pct: [0.0] is too short"),
        (_set("candidates", None, "generation", value=0), "generation: 0 is less than the minimum of 1"),
        (_set("candidates", None, "block_m", value=0), "block_m: 0 is less than the minimum of 1"),
        (_set("verdict", value="ship it"), "field verdict: 'ship it' is not one of"),
        (
            _set("forged", value=1),
            "field (the table itself): Additional properties are not allowed ('forged'",
        ),
        (_set("scopes", value={}), "field scopes: {} should be non-empty"),
        (_clustered, "field scopes.graph.policy.mean: [0.0, 0.0, 0.0, 0.0, 0.0, 0.0] is too short"),
    ],
)
def test_every_malformed_field_is_one_dispatch_error_naming_it(content, tmp_path, edit, field):
    """Case 5: the whole table is validated against dispatch.SCHEMA (and what a schema cannot say) at load."""
    bad = copy.deepcopy(content)
    edit(bad)
    with pytest.raises(dispatch.DispatchError) as exc:
        dispatch.load(_write(tmp_path, bad), mode="graph")
    assert str(tmp_path / "dispatch.json") in _one_line(exc) and field in str(exc.value), str(exc.value)


@pytest.mark.parametrize(
    "text, says",
    [
        ("[" * 200_000 + "]" * 200_000, "JSON nested 200000 deep; a table nests at most 64"),
        ('{"a": ' * 100_000 + "1" + "}" * 100_000, "JSON nested 100000 deep"),
        ('{"schema_version": 1, "study": NaN}', "not a dispatch table (JSON: NaN is not a JSON number"),
        ('{"schema_version": 1, "schema_version": 1}', "duplicate key 'schema_version'"),
        ('"a string"', "dispatch schema 'str'"),
    ],
)
def test_a_bomb_or_non_strict_json_is_refused_before_or_while_parsing(tmp_path, text, says):
    path = tmp_path / "dispatch.json"
    path.write_text(text)
    with pytest.raises(dispatch.DispatchError) as exc:
        dispatch.load(path)
    assert says in _one_line(exc)


def test_nesting_depth_leaves_strings_out_and_a_table_past_the_size_limit_is_refused(
    content, tmp_path, monkeypatch
):
    assert dispatch.nesting_depth(b'{"a": "[[[[{{", "b": [[1]]}') == 3
    assert dispatch.nesting_depth(b'["\\"[[[", [2], "\\\\"]') == 2
    assert dispatch.nesting_depth(b"[" * 3_000_000, chunk=1 << 20) == 3_000_000
    assert dispatch.nesting_depth(json.dumps(content).encode()) <= 8 < dispatch.MAX_DEPTH
    path = _write(tmp_path, content)
    monkeypatch.setattr(dispatch, "MAX_BYTES", path.stat().st_size - 1)
    with pytest.raises(dispatch.DispatchError, match=r"bytes; a dispatch table is at most"):
        dispatch.load(path, mode="graph")


def test_the_schema_is_one_statement_that_the_writers_output_meets(content):
    """What the recommendation writes validates (recommendation.build also validates before returning);
    the schema's lists are the code's: HARD, CANDIDATE_FIELDS, the candidates stage's RoPE placements."""
    import jsonschema

    from headroom.families.attention import candidates

    jsonschema.Draft202012Validator.check_schema(dispatch.SCHEMA)
    dispatch.validate(content)
    assert dispatch.HARD_SCHEMA["required"] == list(dispatch.HARD)
    assert dispatch.FAMILY_HARD_SCHEMA["required"] == list(dispatch.FAMILY_HARD)
    assert dispatch.ROPE_PLACEMENTS == candidates.ROPE_PLACEMENTS
    fields = [f.name for f in dataclasses.fields(dispatch.Candidate)]  # params: a kernel family's
    assert sorted(fields) == sorted(["id", "fused", *dispatch.CANDIDATE_FIELDS, "params"])
    for made in (tables.global_table(), tables.table({"eager": tables.scope(_phase_keyed())})):
        dispatch.validate(made)


def _phase_keyed():
    return {"policy": "phase-keyed", "candidates": ["t0-q_fused", "t0-unfused"], "fallback": 0,
            "table": [["prefill", 0], ["decode", 1]]}  # fmt: skip


# -- choose(): every feature in its range ----------------------------------------------------------
def _bucketed_and_clustered(tmp_path):
    bucketed = {"policy": "bucketed", "candidates": ["t0-q_fused", "t0-unfused"], "fallback": 0,
                "table": [["decode|q1|kv1024|b8", 1]]}  # fmt: skip
    # log2 vectors of SHAPE and of SHAPE at batch 2**20, kv_len 2**24 (unit scale): their clusters 0 and 1
    centroids = [[3.0, 0.0, 10.0, 2.0, 1.0, 5.0, 0.0], [20.0, 0.0, 24.0, 2.0, 1.0, 5.0, 0.0]]
    clustered = policies.make("clustered").set_centroids([0.0] * 7, [1.0] * 7, centroids)
    clustered.candidates, clustered.table, clustered.fallback = ("t0-q_fused", "t0-unfused"), {0: 0, 1: 1}, 0
    made = tables.table({"eager": tables.scope(bucketed), "graph": tables.scope(clustered.to_dict())})
    path = tmp_path / "dispatch.json"
    path.write_text(json.dumps(made))
    return dispatch.load(path, mode="eager"), dispatch.load(path, mode="graph")


SHAPE = {
    "phase": "decode",
    "batch": 8,
    "q_len": 1,
    "kv_len": 1024,
    "heads_q": 4,
    "heads_kv": 2,
    "head_dim": 32,
}
INT_RANGE = re.escape(f"an integer in [1, {dispatch.INT32_MAX}]")


@pytest.mark.parametrize(
    "feature, value, says",
    [
        ("batch", -5, f"feature batch=-5: must be {INT_RANGE}"),
        ("batch", 0, f"feature batch=0: must be {INT_RANGE}"),
        ("batch", True, f"feature batch=True: must be {INT_RANGE}"),
        ("batch", "abc", f"feature batch='abc': must be {INT_RANGE}"),
        ("batch", math.inf, f"feature batch=inf: must be {INT_RANGE}"),
        ("batch", math.nan, f"feature batch=nan: must be {INT_RANGE}"),
        ("batch", None, f"feature batch=None: must be {INT_RANGE}"),
        ("batch", 8.0, f"feature batch=8.0: must be {INT_RANGE}"),
        ("batch", 2**31, f"feature batch=2147483648: must be {INT_RANGE}"),
        ("q_len", -7, f"feature q_len=-7: must be {INT_RANGE}"),
        ("kv_len", 0, f"feature kv_len=0: must be {INT_RANGE}"),
        ("kv_len", 0.5, f"feature kv_len=0.5: must be {INT_RANGE}"),
        ("heads_q", np.float64("nan"), f"feature heads_q=.*nan.*: must be {INT_RANGE}"),
        ("phase", "middle", re.escape("feature phase='middle': must be one of ['prefill', 'decode']")),
        ("shape_key", 7, "feature shape_key=7: must be a string"),
    ],
)
def test_choose_refuses_a_feature_outside_its_range_naming_it(content, tmp_path, feature, value, says):
    """Case 6: batch -5, 0 or True no longer map to size 1, nor NaN to cluster 0."""
    bucketed, clustered = _bucketed_and_clustered(tmp_path)
    batch_keyed = dispatch.load(_write(tmp_path, content), mode="graph")
    for table in (bucketed, clustered, batch_keyed):
        with pytest.raises(dispatch.DispatchError, match=says):
            table.choose(**{**SHAPE, feature: value})


def test_choose_answers_in_range_and_checks_kv_len_against_q_len(content, tmp_path):
    bucketed, clustered = _bucketed_and_clustered(tmp_path)
    assert bucketed.choose(**SHAPE).id == "t0-unfused" and clustered.choose(**SHAPE).id == "t0-q_fused"
    far = {**SHAPE, "batch": np.int64(1 << 20), "kv_len": 1 << 24}  # numpy integers are integers
    assert clustered.choose(**far).id == "t0-unfused"
    with pytest.raises(
        dispatch.DispatchError, match="feature kv_len=8 is below q_len=16: must be at least q_len"
    ):
        bucketed.choose(**{**SHAPE, "phase": "prefill", "q_len": 16, "kv_len": 8})
    with pytest.raises(
        dispatch.DispatchError, match=r"keys on \['phase', 'q_len', 'kv_len', 'batch'\]; missing \['kv_len'\]"
    ):
        bucketed.choose(phase="decode", batch=1, q_len=1)
    for spec in dispatch.FEATURES.values():  # one table of ranges, each one well formed
        assert spec.kind in ("int", "str") and (spec.kind == "str" or 1 <= spec.low <= spec.high)


# -- case 8: the identity compares with its types; the kernel source hash covers kernels/deploy.py --
def test_an_identity_value_of_another_type_is_refused(content, tmp_path):
    path = _write(tmp_path, content)
    ident = _identity(content)
    with pytest.raises(
        dispatch.DispatchRefused,
        match=r"SM count: the table is for 132, this is '132' \(a str where the table records a int\)",
    ):
        dispatch.load(path, mode="graph", identity={**ident, "sm_count": "132"})
    with pytest.raises(dispatch.DispatchRefused, match="partition"):
        dispatch.load(path, mode="graph", identity={**ident, "heads_q": float(ident["heads_q"])})
    dispatch.load(path, mode="graph", identity={**ident, "sm_count": np.int64(132)})


def test_the_kernel_source_hash_covers_kernels_deploy(tmp_path):
    """Case 8: editing kernels/deploy.py changes the hash a server computes and the one a study records."""
    import shutil

    ignore = shutil.ignore_patterns("__pycache__")
    for name in ("headroom", "kernels", "scripts"):
        shutil.copytree(ROOT / name, tmp_path / name, ignore=ignore)
    assert dispatch.deploy_sources(tmp_path) == [dispatch.DEPLOY_SOURCE]
    timed = {p: h for p, h in dispatch.current_kernel_code(tmp_path).items() if p != dispatch.DEPLOY_SOURCE}
    served = dispatch.kernel_source_blake3(dispatch.current_kernel_code(tmp_path))
    recorded = dispatch.kernel_source_blake3(dispatch.study_kernel_code(timed, tmp_path))
    assert served == recorded
    deploy = tmp_path / dispatch.DEPLOY_SOURCE
    deploy.write_text(deploy.read_text() + "\n# edited\n")
    assert dispatch.kernel_source_blake3(dispatch.current_kernel_code(tmp_path)) != served
    assert dispatch.kernel_source_blake3(dispatch.study_kernel_code(timed, tmp_path)) != recorded


# -- cases 1-4: a study folder vouches for its table ------------------------------------------------
@pytest.fixture
def studies(tmp_path):
    return two_studies(tmp_path / "results")


@pytest.mark.parametrize("case", list(TAMPER))
def test_load_refuses_a_table_its_study_folder_does_not_vouch_for(studies, case):
    """Cases 1-4 (load): given the study folder, or its dispatch.json with recommendation.parquet beside
    it, a forged, swapped-in, deleted or linked table is refused even with a matching sidecar."""
    hand, other = studies
    assert dispatch.load(hand, mode="graph").study == "hand"
    tamper, says = TAMPER[case]
    if case == "linked" and not Path("/etc/passwd").is_file():
        pytest.skip("no /etc/passwd here")
    tamper(hand, other)
    for target in (hand, hand / "dispatch.json"):
        with pytest.raises(dispatch.DispatchRefused, match=says) as exc:
            dispatch.load(target, mode="graph")
        _one_line(exc)


def test_a_table_alone_is_checked_for_its_recorded_study(studies, tmp_path):
    """Away from its folder, the file alone says which study it was recorded for: study= refuses another."""
    hand, other = studies
    away = tmp_path / "served" / "dispatch.json"
    away.parent.mkdir()
    away.write_bytes((other / "dispatch.json").read_bytes())
    assert dispatch.load(away, mode="graph", study="other").study == "other"
    with pytest.raises(dispatch.DispatchRefused, match="the dispatch table of study 'other', not of 'hand'"):
        dispatch.load(away, mode="graph", study="hand")


# -- FlashInfer's version in the identity (issue 33) ------------------------------------------------
FLASHINFER_VERSION = "0.7.2.post1"  # what the environment stage recorded on the H200


@pytest.fixture(scope="module")
def with_flashinfer():
    """(recommendation table, dispatch content) of the ``content`` study, its environment recording
    FlashInfer's version as the environment stage does (column ``flashinfer``)."""
    from tests import analysis_sets as S

    env = S.environment().assign(flashinfer=FLASHINFER_VERSION, flashinfer_jit_blake3="empty")
    return recommend(_surface, "ADCC" * 6, environment=env)[2:]


def test_a_table_records_the_flashinfer_version_its_environment_recorded(content, with_flashinfer):
    """identity.soft.flashinfer is the environment's column; a study whose environment has none (the
    stage's 'none', or an environment recorded before the column) writes no key, as before."""
    from headroom.analysis import recommendation
    from tests import analysis_sets as S

    rows, table = with_flashinfer
    assert table["identity"]["soft"] == {**content["identity"]["soft"], "flashinfer": FLASHINFER_VERSION}
    assert set(rows["flashinfer"]) == {FLASHINFER_VERSION}  # recommendation.parquet's identity columns
    dispatch.validate(table)
    assert "flashinfer" not in content["identity"]["soft"]  # S.environment() has no flashinfer column
    trace = S.trace("ADCC")
    for absent in ("none", None, float("nan")):
        soft = recommendation.identity(trace, S.environment().assign(flashinfer=absent), "e" * 64)["soft"]
        assert soft == dict.fromkeys(dispatch.SOFT, "unknown"), absent


def test_an_older_table_without_flashinfer_still_loads_quietly(content, tmp_path):
    """The schema does not require the key: a table written before it (or from a study without
    FlashInfer) loads, with or without a FlashInfer on the host, and warns of no version."""
    assert "flashinfer" not in content["identity"]["soft"]
    path = _write(tmp_path, content)
    for host in (FLASHINFER_VERSION, None, ""):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            table = dispatch.load(path, mode="graph", identity={**_identity(content), "flashinfer": host})
        assert table.choose(phase="decode", batch=8).tile == 2


def test_the_schema_takes_a_flashinfer_version_only_as_a_string(content, tmp_path):
    for bad, says in ((7, "7 is not of type 'string'"), ("", "'' should be non-empty")):
        forged = copy.deepcopy(content)
        forged["identity"]["soft"]["flashinfer"] = bad
        with pytest.raises(
            dispatch.DispatchError, match=re.escape(f"field identity.soft.flashinfer: {says}")
        ):
            dispatch.load(_write(tmp_path, forged), mode="graph")


def test_another_flashinfer_version_only_warns(with_flashinfer, tmp_path):
    table = with_flashinfer[1]
    path = _write(tmp_path, table)
    here = {**_identity(table), "flashinfer": "0.6.0"}
    with pytest.warns(
        dispatch.VersionWarning,
        match=re.escape(f"flashinfer '0.6.0' differs from the study's '{FLASHINFER_VERSION}'"),
    ):
        loaded = dispatch.load(path, mode="graph", identity=here)
    assert loaded.choose(phase="decode", batch=8).tile == 2
    with warnings.catch_warnings():  # the same version, or an identity that names none: quiet
        warnings.simplefilter("error")
        dispatch.load(path, mode="graph", identity=_identity(table))
        dispatch.load(path, mode="graph", identity={k: v for k, v in here.items() if k != "flashinfer"})


def _routes_to_flashinfer(policy: dict, version: str | None = FLASHINFER_VERSION) -> dict:
    """A table of one scope around ``policy`` over our candidates and FlashInfer's, recording
    FlashInfer's ``version`` (None: a table that records none)."""
    soft = {**tables.IDENTITY["soft"], **({"flashinfer": version} if version else {})}
    identity = {**tables.IDENTITY, "soft": soft}
    return tables.table(
        {"eager": tables.scope(policy)}, {**tables.CANDIDATES, **tables.FLASHINFER}, identity=identity
    )


ROUTES = {  # decodes to FlashInfer's paged decode, prefills to ours; FlashInfer's ragged everywhere
    "phase-keyed": {"policy": "phase-keyed", "candidates": ["t0-q_fused", "native-flashinfer-paged"],
                    "fallback": 0, "table": [["prefill", 0], ["decode", 1]]},
    "global": {"policy": "global", "candidates": ["native-flashinfer-ragged"], "fallback": 0,
               "table": [[None, 0]]},
}  # fmt: skip


@pytest.mark.parametrize("policy", sorted(ROUTES))
@pytest.mark.parametrize("host", [None, ""])
def test_a_table_routing_to_flashinfer_is_refused_on_a_host_without_it(tmp_path, policy, host):
    """A table that routes a shape to a FlashInfer candidate cannot be served without FlashInfer: one
    line naming FlashInfer, the candidates and the version the table was timed with."""
    path = tmp_path / "dispatch.json"
    path.write_text(json.dumps(_routes_to_flashinfer(ROUTES[policy])))
    here = {**tables.IDENTITY["hard"], **tables.IDENTITY["soft"]}
    with pytest.raises(dispatch.DispatchRefused) as refused:
        dispatch.load(path, identity={**here, "flashinfer": host})
    message = str(refused.value)
    assert "\n" not in message
    assert re.search(rf"FlashInfer: the table routes to \[.*'native-flashinfer-\w+'\], timed with FlashInfer "
                     rf"{re.escape(FLASHINFER_VERSION)}; this host has no FlashInfer", message), message  # fmt: skip
    with warnings.catch_warnings():  # a host with that FlashInfer serves it, quietly
        warnings.simplefilter("error")
        table = dispatch.load(path, identity={**here, "flashinfer": FLASHINFER_VERSION})
    assert table.choose(phase="decode", batch=8).id.startswith("native-flashinfer-")
    dispatch.load(path, identity=here)  # an identity that does not say: not refused (as before)


def test_a_refusal_of_an_older_table_routing_to_flashinfer_says_its_version_is_not_recorded(tmp_path):
    path = tmp_path / "dispatch.json"
    path.write_text(json.dumps(_routes_to_flashinfer(ROUTES["global"], version=None)))
    here = {**tables.IDENTITY["hard"], **tables.IDENTITY["soft"], "flashinfer": None}
    with pytest.raises(dispatch.DispatchRefused, match=r"timed with FlashInfer \(version not recorded\)"):
        dispatch.load(path, identity=here)


def test_a_table_not_routing_to_flashinfer_loads_on_a_host_without_it(with_flashinfer, tmp_path):
    """A study measured with FlashInfer installed whose table ships ours (or another native) only: a
    host without FlashInfer serves it, quietly."""
    table = with_flashinfer[1]
    assert dispatch.flashinfer_routes(table) == []
    path = _write(tmp_path, table)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = dispatch.load(path, mode="graph", identity={**_identity(table), "flashinfer": None})
    assert loaded.choose(phase="decode", batch=8).tile == 2
    # FlashInfer described among the candidates but routed to by no scope's policy: not refused either
    policy = {"policy": "global", "candidates": ["t0-q_fused"], "fallback": 0, "table": [[None, 0]]}
    path = tmp_path / "unrouted.json"
    path.write_text(json.dumps(_routes_to_flashinfer(policy)))
    dispatch.load(path, identity={**tables.IDENTITY["hard"], "flashinfer": ""})


def test_the_hosts_flashinfer_version_is_read_without_importing_it(monkeypatch):
    """``flashinfer_version``: None where FlashInfer is not importable; else its distribution's version
    (the string the environment stage records), and flashinfer is never imported."""
    import importlib.util
    from importlib import metadata

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "flashinfer" else real(name, *a)
    )
    assert dispatch.flashinfer_version() is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    versions = {"flashinfer-python": FLASHINFER_VERSION}

    def version(name):
        if name not in versions:
            raise metadata.PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(metadata, "version", version)
    assert dispatch.flashinfer_version() == FLASHINFER_VERSION
    versions.clear()
    assert dispatch.flashinfer_version() == "unknown"  # importable, no distribution metadata
    assert "flashinfer" not in sys.modules
