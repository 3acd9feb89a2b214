"""The one write path and the one read path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pandas as pd
import pytest

from headroom.core import artifacts


def _frame(seed=0, n=50):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"invocation": np.arange(n), "median_us": rng.random(n), "phase": ["decode"] * n})


PROV = {"rule": "test", "params": {"a": 1}, "inputs": {"x.parquet": "00"}, "code": {}, "device": "interpret"}


def test_roundtrip_with_provenance_and_recorded_hash(tmp_path):
    path = tmp_path / "a" / "trace.parquet"
    digest = artifacts.write(_frame(), path, kind="test_table", provenance=PROV)
    assert digest == artifacts.hash_file(path) == artifacts.recorded_hash(path)
    pd.testing.assert_frame_equal(artifacts.read(path), _frame())
    assert artifacts.read_provenance(path) == PROV
    assert artifacts.read_kind(path) == "test_table"


def test_identical_data_gives_identical_bytes(tmp_path):
    a = artifacts.write(_frame(), tmp_path / "a.parquet", kind="k", provenance=PROV)
    time.sleep(0.01)
    b = artifacts.write(_frame(), tmp_path / "b.parquet", kind="k", provenance=PROV)
    assert a == b
    c = artifacts.write(_frame(seed=1), tmp_path / "c.parquet", kind="k", provenance=PROV)
    assert c != a


def test_read_fails_naming_path_and_both_hashes(tmp_path):
    path = tmp_path / "x.parquet"
    recorded = artifacts.write(_frame(), path, kind="k", provenance=PROV)
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(artifacts.ArtifactHashError) as exc:
        artifacts.read(path)
    msg = str(exc.value)
    assert str(path) in msg and recorded in msg and artifacts.hash_file(path) in msg


def test_read_without_recorded_hash_fails(tmp_path):
    path = tmp_path / "x.parquet"
    artifacts.write(_frame(), path, kind="k", provenance=PROV)
    artifacts.sidecar(path).unlink()
    with pytest.raises(artifacts.ArtifactError, match="no recorded BLAKE3"):
        artifacts.read(path)


def test_failure_during_write_leaves_no_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "x.parquet"
    old = artifacts.write(_frame(seed=3), path, kind="k", provenance=PROV)

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(artifacts.pq, "write_table", boom)
    with pytest.raises(KeyboardInterrupt):
        artifacts.write(_frame(), path, kind="k", provenance=PROV)
    assert artifacts.verify(path) == old  # the previous artifact is untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.parquet", "x.parquet.blake3"]


def test_killed_mid_write_leaves_nothing_under_the_final_name(tmp_path):
    """SIGKILL a process while it writes a large artifact: the final name never appears."""
    path = tmp_path / "big.parquet"
    script = textwrap.dedent(
        f"""
        import numpy as np, pandas as pd
        from headroom.core import artifacts
        n = 12_000_000
        df = pd.DataFrame({{"a": np.random.default_rng(0).random(n), "b": np.arange(n)}})
        print("writing", flush=True)
        artifacts.write(df, {str(path)!r}, kind="k", provenance={{}})
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "writing"
    deadline = time.time() + 60
    while time.time() < deadline and not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
        time.sleep(0.005)
    assert any(p.name.endswith(".tmp") for p in tmp_path.iterdir()), "writer never started its temporary file"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not path.exists()
    assert not artifacts.sidecar(path).exists()
