"""trace.source is a real, content-hashed input checked where the plan runs (issue 23 items 5, 6):
a log that is missing, not a regular file, unreadable or not a request log fails the plan naming it,
before Snakemake deletes the old trace; a log whose content changed reruns its study's trace."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

from headroom.core import config as hconfig
from headroom.trace import source as htsource
from tests.pipeline import ROOT, clone_run, copy_project, planned_rules, snakemake

BASE = hconfig.load(ROOT / "config/config.yaml")
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
LOG = HEADER + "".join(f"{i * 0.01:.2f},16,3\n" for i in range(4))


def _study(source: str) -> dict:
    cfg = copy.deepcopy(BASE)
    cfg["trace"]["source"] = source
    return cfg


@pytest.fixture
def log(tmp_path) -> Path:
    path = tmp_path / "log.csv"
    path.write_text(LOG)
    return path


def _refused(source, match: str, cuda: bool = True) -> None:
    with pytest.raises(hconfig.ConfigError, match=match) as exc:
        hconfig.resolve(_study(str(source)), cuda_available=cuda, check_source=htsource.check)
    assert "config key 'trace.source'" in str(exc.value) and str(source) in str(exc.value), str(exc.value)


@pytest.mark.parametrize("cuda", [True, False], ids=["cuda", "cpu"])
def test_a_missing_log_is_refused_at_plan_time(tmp_path, cuda):
    _refused(tmp_path / "gone.csv", "names no such file", cuda)


def test_a_directory_fifo_or_device_is_refused_at_plan_time(tmp_path):
    folder = tmp_path / "folder.csv"
    folder.mkdir()
    _refused(folder, "is a directory, not a regular file")
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    _refused(fifo, r"is a FIFO \(named pipe\), not a regular file")  # never opened: no hang
    device = tmp_path / "zero.csv"
    device.symlink_to("/dev/zero")  # links are followed to what they name
    _refused(device, "is a character device, not a regular file")


def test_a_file_that_is_no_request_log_is_refused_at_plan_time(tmp_path):
    _refused("/etc/passwd", r"must be a \.csv, \.parquet or \.jsonl request log")
    passwd = tmp_path / "passwd.csv"
    passwd.symlink_to("/etc/passwd")
    _refused(passwd, r"row 0 \(header\), missing column")
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    _refused(empty, r"empty \(0 bytes\)")
    fake = tmp_path / "fake.parquet"
    fake.write_text(LOG)
    _refused(fake, "not a readable Parquet file")


def test_an_unreadable_log_is_refused_at_plan_time(log, monkeypatch):
    from headroom.trace import requests

    def denied(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(requests, "open", denied, raising=False)  # root reads any file: simulate it
    _refused(log, r"cannot be read \(Permission denied\)")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_a_log_without_read_permission_is_refused_at_plan_time(log):
    log.chmod(0)
    _refused(log, r"cannot be read \(Permission denied\)")


def test_a_log_outside_the_project_is_accepted(log):
    # logs live on data disks: an absolute path anywhere is fine once it is a readable request log
    study = hconfig.resolve(_study(str(log)), cuda_available=True, check_source=htsource.check)
    assert study["trace"]["source"] == str(log)


def test_the_smoke_overlays_log_is_named_under_its_key(tmp_path):
    cfg = _study("synthetic")
    cfg["smoke"]["trace"]["source"] = str(tmp_path / "gone.csv")
    with pytest.raises(hconfig.ConfigError, match=r"config key 'smoke.trace.source'.*no such file"):
        hconfig.resolve(cfg, cuda_available=False, check_source=htsource.check)


def test_the_plan_passes_the_trace_floors_check_to_core(tmp_path):
    """Core imports nothing above itself (tests/core/test_floors.py): the Snakefile's plan hands
    the trace floor's check to plan_studies, so a missing log still fails a dry run, naming it."""
    project = copy_project(tmp_path / "p")
    (project / "config/studies/withlog.yaml").write_text("trace: {source: data/logs/gone.csv}\n")
    proc = snakemake(project, "--dry-run", "--config", "studies=[withlog]", check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "config key 'trace.source'" in out and "data/logs/gone.csv" in out, out[
        -2000:
    ]


# -- end to end: the trace rule of a study reading a log, run once and cloned ---------------------

TARGETS = ("results/withlog/trace.parquet", "results/default/trace.parquet")
STUDIES = "studies=[withlog,default]"


@pytest.fixture(scope="module")
def traced(tmp_path_factory) -> Path:
    """Two studies' traces built: `withlog` from data/logs/a.csv, `default` from the synthetic log."""
    project = copy_project(tmp_path_factory.mktemp("source") / "p")
    (project / "data/logs").mkdir(parents=True)
    (project / "data/logs/a.csv").write_text(LOG)
    (project / "config/studies/withlog.yaml").write_text("trace: {source: data/logs/a.csv}\n")
    snakemake(project, *TARGETS, "--config", STUDIES, timeout=600)
    return project


@pytest.fixture
def ran(traced, tmp_path) -> Path:
    return clone_run(traced, tmp_path / "p")


def test_a_changed_log_reruns_only_its_studys_trace_even_with_an_older_mtime(ran):
    log = ran / "data/logs/a.csv"
    old = os.stat(log)
    log.write_text(LOG.replace(",16,3", ",32,3"))
    os.utime(log, ns=(old.st_atime_ns, old.st_mtime_ns - 10**12))  # older than the trace: a checkout
    assert planned_rules(ran, *TARGETS, "--config", STUDIES) == {"trace": 1}
    proc = snakemake(ran, "--dry-run", *TARGETS, "--config", STUDIES)
    out = proc.stdout + proc.stderr
    assert "wildcards: study=withlog" in out and "study=default" not in out
    assert "Params have changed" in out  # the log's BLAKE3, not its mtime
    assert planned_rules(ran, "results/default/trace.parquet", "--config", STUDIES) == {}


@pytest.mark.parametrize("replace", ["delete", "directory"])
def test_a_log_gone_or_replaced_after_the_study_ran_fails_the_plan_and_keeps_the_trace(ran, replace):
    log = ran / "data/logs/a.csv"
    trace = ran / TARGETS[0]
    before = trace.read_bytes()
    log.unlink()
    if replace == "directory":
        log.mkdir()
    proc = snakemake(ran, *TARGETS, "--config", STUDIES, check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "data/logs/a.csv" in out and "trace.source" in out, out[-2000:]
    assert trace.read_bytes() == before  # Snakemake never got to delete it


# -- issue 31 cases 11, 12, 15: checked at plan time, and nothing of a foreign file is printed -----


@pytest.mark.parametrize("target", ["/etc/passwd", "/etc/hostname"])
@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_a_link_to_a_system_file_is_refused_without_echoing_its_content(tmp_path, target, suffix):
    # case 15: the refusal quoted the file's first line (root:x:0:0:root:/root:/bin/bash)
    if not Path(target).is_file() or not Path(target).read_text().strip():
        pytest.skip(f"no {target} here")
    link = tmp_path / f"log{suffix}"
    link.symlink_to(target)
    with pytest.raises(hconfig.ConfigError) as exc:
        hconfig.resolve(_study(str(link)), cuda_available=True, check_source=htsource.check)
    msg = str(exc.value)
    assert "config key 'trace.source'" in msg and str(link) in msg
    first = Path(target).read_text().splitlines()[0]
    for piece in [first, *first.replace(":", " ").split()]:
        if len(piece) > 3:  # (a word of a message may be short: 'root' is not)
            assert piece not in msg.replace(str(link), ""), (piece, msg)


def test_a_log_sharing_a_column_with_the_mapping_still_names_what_it_has(tmp_path):
    log = tmp_path / "log.csv"
    log.write_text("TIMESTAMP,prompt,out\n0,16,3\n")
    _refused(
        log,
        r"missing column\(s\) context_tokens -> 'ContextTokens'.*present: \['TIMESTAMP', 'prompt', 'out'\]",
    )


@pytest.mark.parametrize(
    "fmt, match",
    [
        ("%Q%", r"'%Q%' is not a strptime format \('Q' is a bad directive"),
        ("%Y-%m-%d %", r"'%Y-%m-%d %' is not a strptime format \(stray %"),
        ("second", r"'second' is neither a unit"),
    ],
)
def test_a_bad_arrival_format_fails_the_plan_not_the_job(log, fmt, match):
    # case 11: passed the plan, failed in the job with "'Q' is a bad directive"
    cfg = _study(str(log))
    cfg["trace"]["arrival_format"] = fmt
    with pytest.raises(hconfig.ConfigError, match=rf"config key 'trace.arrival_format': {match}"):
        hconfig.resolve(cfg, cuda_available=True, check_source=htsource.check)
    cfg["trace"]["arrival_format"] = "%Y-%m-%d %H:%M:%S"
    hconfig.resolve(cfg, cuda_available=True, check_source=htsource.check)


def test_a_deeply_nested_jsonl_log_fails_the_plan_in_one_line(tmp_path):
    # case 12, at plan time: RecursionError and its traceback
    log = tmp_path / "deep.jsonl"
    log.write_text('{"TIMESTAMP": 0, "x": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    _refused(log, r"row 1 \(line 1\): JSON nested deeper than 64 levels")
