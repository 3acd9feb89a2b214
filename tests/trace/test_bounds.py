"""A request log is read in bounded memory, block by block, and what it may ask for is bounded
(issue 23 items 12, 13): peak RSS is measured in a fresh process; logs past a bound are refused with
the bound and its reason before anything of their size is allocated."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from headroom.trace import requests as hrequests
from headroom.trace.requests import read_request_log
from tests.pipeline import ROOT
from tests.trace.test_tracelog import COLUMNS, write_log

#: Peak memory a read may add, per request and in all: the parsed arrays are 32 bytes a request.
BYTES_PER_REQUEST = 64
FIXED_MB = 48


def big_log(path: Path, n: int) -> Path:
    """n requests like the Azure log's rows: ISO timestamps with nanoseconds, in time order."""
    rng = np.random.default_rng(0)
    start = np.datetime64("2023-11-16T18:15:46", "ns")
    stamps = start + np.cumsum(rng.integers(0, 50_000_000, n)).astype("timedelta64[ns]")
    table = pa.table(
        {
            "TIMESTAMP": pa.compute.replace_substring(pa.array(stamps).cast(pa.string()), "T", " "),
            "ContextTokens": rng.integers(1, 4000, n),
            "GeneratedTokens": rng.integers(1, 500, n),
        }
    )
    if path.suffix == ".csv":
        pacsv.write_csv(table, path)
    elif path.suffix == ".jsonl":
        table.to_pandas().to_json(path, orient="records", lines=True)
    else:
        pq.write_table(table.set_column(0, "TIMESTAMP", pa.array(stamps)), path)
    return path


# Runs in a fresh process: reads a small log first (so lazy imports are not counted), then the big
# one, and prints the peak RSS (VmHWM, KiB) before and after. Not ru_maxrss: that one keeps the
# peak of the forked parent (the test process) across exec.
READ_AND_MEASURE = textwrap.dedent(
    """
    import re, sys
    from headroom.trace.requests import read_request_log
    def peak_kb():
        with open("/proc/self/status") as fh:
            return int(re.search(r"VmHWM:\\s+(\\d+) kB", fh.read()).group(1))
    columns = {"arrival": "TIMESTAMP", "context_tokens": "ContextTokens", "generated_tokens": "GeneratedTokens"}
    read_request_log(sys.argv[1], columns)
    before = peak_kb()
    assert len(read_request_log(sys.argv[2], columns)) == int(sys.argv[3])
    print(before, peak_kb())
    """
)


def _peak_growth_mb(tmp_path: Path, n: int, suffix: str) -> float:
    small = big_log(tmp_path / f"small{suffix}", 10)
    log = big_log(tmp_path / f"big{suffix}", n)
    proc = subprocess.run(
        [sys.executable, "-c", READ_AND_MEASURE, str(small), str(log), str(n)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    before_kb, after_kb = map(int, proc.stdout.split())
    return (after_kb - before_kb) / 1024


def _assert_bounded(tmp_path: Path, n: int, suffix: str) -> None:
    grown = _peak_growth_mb(tmp_path, n, suffix)
    bound = n * BYTES_PER_REQUEST / 2**20 + FIXED_MB
    print(f"{n:,} requests ({suffix}): peak RSS grew {grown:.0f} MB (bound {bound:.0f} MB)")
    assert grown < bound, f"reading {n:,} requests grew peak RSS by {grown:.0f} MB (bound {bound:.0f} MB)"


needs_proc = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="measures VmHWM in /proc")


@needs_proc
@pytest.mark.parametrize("suffix", [".csv", ".parquet", ".jsonl"])
def test_reading_a_million_request_log_stays_within_its_memory_bound(tmp_path, suffix):
    _assert_bounded(tmp_path, 1_000_000, suffix)


@needs_proc
@pytest.mark.slow
@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_reading_a_five_million_request_log_stays_within_its_memory_bound(tmp_path, suffix):
    # the case: 5 M rows (a 203 MB CSV) peaked at 1.97 GB before the reader streamed
    _assert_bounded(tmp_path, 5_000_000, suffix)


def test_small_blocks_read_the_same_requests_and_number_rows_across_blocks(tmp_path, monkeypatch):
    whole_csv = read_request_log(big_log(tmp_path / "log.csv", 1000), COLUMNS)
    whole_pq = read_request_log(big_log(tmp_path / "log.parquet", 1000), COLUMNS)
    whole_jsonl = read_request_log(big_log(tmp_path / "log.jsonl", 1000), COLUMNS)
    assert np.array_equal(whole_jsonl.arrival_ns, whole_csv.arrival_ns)
    monkeypatch.setattr(hrequests, "CSV_BLOCK_BYTES", 256)  # ~6 rows a block (CSV), ~3 lines (JSONL)
    monkeypatch.setattr(hrequests, "PARQUET_BATCH_ROWS", 7)
    logs = (
        (tmp_path / "log.csv", whole_csv),
        (tmp_path / "log.parquet", whole_pq),
        (tmp_path / "log.jsonl", whole_jsonl),
    )
    for path, whole in logs:
        blocks = read_request_log(path, COLUMNS)
        for field in ("arrival_ns", "context", "generated", "row"):
            assert np.array_equal(getattr(blocks, field), getattr(whole, field)), (path, field)
    # a row out of time order at a block boundary names it and the row before it
    rows = [(f"{i}.0", 5, 1) for i in range(40)]
    rows[21] = ("0.5", 5, 1)
    log = write_log(tmp_path / "order.csv", rows)
    with pytest.raises(
        ValueError,
        match=r"row 22 \(line 23\), column 'TIMESTAMP': arrival '0.5' is earlier than row 21's '20.0'",
    ):
        read_request_log(log, COLUMNS)
    # seconds or timestamps is decided once, on the first block: a timestamp later is unparsable
    rows = [(f"{i}.0", 5, 1) for i in range(40)] + [("2023-01-01 00:00:00", 5, 1)]
    with pytest.raises(ValueError, match=r"row 41 \(line 42\).*unparsable arrival '2023-01-01 00:00:00'"):
        read_request_log(write_log(tmp_path / "mixed.csv", rows), COLUMNS)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
def test_a_log_past_the_most_requests_is_refused_naming_the_bound(tmp_path, monkeypatch, suffix):
    monkeypatch.setattr(hrequests, "MAX_REQUESTS", 500)
    monkeypatch.setattr(hrequests, "CSV_BLOCK_BYTES", 4096)
    log = big_log(tmp_path / f"long{suffix}", 2000)
    with pytest.raises(
        ValueError, match=r"long\.\w+: [\d,]+ requests or more, past the most a request log may hold \(500"
    ):
        read_request_log(log, COLUMNS)
    if suffix == ".parquet":  # its footer says so: refused where the plan checks the log
        with pytest.raises(ValueError, match="past the most a request log may hold"):
            hrequests.check_log(log, COLUMNS)


# Runs build_trace in a fresh process whose address space is capped at 2 GiB: a reader that would
# allocate the GiBs the log asks for gets a MemoryError there, not the machine's memory.
BUILD_CAPPED = textwrap.dedent(
    """
    import resource, sys
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))
    from headroom.trace.invocations import build_trace
    part = {"heads_q": 4, "heads_kv": 2, "head_dim": 32, "dtype": "float32"}
    try:
        build_trace({"source": sys.argv[1], "invocations": 6}, part)
    except ValueError as exc:
        print(exc)
        sys.exit(3)
    """
)


@pytest.mark.parametrize(
    "arrival, generated, match",
    [
        # the case: GeneratedTokens = 1e9, no max_kv_len (7.45 GiB asked for)
        (
            [0.0, 1.0, 2.0],
            [5, 1_000_000_000, 5],
            r"row 2, column 'GeneratedTokens': out-of-range .*16,777,216",
        ),
        # within the per-count bound, but three sequences one after another: 48 M decode steps
        (
            [0.0, 1e6, 2e6],
            [16_000_000] * 3,
            r"emit 48,000,003 invocations .* past the most a trace is built from",
        ),
    ],
    ids=["GeneratedTokens-1e9", "48M-decode-steps"],
)
def test_a_tiny_log_asking_for_gigabytes_is_refused_with_a_reason(tmp_path, arrival, generated, match):
    log = tmp_path / "tiny.parquet"
    pq.write_table(
        pa.table({"TIMESTAMP": arrival, "ContextTokens": [16, 16, 16], "GeneratedTokens": generated}), log
    )
    proc = subprocess.run(
        [sys.executable, "-c", BUILD_CAPPED, str(log)], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert re.search(match, proc.stdout), proc.stdout
