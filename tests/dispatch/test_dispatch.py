"""The dispatch table a server loads (issue 20): its refusals and warnings, a corrupt or foreign file,
no torch on the path to a choice, and a chosen candidate run through kernels.deploy matching the
float64 reference on the interpreter."""

from __future__ import annotations

import copy
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from headroom import dispatch
from headroom.core import artifacts
from tests.recommendation_sets import recommend

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
    with pytest.raises(dispatch.DispatchError, match="no deployment profile"):
        dispatch.load(_write(tmp_path, content))


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
