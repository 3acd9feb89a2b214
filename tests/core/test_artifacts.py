"""The one write path and the one read path."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

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


def test_measured_floats_are_written_smaller_and_read_back_exactly(tmp_path):
    """A timing table (float64 medians with full mantissas, as a portfolio run writes them) is
    written byte-stream-split, smaller than dictionary encoding, every value read back bit for bit;
    a float column of few values keeps its dictionary."""
    rng = np.random.default_rng(3)
    n = 6000
    timings = pd.DataFrame(
        {
            "candidate": rng.choice(["a", "b", "c"], n),
            "median_us": 40.0 + rng.gamma(2.0, 3.0, n),
            "std_us": rng.gamma(1.0, 0.5, n),
        }
    )
    few = pd.DataFrame({"candidate": timings["candidate"], "scale": rng.choice([0.5, 1.0, 2.0], n)})
    for frame in (timings, few):
        table = artifacts.to_table(frame)
        chosen = artifacts.encode(table)
        assert len(chosen) == min(len(artifacts._parquet(table, s)) for s in (False, True))
        artifacts.write(frame, tmp_path / "t.parquet", kind="test_table", provenance=PROV)
        pd.testing.assert_frame_equal(artifacts.read(tmp_path / "t.parquet"), frame, check_exact=True)
    assert len(artifacts.encode(artifacts.to_table(timings))) < 0.9 * len(
        artifacts._parquet(artifacts.to_table(timings), floats_split=False)
    )
    assert artifacts.encode(artifacts.to_table(few)) == artifacts._parquet(artifacts.to_table(few), False)


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


def _kill_mid_write(path):
    """SIGKILL a process while it writes a large artifact at `path`."""
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
    while time.time() < deadline and not artifacts.temp_files(path):
        time.sleep(0.005)
    assert artifacts.temp_files(path), "writer never started its temporary file"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()


def test_killed_mid_write_leaves_nothing_under_the_final_name(tmp_path):
    """SIGKILL a process while it writes a large artifact: the final name never appears."""
    path = tmp_path / "big.parquet"
    _kill_mid_write(path)
    assert not path.exists()
    assert not artifacts.sidecar(path).exists()


def test_the_next_run_of_a_killed_job_removes_its_temporary_files(tmp_path, monkeypatch):
    """kill -9 mid-write leaves a .tmp beside the output; the job's next run (Snakemake reruns an
    incomplete job) removes it before it writes."""
    from headroom.core import stage
    from tests.core.test_identity import fake_job

    path = tmp_path / "results" / "s" / "trace.parquet"
    path.parent.mkdir(parents=True)
    _kill_mid_write(path)
    left = artifacts.temp_files(path)
    assert left
    other = path.parent / ".lifecycle.parquet.abc.tmp"  # another output's: not this job's to remove
    other.write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    job = fake_job(
        "s", {}, {"trace": "results/s/trace.parquet", "trace_blake3": "results/s/trace.parquet.blake3"}
    )
    stage.run_stage(job, lambda s: None)
    assert not any(p.exists() for p in left) and artifacts.temp_files(path) == []
    assert other.exists()


# -- what is not a regular file, or not a sidecar, is refused with one line ------------------------
def _cli(args, cwd):
    """`headroom ARGS` in a subprocess with a timeout (``test_cli.headroom``), so a read that blocks
    fails the test instead of hanging it."""
    from tests.core.test_cli import headroom

    try:
        return headroom(*args, cwd=cwd)
    except subprocess.TimeoutExpired:
        pytest.fail(f"headroom {' '.join(args)} hung (reading a FIFO or a device?)")


@pytest.fixture
def study(tmp_path):
    from tests.core.test_catalog import build, make_study

    project = tmp_path / "proj"
    make_study(project, project / "results" / "s")
    build(project)
    return project


@pytest.mark.parametrize("what", ["fifo", "dev-zero", "directory"])
def test_a_non_regular_file_in_place_of_an_artifact_is_refused(study, what):
    decision = study / "results" / "s" / "decision.parquet"
    decision.unlink()
    if what == "fifo":
        os.mkfifo(decision)
    elif what == "dev-zero":
        decision.symlink_to("/dev/zero")
    else:
        decision.mkdir()
    for args in (["gate"], ["verify"]):
        proc = _cli(args, study)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert "decision.parquet" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("what", ["fifo", "dev-zero"])
def test_a_non_regular_catalog_is_refused(study, what):
    cat = study / "results" / "catalog.duckdb"
    cat.unlink()
    os.mkfifo(cat) if what == "fifo" else cat.symlink_to("/dev/zero")
    for args in (["query", "SELECT 1"], ["verify"]):
        proc = _cli(args, study)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert "not a regular file" in proc.stdout + proc.stderr and "Traceback" not in proc.stderr


def test_a_catalog_row_pointing_at_a_device_is_refused(study):
    """A forged catalog row naming /dev/zero: query warns and answers, verify fails; neither hangs."""
    import duckdb

    cat = study / "results" / "catalog.duckdb"
    con = duckdb.connect(str(cat))
    con.execute("UPDATE artifacts SET path = '/dev/zero', bytes = 1 WHERE kind = 'trace'")
    con.close()
    artifacts.record_hash(cat)
    proc = _cli(["query", "SELECT 1 AS one", "--format", "csv"], study)
    assert "Traceback" not in proc.stderr and "/dev/zero" in proc.stderr
    proc = _cli(["verify"], study)
    assert proc.returncode == 1 and "/dev/zero" in proc.stdout


def test_verify_hands_parquet_to_arrow_only_as_arrow_owned_bytes(study, monkeypatch):
    """Every Parquet that `headroom verify` parses reaches pyarrow as a path or an Arrow-owned
    buffer (artifacts.parse_parquet), never a Python file object or Python bytes: an Arrow worker
    thread may drop the last reference to such a Python object after the interpreter began to
    exit, needs the GIL it can no longer take, and the process aborts after printing its answer
    ("terminate called without an active exception", rc -6; a verify whose last read was the
    contract check, headroom/core/integrity.py, did so in 3-5% of runs under load)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from headroom.core import verify

    real, seen = pq.read_table, []

    def read_table(source, *args, **kwargs):
        python_object = isinstance(source, (bytes, bytearray, memoryview, pa.Buffer, pa.PythonFile)) or (
            hasattr(source, "read") and not isinstance(source, pa.NativeFile)
        )
        assert not python_object, f"pq.read_table given a Python-owned source: {type(source).__name__}"
        seen.append(type(source).__name__)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pq, "read_table", read_table)
    problems, n = verify.verify_results(study / "results")
    assert problems == [] and n > 0
    assert seen, "verify parsed no Parquet through pq.read_table: the spy saw nothing"


@pytest.mark.parametrize("content", [b"", b"\xff\xfe not utf-8", "directory"])
def test_a_bad_sidecar_is_one_line_naming_it(study, content):
    decision = study / "results" / "s" / "decision.parquet"
    side = artifacts.sidecar(decision)
    side.unlink()
    side.mkdir() if content == "directory" else side.write_bytes(content)
    for args in (["gate"], ["verify"]):
        proc = _cli(args, study)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1 and "Traceback" not in out, (args, out)
        assert "decision.parquet.blake3" in out and "rerun the pipeline" in out


@pytest.mark.parametrize("content", [b"", b"\xff\xfe not utf-8", "directory"])
def test_a_bad_catalog_sidecar_is_one_line_naming_it(study, content):
    side = artifacts.sidecar(study / "results" / "catalog.duckdb")
    side.unlink()
    side.mkdir() if content == "directory" else side.write_bytes(content)
    proc = _cli(["query", "SELECT 1"], study)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and "Traceback" not in out and "catalog.duckdb" in out


def test_a_non_parquet_decision_is_one_line(study):
    decision = study / "results" / "s" / "decision.parquet"
    decision.write_bytes(b"not parquet")
    artifacts.record_hash(decision)
    for args in (["gate"], ["verify"]):
        proc = _cli(args, study)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 1 and "Traceback" not in out and "not a readable Parquet artifact" in out


def test_an_interrupted_replay_import_leaves_no_temporary_the_next_run_cannot_find(tmp_path, monkeypatch):
    """A replay's import killed before its rename: whatever it left is a temporary file of the
    output's (artifacts.temp_files), which the job's next run removes; an exception removes it."""
    from headroom.core import replay

    src = tmp_path / "rec" / "trace.parquet"
    digest = artifacts.write(_frame(seed=1), src, kind="k", provenance=PROV)
    dest = tmp_path / "results" / "s" / "trace.parquet"
    real = os.replace

    def killed(a, b):
        if Path(b) == dest:
            left.update(p for p in dest.parent.iterdir() if p.name.endswith(".tmp"))
            found.update(artifacts.temp_files(dest))
            raise KeyboardInterrupt
        return real(a, b)

    left: set[Path] = set()
    found: set[Path] = set()
    monkeypatch.setattr(os, "replace", killed)
    monkeypatch.setattr(Path, "replace", lambda self, target: killed(self, target))
    with pytest.raises(KeyboardInterrupt):
        replay.import_artifact(src, dest)
    assert left and left <= found  # what the job's next run removes
    assert not any(p.exists() for p in left) and not dest.exists()
    monkeypatch.undo()
    assert replay.import_artifact(src, dest) == digest == artifacts.verify(dest)
    assert artifacts.sidecar(dest).read_bytes() == artifacts.sidecar(src).read_bytes()


def test_a_stage_run_with_headroom_profile_writes_its_profile_and_says_when_its_process_started(
    tmp_path, monkeypatch
):
    """HEADROOM_PROFILE=DIR: each stage's cProfile statistics land in DIR (issue 36: where a stage's
    time goes); every stage logs how long its process ran before the stage began (imports)."""
    import pstats

    from headroom.core import stage
    from tests.core.test_identity import fake_job

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(stage.PROFILE_ENV, str(tmp_path / "prof"))
    job = fake_job("s", {}, {"trace": "results/s/trace.parquet"})
    stage.run_stage(job, lambda s: sum(range(1000)))
    (found,) = (tmp_path / "prof").glob(f"{job.rule}-*.prof")
    assert any("<genexpr>" in name or "sum" in name for *_, name in pstats.Stats(str(found)).stats)
    assert 0 < stage.process_age_s() < 24 * 3600


# A stage run in its own process as Snakemake runs it, with the device named on the command line: its
# main registers an exit handler (the interpreter's teardown) and leaves output in stdout's buffer.
STAGE_PROCESS = """
import atexit, sys
from pathlib import Path
from types import SimpleNamespace
from headroom.core import stage
from tests.core.test_identity import fake_job

hooks = SimpleNamespace(check=lambda study, device: None, provenance=lambda device: {})
job = fake_job("s", {}, {})
job.params, job.log = {"device": sys.argv[1]}, ["stage.log"]

def main(s):
    atexit.register(lambda: Path("teardown").write_text("ran"))
    print("buffered", end="")

stage.run_stage(job, main, device=hooks)
"""


@pytest.mark.parametrize("device", ["cuda", "interpret", "none"])
def test_a_cuda_stage_ends_its_process_without_the_teardown_its_output_and_log_flushed(tmp_path, device):
    """Issue 36: a CUDA job's process ends as soon as its outputs are written, skipping the
    interpreter's teardown (end_process); stdout and the log are flushed and it exits 0. Other
    devices' jobs end as before."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", STAGE_PROCESS, device], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "buffered"
    assert "rule report finished in" in (tmp_path / "stage.log").read_text()
    assert (tmp_path / "teardown").exists() is (device != "cuda")
