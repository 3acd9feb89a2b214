"""Request logs -> invocations: reading and checking logs, and the continuous-batching model,
on hand-made logs whose answers are worked out by hand in the comments."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from headroom.trace.requests import DECODE, PREFILL, Requests, read_request_log, simulate

COLUMNS = {"arrival": "TIMESTAMP", "context_tokens": "ContextTokens", "generated_tokens": "GeneratedTokens"}


def write_log(path: Path, rows: list[tuple], header: str = "TIMESTAMP,ContextTokens,GeneratedTokens") -> Path:
    path.write_text(header + "\n" + "".join(",".join(str(v) for v in row) + "\n" for row in rows))
    return path


def requests(arrival_s, context, generated) -> Requests:
    n = len(arrival_s)
    return Requests(
        np.round(np.asarray(arrival_s, dtype=float) * 1e9).astype(np.int64),
        np.asarray(context, dtype=np.int64),
        np.asarray(generated, dtype=np.int64),
        np.arange(1, n + 1, dtype=np.int64),
    )


def test_reads_timestamps_to_integer_nanoseconds_from_the_first_request(tmp_path):
    log = write_log(
        tmp_path / "log.csv",
        [("2023-11-16 18:15:46.6805900", 374, 44), ("2023-11-16 18:15:50.9951690", 396, 109)],
    )
    r = read_request_log(log, COLUMNS)
    assert r.arrival_ns.tolist() == [0, 4_314_579_000]
    assert r.context.tolist() == [374, 396]
    assert r.generated.tolist() == [44, 109]
    assert r.row.tolist() == [1, 2]


def test_reads_parquet_with_numeric_seconds_and_a_column_mapping(tmp_path):
    path = tmp_path / "log.parquet"
    pd.DataFrame(
        {"t": [10.0, 10.5, 12.25], "prompt": [5, 6, 7], "out": [1, 2, 3], "extra": ["a", "b", "c"]}
    ).to_parquet(path)
    r = read_request_log(path, {"arrival": "t", "context_tokens": "prompt", "generated_tokens": "out"})
    assert r.arrival_ns.tolist() == [0, 500_000_000, 2_250_000_000]
    assert r.context.tolist() == [5, 6, 7] and r.generated.tolist() == [1, 2, 3]


def test_two_overlapping_requests_share_batched_decode_invocations():
    # A: arrives 0 ms, context 10, generates 3 -> eligible at tick 1 (20 ms), decodes ticks 1..3.
    # B: arrives 30 ms, context 20, generates 2 -> eligible at tick 2 (40 ms), decodes ticks 2..3.
    s = simulate(requests([0.0, 0.030], [10, 20], [3, 2]), max_batch=8, decode_step_ns=20_000_000)
    assert s.time_ns.tolist() == [0, 20_000_000, 30_000_000, 40_000_000, 60_000_000]
    assert s.phase.tolist() == [PREFILL, DECODE, PREFILL, DECODE, DECODE]
    assert s.batch.tolist() == [1, 1, 1, 2, 2]
    assert s.request.tolist() == [0, -1, 1, -1, -1]
    # tick 1: A at 11; tick 2: A 12, B 21; tick 3: A 13, B 22.
    assert s.kv_max.tolist() == [10, 11, 20, 21, 22]
    assert s.kv_mean.tolist() == [10.0, 11.0, 20.0, 16.5, 17.5]


def test_max_batch_makes_later_requests_wait_first_come_first_served():
    # Three requests at t=0, max_batch 2, 1 s ticks. Tick 1: A and B (kv 6, 6). Tick 2: A 7, B 7;
    # A is done. Tick 3: B 8 and C, admitted into A's slot, 8. Then both are done.
    s = simulate(requests([0, 0, 0], [5, 5, 7], [2, 3, 1]), max_batch=2, decode_step_ns=1_000_000_000)
    decode = s.phase == DECODE
    assert s.time_ns[decode].tolist() == [1_000_000_000, 2_000_000_000, 3_000_000_000]
    assert s.batch[decode].tolist() == [2, 2, 2]
    assert s.kv_max[decode].tolist() == [6, 7, 8]
    assert s.kv_mean[decode].tolist() == [6.0, 7.0, 8.0]
    # Equal times: prefills first, in log order.
    assert s.phase[:3].tolist() == [PREFILL] * 3 and s.request[:3].tolist() == [0, 1, 2]


def test_every_generated_token_is_one_decode_step_of_one_sequence():
    rng = np.random.default_rng(7)
    n = 40
    r = requests(np.cumsum(rng.exponential(0.05, n)), rng.integers(1, 100, n), rng.integers(1, 30, n))
    for max_batch in (1, 3, 64):
        s = simulate(r, max_batch=max_batch, decode_step_ns=20_000_000)
        decode = s.phase == DECODE
        assert s.batch[decode].sum() == r.generated.sum()
        assert s.batch.max() <= max_batch
        assert np.all(np.diff(s.time_ns) >= 0)
        assert (s.phase == PREFILL).sum() == n


def test_end_ns_cuts_the_stream_without_changing_what_comes_before():
    r = requests([0.0, 0.01, 0.05, 0.2], [8, 9, 10, 11], [20, 5, 7, 3])
    full = simulate(r, max_batch=2, decode_step_ns=20_000_000)
    cut = simulate(r, max_batch=2, decode_step_ns=20_000_000, end_ns=100_000_000)
    keep = full.time_ns < 100_000_000
    assert cut.time_ns.tolist() == full.time_ns[keep].tolist()
    assert cut.batch.tolist() == full.batch[keep].tolist()
    assert cut.kv_max.tolist() == full.kv_max[keep].tolist()


# One bad log per line, with the message it must give: a table (hence the fmt: skip below).
@pytest.mark.parametrize(
    ("rows", "header", "match"),
    [
        ([("2023-01-01 00:00:00", 5, 1)], "TIMESTAMP,ContextTokens,Output", r"row 0 \(header\).*generated_tokens -> 'GeneratedTokens'"),
        ([("2023-01-01 00:00:00", 5, 1), ("yesterday", 5, 1)], None, r"row 2 \(line 3\), column 'TIMESTAMP': unparsable timestamp 'yesterday'"),
        ([("2023-01-01 00:00:02", 5, 1), ("2023-01-01 00:00:01", 5, 1)], None, r"row 2 \(line 3\), column 'TIMESTAMP'.*earlier than row 1"),
        ([("2023-01-01 00:00:00", 5, 1), ("2023-01-01 00:00:01", 0, 1)], None, r"row 2 \(line 3\), column 'ContextTokens': non-positive token count '0'"),
        ([("2023-01-01 00:00:00", 5, -3)], None, r"row 1 \(line 2\), column 'GeneratedTokens': non-positive token count '-3'"),
        ([("2023-01-01 00:00:00", 5, 1), ("2023-01-01 00:00:01", 5, 1), ("2023-01-01 00:00:02", "2.5", 1)], None, r"row 3 \(line 4\), column 'ContextTokens': non-integer token count '2.5'"),
        ([("2023-01-01 00:00:00", 5, "")], None, r"row 1 \(line 2\), column 'GeneratedTokens': unparsable"),
        ([(0.5, 5, 1), (1.0, 5, 1), ("x", 5, 1)], None, r"row 3 \(line 4\), column 'TIMESTAMP': unparsable arrival 'x'"),
        ([(3.0, 5, 1), (2.0, 5, 1)], None, r"row 2 \(line 3\), column 'TIMESTAMP'.*earlier"),
        ([], None, "no rows"),
    ],
)  # fmt: skip
def test_bad_logs_fail_naming_file_row_and_column(tmp_path, rows, header, match):
    log = write_log(tmp_path / "bad.csv", rows, header or "TIMESTAMP,ContextTokens,GeneratedTokens")
    with pytest.raises(ValueError, match=match) as err:
        read_request_log(log, COLUMNS)
    assert str(log) in str(err.value)


def test_a_missing_or_foreign_file_fails_naming_it(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        read_request_log(tmp_path / "absent.csv", COLUMNS)
    (tmp_path / "log.json").write_text("{}")
    with pytest.raises(ValueError, match=r"log\.json.*\.csv, \.parquet or \.jsonl"):
        read_request_log(tmp_path / "log.json", COLUMNS)


# -- bad request logs: each error names the file (and the row/line and column where there is one) --
def test_a_zero_byte_csv_is_named(tmp_path):
    log = tmp_path / "empty.csv"
    log.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty\.csv: the request log is empty \(0 bytes\)"):
        read_request_log(log, COLUMNS)


def test_a_parquet_cut_in_half_is_named(tmp_path):
    full = tmp_path / "full.parquet"
    pd.DataFrame({"TIMESTAMP": [0.0, 1.0], "ContextTokens": [3, 4], "GeneratedTokens": [5, 6]}).to_parquet(
        full
    )
    cut = tmp_path / "cut.parquet"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"cut\.parquet: not a readable Parquet file"):
        read_request_log(cut, COLUMNS)


def test_a_latin1_byte_names_the_file_and_line(tmp_path):
    log = tmp_path / "latin1.csv"
    good = "2023-11-16 18:15:46,374,44\n"
    log.write_bytes(
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n" + good * 3).encode() + b"2023-11-16 18:15:47,37\xe9,44\n"
    )
    with pytest.raises(ValueError, match=r"latin1\.csv: line 5 \(data row 4\), byte \d+: not UTF-8"):
        read_request_log(log, COLUMNS)


def test_a_latin1_byte_in_the_header_names_the_file(tmp_path):
    log = tmp_path / "h.csv"
    log.write_bytes(b"TIMESTAMP,Context\xe9,GeneratedTokens\n1,2,3\n")
    with pytest.raises(ValueError, match=r"h\.csv: line 1 \(header\), byte 17: not UTF-8"):
        read_request_log(log, COLUMNS)


@pytest.mark.parametrize("value", ["99999999999999999999999", "9223372036854775808"])
def test_token_counts_beyond_int64_name_row_and_column(tmp_path, value):
    log = write_log(tmp_path / "big.csv", [(0, 3, 4), (1, value, 4)])
    with pytest.raises(ValueError, match=r"big\.csv: row 2 \(line 3\), column 'ContextTokens': out-of-range"):
        read_request_log(log, COLUMNS)


@pytest.mark.parametrize(
    "column, values, expected",
    [
        ("ContextTokens", [True, False], "bool"),
        ("GeneratedTokens", pd.to_datetime(["2024-01-01", "2024-01-02"]), "timestamp"),
        ("TIMESTAMP", [True, True], "bool"),
    ],
)
def test_a_parquet_with_boolean_or_timestamp_token_columns_is_refused(tmp_path, column, values, expected):
    frame = pd.DataFrame({"TIMESTAMP": [0.0, 1.0], "ContextTokens": [3, 4], "GeneratedTokens": [5, 6]})
    frame[column] = values
    log = tmp_path / "typed.parquet"
    frame.to_parquet(log)
    with pytest.raises(ValueError, match=rf"typed\.parquet: column '{column}' \(\w+\) has type {expected}"):
        read_request_log(log, COLUMNS)


def test_a_csv_padded_with_zero_bytes_fails_fast_in_bounded_memory(tmp_path):
    # The 2 GB case in small: 200 valid rows, then 50 MB of zero bytes. Reading it whole took the
    # job down (23.7 GB for 2 GB); a block-wise reader stops at the first block it cannot parse.
    import resource
    import time

    log = tmp_path / "padded.csv"
    rows = "".join(f"{i},{i + 1},{i + 2}\n" for i in range(200))
    with open(log, "wb") as fh:
        fh.write(("TIMESTAMP,ContextTokens,GeneratedTokens\n" + rows).encode())
        zeros = b"\0" * (1 << 20)
        for _ in range(50):
            fh.write(zeros)
    # parse one small log first: pandas' lazy imports of its parsers are no part of what is measured
    read_request_log(write_log(tmp_path / "warm.csv", [(0, 3, 4), (1, 5, 6)]), COLUMNS)
    before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"padded\.csv: after data row 200 \(line 201\): not a CSV row"):
        read_request_log(log, COLUMNS)
    assert time.perf_counter() - start < 5
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before_kb) / 1024
    assert grown_mb < 40, f"peak memory grew {grown_mb:.0f} MB reading a 50 MB file"


def test_a_csv_reads_only_the_mapped_columns(tmp_path):
    log = write_log(
        tmp_path / "wide.csv",
        [(0, 3, 4, "caf\u00e9 ok"), (1, 5, 6, "x")],
        header="TIMESTAMP,ContextTokens,GeneratedTokens,Note",
    )
    r = read_request_log(log, COLUMNS)
    assert r.context.tolist() == [3, 5] and r.generated.tolist() == [4, 6]


# -- issue 31, cases 9, 10, 12, 13: arrivals past int64 ns, deep JSON, null block hashes ----------
@pytest.mark.parametrize(
    "values, fmt, unit, likely",
    [
        ([1_700_000_000_000, 1_700_000_000_500, 1_700_000_009_500], None, "seconds", "milliseconds"),
        ([1_700_000_000_000_000, 1_700_000_000_500_000], None, "seconds", "microseconds"),
        ([1_700_000_000_000_000, 1_700_000_000_500_000], "milliseconds", "milliseconds", "microseconds"),
    ],
    ids=["ms-as-seconds", "us-as-seconds", "us-as-ms"],
)
def test_epoch_numbers_past_int64_nanoseconds_are_refused_naming_row_and_likely_unit(
    tmp_path, values, fmt, unit, likely
):
    # case 9: they wrapped silently to one value, so every arrival became 0 and a decreasing log
    # passed the order check
    log = write_log(tmp_path / "log.csv", [(v, 10, 5) for v in values])
    with pytest.raises(ValueError) as exc:
        read_request_log(log, COLUMNS, fmt)
    msg = str(exc.value)
    assert f"{log}: row 1 (line 2), column 'TIMESTAMP'" in msg and f"read as {unit}" in msg
    assert f"looks like epoch {likely}: set trace.arrival_format to {likely}" in msg


def test_epoch_units_read_as_what_they_are(tmp_path):
    ms = write_log(tmp_path / "ms.csv", [(1_700_000_000_000, 10, 5), (1_700_000_009_500, 10, 5)])
    assert read_request_log(ms, COLUMNS, "milliseconds").arrival_ns.tolist() == [0, 9_500_000_000]
    us = write_log(tmp_path / "us.csv", [(1_700_000_000_000_000, 10, 5), (1_700_000_000_250_000, 10, 5)])
    assert read_request_log(us, COLUMNS, "microseconds").arrival_ns.tolist() == [0, 250_000_000]


@pytest.mark.parametrize("stamp", ["9999-01-01T00:00:00", "1500-06-01 12:00:00"])
def test_a_timestamp_outside_int64_nanoseconds_names_file_row_and_column(tmp_path, stamp):
    # case 10: OutOfBoundsDatetime naming no file, row or column
    log = write_log(tmp_path / "log.csv", [("2023-11-16 18:15:46", 10, 5), (stamp, 10, 5)])
    with pytest.raises(
        ValueError, match=rf"{log}: row 2 \(line 3\), column 'TIMESTAMP': timestamp '{stamp}'"
    ):
        read_request_log(log, COLUMNS)


def test_a_parquet_timestamp_outside_int64_nanoseconds_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "log.parquet"
    stamps = pa.array([0, 253_370_764_800], pa.timestamp("s"))  # 1970, then 9999-01-01
    pq.write_table(
        pa.table({"TIMESTAMP": stamps, "ContextTokens": [10, 10], "GeneratedTokens": [5, 5]}), path
    )
    with pytest.raises(ValueError, match=rf"{path}: row 2, column 'TIMESTAMP': timestamp"):
        read_request_log(path, COLUMNS)


@pytest.mark.parametrize("depth", [100, 200_000])
def test_a_deeply_nested_jsonl_value_is_refused_before_parsing(tmp_path, depth):
    # case 12: a RecursionError with a traceback, at plan and job time
    import json

    from headroom.trace.requests import check_log

    keys = {"arrival": "t", "context_tokens": "c", "generated_tokens": "g"}
    good = json.dumps({"t": 0, "c": 10, "g": 5})
    deep = '{"t": 1, "c": 10, "g": 5, "x": ' + "[" * depth + "]" * depth + "}"
    first = tmp_path / "first.jsonl"
    first.write_text(deep + "\n")
    with pytest.raises(ValueError, match=rf"{first}: row 1 \(line 1\): JSON nested deeper than 64 levels"):
        check_log(first, keys)  # what the plan runs
    later = tmp_path / "later.jsonl"
    later.write_text(good + "\n" + deep + "\n")
    check_log(later, keys)
    with pytest.raises(ValueError, match=rf"{later}: row 2 \(line 2\): JSON nested deeper"):
        read_request_log(later, keys)  # what the job runs
    flat = tmp_path / "flat.jsonl"  # strings holding brackets nest nothing
    flat.write_text(json.dumps({"t": 0, "c": 10, "g": 5, "note": "[" * 500}) + "\n")
    assert len(read_request_log(flat, keys)) == 1


def test_a_null_block_hash_in_a_parquet_log_names_its_own_row_and_value(tmp_path):
    # case 13: a null anywhere made NumPy read every row's hashes as floats, so row 1 was named with
    # array([0.])
    path = tmp_path / "log.parquet"
    hashes = [[i] if i != 5 else [None] for i in range(8)]
    pd.DataFrame(
        {"TIMESTAMP": np.arange(8, dtype=float), "ContextTokens": 10, "GeneratedTokens": 5, "h": hashes}
    ).to_parquet(path)
    with pytest.raises(ValueError, match=rf"{path}: row 6, column 'h': \[None\] is not a list of integer"):
        read_request_log(path, {**COLUMNS, "hash_ids": "h"}, block_tokens=512)
    hashes[5] = None  # a null list, not a null hash
    pd.DataFrame(
        {"TIMESTAMP": np.arange(8, dtype=float), "ContextTokens": 10, "GeneratedTokens": 5, "h": hashes}
    ).to_parquet(path)
    with pytest.raises(ValueError, match=rf"{path}: row 6, column 'h': None is not a list"):
        read_request_log(path, {**COLUMNS, "hash_ids": "h"}, block_tokens=512)
