"""Gzipped request logs (`.csv.gz`, `.jsonl.gz`): read as they are, through gzip, to the same requests
as their plain forms, with the same checks and messages (rows and lines included); a gzip that is
not one, is truncated or corrupt fails with one line naming the file; `.parquet.gz` is refused."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from headroom.trace import requests as hrequests
from headroom.trace.requests import LOG_SUFFIXES, check_log, log_format, read_request_log

CSV_COLUMNS = {
    "arrival": "TIMESTAMP",
    "context_tokens": "ContextTokens",
    "generated_tokens": "GeneratedTokens",
}
JSONL_COLUMNS = {
    "arrival": "timestamp",
    "context_tokens": "input_length",
    "generated_tokens": "output_length",
    "hash_ids": "hash_ids",
}
KINDS = ["csv", "jsonl"]
FIELDS = ("arrival_ns", "context", "generated", "row", "blocks", "block_start")


def _csv_text(n: int) -> str:
    return "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:15:{i // 100:02d}.{i % 100:02d}00000,{16 + i % 7},{1 + i % 3}\n" for i in range(n)
    )


def _jsonl_text(n: int) -> str:
    rows = (
        {
            "timestamp": 5 * i,
            "input_length": 513 + i % 500,
            "output_length": 1 + i % 4,
            "hash_ids": [0, 1000 + i],
        }
        for i in range(n)
    )
    return "".join(json.dumps(r) + "\n" for r in rows)


def _pair(tmp_path: Path, name: str, text: str) -> tuple[Path, Path]:
    plain = tmp_path / name
    plain.write_text(text)
    gz = tmp_path / f"{name}.gz"
    gz.write_bytes(gzip.compress(text.encode(), 9, mtime=0))
    return plain, gz


def _read(path: Path):
    if log_format(path) == ".jsonl":
        return read_request_log(path, JSONL_COLUMNS, "milliseconds", block_tokens=512)
    return read_request_log(path, CSV_COLUMNS)


def _same(a, b) -> None:
    for f in FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        assert (x is None and y is None) or np.array_equal(x, y), f


@pytest.mark.parametrize(
    "name, text", [("log.csv", _csv_text(3000)), ("log.jsonl", _jsonl_text(3000))], ids=KINDS
)
def test_a_gzipped_log_reads_to_the_same_requests_as_its_plain_form(tmp_path, name, text):
    plain, gz = _pair(tmp_path, name, text)
    a, b = _read(plain), _read(gz)
    assert len(a) == len(b) == 3000
    _same(a, b)


def test_a_gzipped_log_over_several_blocks_reads_the_same(tmp_path, monkeypatch):
    # blocks cut mid-line on both readers (a JSONL line, a CSV row carried to the next block)
    monkeypatch.setattr(hrequests, "CSV_BLOCK_BYTES", 4096)
    for name, text in (("log.csv", _csv_text(2000)), ("log.jsonl", _jsonl_text(2000))):
        plain, gz = _pair(tmp_path, name, text)
        _same(_read(plain), _read(gz))


def test_log_format_names_the_format_whatever_the_case_or_the_gzip():
    assert [log_format(p) for p in ("a.csv", "a.CSV.GZ", "a.jsonl.gz", "a.pq", "a.parquet", "a.x.csv")] == [
        ".csv", ".csv", ".jsonl", ".parquet", ".parquet", ".csv",
    ]  # fmt: skip
    assert {log_format(f"log{s}") for s in LOG_SUFFIXES} == {".csv", ".jsonl", ".parquet"}
    assert {".csv.gz", ".jsonl.gz"} <= set(LOG_SUFFIXES) and ".parquet.gz" not in LOG_SUFFIXES


@pytest.mark.parametrize("name", ["log.parquet.gz", "log.pq.gz", "log.gz", "log.txt.gz", "log.tsv"])
def test_a_parquet_gz_or_other_name_is_refused_naming_the_accepted_kinds(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(gzip.compress(b"x"))
    for call in (lambda: check_log(path, CSV_COLUMNS), lambda: read_request_log(path, CSV_COLUMNS)):
        with pytest.raises(ValueError) as exc:
            call()
        msg = str(exc.value)
        assert msg.startswith(f"{path}: trace.source must be a .csv, .parquet or .jsonl request log")
        assert ".csv.gz or .jsonl.gz" in msg and "\n" not in msg, msg


def _one_line_gzip_error(call, path: Path) -> str:
    with pytest.raises(ValueError) as exc:
        call()
    msg = str(exc.value)
    assert msg.startswith(f"{path}: not a readable gzip file (") and "\n" not in msg, msg
    assert exc.value.__cause__ is None and exc.value.__suppress_context__, "a traceback chain"
    return msg


@pytest.mark.parametrize(
    "name, text", [("log.csv", _csv_text(3000)), ("log.jsonl", _jsonl_text(3000))], ids=KINDS
)
def test_a_truncated_gzip_fails_with_one_line_naming_the_file(tmp_path, name, text):
    _, gz = _pair(tmp_path, name, text)
    data = gz.read_bytes()
    gz.write_bytes(data[: len(data) // 2])  # whole lines decompress before the cut: the end tells
    msg = _one_line_gzip_error(lambda: _read(gz), gz)
    assert "ended before the end-of-stream marker" in msg
    gz.write_bytes(data[:12])  # cut inside the first block: the plan's check already fails
    _one_line_gzip_error(lambda: check_log(gz, JSONL_COLUMNS if name.endswith("jsonl") else CSV_COLUMNS), gz)


@pytest.mark.parametrize(
    "name, text", [("log.csv", _csv_text(50)), ("log.jsonl", _jsonl_text(50))], ids=KINDS
)
def test_a_plain_log_named_gz_fails_with_one_line_naming_the_file(tmp_path, name, text):
    path = tmp_path / f"{name}.gz"
    path.write_text(text)
    columns = JSONL_COLUMNS if name.endswith("jsonl") else CSV_COLUMNS
    msg = _one_line_gzip_error(lambda: check_log(path, columns), path)
    assert "Not a gzipped file" in msg
    _one_line_gzip_error(lambda: _read(path), path)


def test_a_corrupt_gzip_is_named_as_such_not_by_the_garbage_it_decompresses_to(tmp_path):
    # a flipped byte may decompress to text that is no JSON before the CRC at the end is checked:
    # the log's error is checked against the whole stream, and the stream is named
    _, gz = _pair(tmp_path, "log.jsonl", _jsonl_text(20_000))
    data = bytearray(gz.read_bytes())
    data[len(data) // 2] ^= 0xFF
    gz.write_bytes(bytes(data))
    _one_line_gzip_error(lambda: _read(gz), gz)


def _same_message(plain, gz) -> str:
    """The error reading each of a plain log and its gzip raises, the file's name as LOG: asserted the
    same, and returned."""
    messages = []
    for path in (plain, gz):
        with pytest.raises(ValueError) as exc:
            _read(path)
        messages.append(str(exc.value).replace(str(path), "LOG"))
    assert messages[0] == messages[1]
    return messages[0]


def test_a_gzipped_log_keeps_the_plain_logs_messages(tmp_path):
    # row and line numbers, the CSV header, a backwards arrival: as the plain log says them
    bad = _jsonl_text(10).splitlines(keepends=True)
    bad[6] = bad[6].replace('"input_length": 519', '"input_length": -1')
    plain, gz = _pair(tmp_path, "bad.jsonl", "".join(bad))
    said = _same_message(plain, gz)
    assert "LOG: row 7 (line 7), column 'input_length'" in said
    lines = _csv_text(10).splitlines(keepends=True)
    lines[4], lines[5] = lines[5], lines[4]  # rows 4 and 5 out of time order
    said = _same_message(*_pair(tmp_path, "late.csv", "".join(lines)))
    assert "LOG: row 5 (line 6)" in said
    plain, gz = _pair(tmp_path, "cols.csv", "TIMESTAMP,prompt,out\n0,16,3\n")
    for path in (plain, gz):
        with pytest.raises(ValueError, match=r"row 0 \(header\), missing column.*present: \['TIMESTAMP'"):
            check_log(path, CSV_COLUMNS)
    with pytest.raises(ValueError, match="a CSV cell holds no list"):
        check_log(gz, {**CSV_COLUMNS, "hash_ids": "h"})


def test_a_gzipped_long_line_or_empty_log_is_refused_as_the_plain_one_is(tmp_path, monkeypatch):
    monkeypatch.setattr(hrequests, "CSV_BLOCK_BYTES", 1024)
    _, gz = _pair(tmp_path, "long.jsonl", _jsonl_text(3) + '{"timestamp": 20, "pad": "' + "x" * 4000 + '"}\n')
    with pytest.raises(ValueError, match=r"long\.jsonl\.gz: row 4 \(line 4\) is longer than 1,024 bytes"):
        _read(gz)
    empty = tmp_path / "empty.csv.gz"
    empty.write_bytes(gzip.compress(b""))
    with pytest.raises(
        ValueError, match=r"empty\.csv\.gz: the request log is empty \(0 bytes once decompressed\)"
    ):
        check_log(empty, CSV_COLUMNS)
    zero = tmp_path / "zero.jsonl.gz"
    zero.write_bytes(b"")
    with pytest.raises(ValueError, match=r"zero\.jsonl\.gz: the request log is empty \(0 bytes\)"):
        check_log(zero, JSONL_COLUMNS)


def test_a_gzipped_log_passes_the_plans_check(tmp_path):
    from headroom.core import config as hconfig
    from headroom.trace import source as htsource
    from tests.pipeline import ROOT

    _, gz = _pair(tmp_path, "log.csv", _csv_text(10))
    cfg = hconfig.load(ROOT / "config/config.yaml")
    cfg["trace"]["source"] = str(gz)
    study = hconfig.resolve(cfg, cuda_available=True, check_source=htsource.check)
    assert study["trace"]["source"] == str(gz)


def test_a_lineage_edge_to_a_plain_log_holds_once_the_log_is_shipped_gzipped(tmp_path):
    # a reference recorded from data/.../log.jsonl keeps verifying when the log is replaced by its
    # gzip (the same bytes once decompressed); another content, or a cut gzip, breaks the edge
    import pandas as pd

    from headroom.core import artifacts, integrity

    log = tmp_path / "data/log.jsonl"
    log.parent.mkdir()
    log.write_text(_jsonl_text(10))
    art = tmp_path / "results/s/scratch.parquet"
    inputs = {"data/log.jsonl": artifacts.hash_file(log)}
    artifacts.write(pd.DataFrame({"a": [1]}), art, kind="scratch", provenance={"inputs": inputs})
    assert integrity.artifact_problems(art, tmp_path, {}) == []
    gz = log.with_name("log.jsonl.gz")
    packed = gzip.compress(log.read_bytes(), 9, mtime=0)
    gz.write_bytes(packed)
    log.unlink()
    assert integrity.artifact_problems(art, tmp_path, {}) == []
    for other in (gzip.compress(b"other bytes"), packed[: len(packed) // 2], b"not gzip"):
        gz.write_bytes(other)
        (problem,) = integrity.artifact_problems(art, tmp_path, {})
        assert "lineage input data/log.jsonl no longer exists" in problem


@pytest.mark.parametrize("kind", ["attention", "family"])
def test_a_references_plain_log_now_shipped_gzipped_is_named_as_shipped(tmp_path, kind):
    # `headroom plan`: a reference recorded from data/log.csv (attention: its trace records the
    # source; a family: its steps artifact's input) matches a study naming data/log.csv.gz once the
    # log is shipped gzipped, the recorded bytes once decompressed (as verify's lineage rule above);
    # another content keeps the recorded name
    import pandas as pd

    from headroom.core import artifacts
    from headroom.measure import cost

    log = tmp_path / "data" / "log.csv"
    log.parent.mkdir()
    log.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n0.0,16,1\n")
    inputs = {"data/log.csv": artifacts.hash_file(log)}
    ref = tmp_path / "ref"
    frame = pd.DataFrame({"a": [1]})
    if kind == "attention":
        extra = {"source": "data/log.csv", "source_blake3": inputs["data/log.csv"]}
        artifacts.write(
            frame, ref / "trace.parquet", kind="scratch", provenance={"inputs": inputs, "extra": extra}
        )
    else:
        artifacts.write(frame, ref / "trace.parquet", kind="scratch", provenance={"inputs": {}})
        artifacts.write(frame, ref / "steps.parquet", kind="scratch", provenance={"inputs": inputs})
    assert cost._trace_source(ref, tmp_path) == "data/log.csv"
    gz = log.with_name("log.csv.gz")
    gz.write_bytes(gzip.compress(log.read_bytes(), 9, mtime=0))
    assert cost._trace_source(ref, tmp_path) == "data/log.csv"  # the plain log is still there
    log.unlink()
    assert cost._trace_source(ref, tmp_path) == "data/log.csv.gz"
    gz.write_bytes(gzip.compress(b"other bytes"))
    assert cost._trace_source(ref, tmp_path) == "data/log.csv"


@pytest.mark.parametrize("name", ["log.csv", "log.csv.gz", "padded.csv.gz"])
def test_a_csv_log_reaches_arrow_only_as_an_arrow_native_stream(tmp_path, monkeypatch, name):
    """Every CSV log, plain or gzipped, reaches pyarrow.csv.open_csv as an Arrow-native stream
    (requests._arrow_stream), never a Python file object: open_csv's readahead wraps one in a
    PythonFile whose last reference an Arrow worker thread may drop after the interpreter began to
    exit; it needs the GIL it can no longer take, and the process aborts after doing its work
    ("terminate called without an active exception", rc -6; a script that read the first block of
    a gzipped 8.6 MB CSV log and exited did so in most runs under load). A gzip padded with zero
    bytes (gzip.open reads it, Arrow's decompressor does not) is read again from a decompressed copy,
    to the same requests as its plain form, over several blocks."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    monkeypatch.setattr(hrequests, "CSV_BLOCK_BYTES", 4096)
    text = _csv_text(3000)
    plain, gz = _pair(tmp_path, "log.csv", text)
    if name == "padded.csv.gz":
        half = len(text) // 2
        padded = gzip.compress(text[:half].encode()) + bytes(512) + gzip.compress(text[half:].encode())
        (tmp_path / name).write_bytes(padded + bytes(512))
    real, seen = pacsv.open_csv, []

    def open_csv(source, *args, **kwargs):
        native = isinstance(source, pa.NativeFile) and not isinstance(source, pa.PythonFile)
        assert native, f"open_csv given a Python-owned source: {type(source).__name__}"
        seen.append(type(source).__name__)
        return real(source, *args, **kwargs)

    monkeypatch.setattr(pacsv, "open_csv", open_csv)
    got = _read(tmp_path / name)
    assert seen, "the log was read without pyarrow.csv.open_csv: the spy saw nothing"
    assert len(seen) == (2 if name == "padded.csv.gz" else 1), seen
    monkeypatch.setattr(pacsv, "open_csv", real)
    _same(got, _read(plain))
