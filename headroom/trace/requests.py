"""Request logs -> attention invocations: reading, validating and the continuous-batching model.

A request log is any table with three facts per request: when it arrived, how many context
(prompt) tokens it carried and how many tokens were generated for it, and optionally a fourth: the
hashes of its prompt's prefix blocks (`hash_ids`, for the prefix-cache model of
headroom.trace.prefix_cache). `read_request_log` reads one from CSV, Parquet or JSONL (a CSV or JSONL
log also gzipped, as it is: `.csv.gz`, `.jsonl.gz`) and checks it; `simulate` turns requests into a
chronological stream of prefill and decode invocations. The model, in full (docs/traces.md says the same in prose):

- Time is integer nanoseconds since the log's first arrival, so the model is exact and
  byte-for-byte repeatable.
- Each request is one prefill invocation at its arrival: batch 1, q_len = kv_len = context.
- Decode runs on a clock of ticks, tick n at n * decode_step_ns. A request becomes eligible at
  the first tick strictly after its arrival. At every tick the engine first retires sequences
  that have generated all their tokens, then admits eligible requests first-come first-served
  (log order breaks ties) while fewer than max_batch sequences are active, then runs one batched
  decode invocation over all active sequences. A sequence admitted at tick s has kv_len
  context + (n - s) + 1 at tick n, so its kv_len runs from context + 1 to context + generated.
  Ticks with no active sequence emit nothing. Prefill takes no engine time (a stated
  simplification: the model is about which shapes occur and when, not about latency).
- Invocations are ordered by time; at equal times a prefill comes before a decode, and prefills
  keep log order.
"""

from __future__ import annotations

import gzip
import heapq
import json
import os
import re
import stat
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from headroom.core import defaults

NS_PER_S = 1_000_000_000
PREFILL, DECODE = 0, 1  # phase codes; prefill sorts first at equal times
#: The trace's `step` values by code (Stream.step): what the engine step an invocation belongs to
#: ran. Without chunked prefill every prefill is `prefill` and every decode `decode`.
STEPS = ("prefill", "decode", "mixed-prefill", "mixed-decode")
#: The deployment profile's step kind of each `step` value: only a step of decodes alone is
#: decode-only; a step with a prefill (chunk) is mixed, its decodes included. Without a `step` column
#: (no serving model), a decode invocation stands for a decode-only step and a prefill for a mixed one.
STEP_KIND = {"decode": "decode-only", "prefill": "mixed", "mixed-prefill": "mixed", "mixed-decode": "mixed"}
STEP_KIND_OF_PHASE = {"decode": "decode-only", "prefill": "mixed"}


@dataclass(frozen=True)
class Requests:
    """Requests in log order. arrival_ns is relative to the first request (so it starts at 0)."""

    arrival_ns: np.ndarray  # int64, non-decreasing
    context: np.ndarray  # int64, >= 1
    generated: np.ndarray  # int64, >= 1
    row: np.ndarray  # int64, 1-based data row in the source (header excluded)
    #: The prompt's prefix-block hashes, all requests' in one int64 array: request i's are
    #: blocks[block_start[i]:block_start[i + 1]]. None: the log has none (no prefix cache).
    blocks: np.ndarray | None = None
    block_start: np.ndarray | None = None
    #: Prompt tokens served from the prefix cache (< context); None: no cache (all zero).
    cached: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.arrival_ns)


@dataclass(frozen=True)
class Stream:
    """Invocations in chronological order, before window, sampling and rounding."""

    time_ns: np.ndarray  # int64
    phase: np.ndarray  # int8: PREFILL or DECODE
    batch: np.ndarray  # int64
    request: np.ndarray  # int64: index into Requests for a prefill, -1 for a decode
    kv_max: np.ndarray  # int64: longest kv_len among the batch's sequences (a prefill: context)
    kv_mean: np.ndarray  # float64: mean kv_len over the batch's sequences (a prefill: context)
    # The serving fields, None in a plain model (no prefix cache, chunking or kv_lens: then every
    # prefill's q_len is its kv_max and every step its phase), so it keeps its memory footprint.
    q_len: np.ndarray | None  # int64: a prefill's new (query) tokens, <= kv_max; 1 for a decode
    step: np.ndarray | None  # int8: the engine step's kind, an index into STEPS
    segment: np.ndarray | None  # int64: a decode's index into `bases`; -1 for a prefill
    #: Per segment of constant decode batch, its sequences' kv bases (int64): a sequence's kv_len at
    #: tick t (time t * decode_step_ns) is its base + t.
    bases: tuple[np.ndarray, ...] = ()

    ARRAYS = ("time_ns", "phase", "batch", "request", "kv_max", "kv_mean", "q_len", "step", "segment")

    def take(self, index: np.ndarray) -> Stream:
        fields = (getattr(self, f) for f in self.ARRAYS)
        return Stream(*(None if a is None else a[index] for a in fields), bases=self.bases)

    def kv_lens(self, i: int, decode_step_ns: int) -> np.ndarray:
        """Decode row i's per-sequence kv_len, in the engine's order."""
        return self.bases[self.segment[i]] + self.time_ns[i] // decode_step_ns

    def __len__(self) -> int:
        return len(self.time_ns)


def _where(path: Path, row: int, header_lines: int | None) -> str:
    """Where a data row is: its 1-based row and, in a text log, its file line (CSV: after the header)."""
    line = "" if header_lines is None else f" (line {row + header_lines})"
    return f"{path}: row {row}{line}"


# Bounded memory. A log is read a block at a time (a CSV block of CSV_BLOCK_BYTES, a Parquet batch
# of PARQUET_BATCH_ROWS rows) and each block is parsed and checked before the next is read, so only
# the parsed requests are kept: 32 bytes per request (arrival, context, generated, row: int64 each)
# beside one block's text. A row longer than a block (binary data, a file padded with zero bytes)
# fails at once instead of being buffered whole. At most MAX_REQUESTS requests, each token count at
# most MAX_TOKENS (the schema's bounds, headroom/core/schema.yaml: one place for both).
CSV_BLOCK_BYTES = 1 << 20
PARQUET_BATCH_ROWS = 65_536
INT64_MAX = 2**63 - 1
MAX_REQUESTS = defaults.bound("requests")
MAX_TOKENS = defaults.bound("tokens")
#: The request-log formats by file suffix (a `.pq` is Parquet): the one place that says which name is
#: which format (log_format). A text format (CSV, JSONL) may also be gzipped, its name ending `.gz`
#: (`log.csv.gz`, `log.jsonl.gz`): read as it is, a stream through gzip (JSONL: gzip.open, _open;
#: CSV: Arrow's own decompressor, _arrow_stream, its faults judged by gzip.open); Parquet
#: compresses its own columns, so `.parquet.gz` is refused.
LOG_FORMATS = {".csv": ".csv", ".parquet": ".parquet", ".pq": ".parquet", ".jsonl": ".jsonl"}
GZIP_FORMATS = (".csv", ".jsonl")
#: What trace.source may name: a regular, readable, non-empty file with one of these suffixes.
LOG_SUFFIXES = (*LOG_FORMATS, *(f"{s}.gz" for s in LOG_FORMATS if LOG_FORMATS[s] in GZIP_FORMATS))
#: The accepted kinds, as a message names them.
LOG_KINDS = "a .csv, .parquet or .jsonl request log, or a gzipped .csv.gz or .jsonl.gz one"
#: What a gzip stream raises when it is not gzip (BadGzipFile, an OSError), truncated (EOFError) or
#: corrupt (zlib.error, or BadGzipFile on a CRC or length mismatch).
_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)
#: Prefix-block hashes all requests of a log may carry together (8 bytes each in memory).
MAX_BLOCKS = 50_000_000
#: `trace.arrival_format` values that name a unit of plain numbers (ns per unit); null reads ISO 8601
#: timestamps or numbers of seconds (decided by the values), any other string is a strptime format.
ARRIVAL_UNITS = {"seconds": NS_PER_S, "milliseconds": 1_000_000, "microseconds": 1_000}
#: What unit an epoch number most likely is, by its size (today: ~1.7e9 s, 1.7e12 ms, 1.7e15 us,
#: 1.7e18 ns): the first whose floor it reaches. Named when numbers read in another unit overflow.
EPOCH_UNIT_FLOORS = ((1e17, "nanoseconds"), (1e14, "microseconds"), (1e11, "milliseconds"))
#: Deepest nesting a JSONL line may hold (a request is an object of numbers and one list): the JSON
#: parser recurses, so a line of thousands of '[' is refused before it is parsed.
JSONL_MAX_DEPTH = 64
#: The times int64 nanoseconds hold (1677-09-21 .. 2262-04-11).
_NS_MIN, _NS_MAX = pd.Timestamp.min.tz_localize("UTC"), pd.Timestamp.max.tz_localize("UTC")


def _gzipped(path: Path) -> bool:
    return path.suffix.lower() == ".gz"


def log_format(path: str | Path) -> str:
    """A request log's format by its name: ".csv", ".jsonl" or ".parquet" (LOG_FORMATS; a gzipped
    CSV or JSONL log, `.csv.gz` or `.jsonl.gz`, is its format); ValueError naming the accepted kinds
    for any other name."""
    path = Path(path)
    suffix = Path(path.stem).suffix if _gzipped(path) else path.suffix
    fmt = LOG_FORMATS.get(suffix.lower())
    if fmt is None or (_gzipped(path) and fmt not in GZIP_FORMATS):
        raise ValueError(f"{path}: trace.source must be {LOG_KINDS} (or 'synthetic')")
    return fmt


def _open(path: Path):
    """The log's bytes as a binary stream: a gzipped log decompressed as it is read (gzip.open), any
    other the file itself. A gzip that is not one, truncated or corrupt raises one of _GZIP_ERRORS
    when read: _gzip_errors makes it one line naming the file."""
    return gzip.open(path, "rb") if _gzipped(path) else open(path, "rb")


class _GzipError(ValueError):
    """A gzipped log that is not a whole gzip stream (named once, however deep it was found)."""


def _gzip_error(path: Path, exc: BaseException) -> ValueError:
    what = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
    return _GzipError(
        f"{path}: not a readable gzip file ({what}); truncated, corrupt or not gzip? "
        "`gzip -t` tests it; a plain log must not be named .gz"
    )


def _gzip_fault(path: Path) -> BaseException | None:
    """What reading the whole gzip stream raises (a CRC or length mismatch shows only at its end),
    None if it reads whole; a block at a time, nothing kept."""
    try:
        with _open(path) as fh:
            while fh.read(CSV_BLOCK_BYTES):
                pass
    except _GZIP_ERRORS as exc:
        return exc
    return None


@contextmanager
def _gzip_errors(path: Path) -> Iterator[None]:
    """A gzipped log's stream errors, raised anywhere in the block (a header, a block of rows, a CSV
    reader that reads ahead), as one ValueError naming the file. A corrupt stream may decompress to
    garbage before its CRC is checked: a log's error (not JSON, a missing column) in a gzipped log
    is checked against the whole stream first, and a stream that is not whole is named instead."""
    try:
        yield
    except _GZIP_ERRORS as exc:
        if not _gzipped(path):
            raise
        raise _gzip_error(path, exc) from None
    except _GzipError:
        raise
    except ValueError:
        fault = _gzip_fault(path) if _gzipped(path) else None
        if fault is None:
            raise
        raise _gzip_error(path, fault) from None


def _invalid_utf8_line(path: Path) -> tuple[int, int] | None:
    """(1-based line, byte offset) of the first byte that is not UTF-8, scanning in blocks."""
    import codecs

    decoder = codecs.getincrementaldecoder("utf-8")()
    line, offset = 1, 0
    with _open(path) as fh:
        while block := fh.read(CSV_BLOCK_BYTES):
            try:
                decoder.decode(block)
            except UnicodeDecodeError as exc:
                return line + block[: exc.start].count(b"\n"), offset + exc.start
            line += block.count(b"\n")
            offset += len(block)
    return None


def _csv_header(path: Path) -> list[str]:
    import csv
    import io

    with _open(path) as fh:
        first = fh.readline(CSV_BLOCK_BYTES)
    try:
        text = first.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{path}: line 1 (header), byte {exc.start}: not UTF-8 ({first[exc.start : exc.start + 1]!r}); "
            "save the request log as UTF-8"
        ) from None
    return next(csv.reader(io.StringIO(text)), [])


def _missing_columns(
    path: Path, present: list[str], columns: dict[str, str], where: str = "row 0 (header)"
) -> None:
    missing = [f"{role} -> '{name}'" for role, name in columns.items() if name not in present]
    if not missing:
        return
    # A file that shares no column with the mapping may be anything (a link to /etc/passwd named
    # log.csv): its first line is content, never shown. One that shares some is the log, its names shown.
    shown = (
        f"present: {present}"
        if len(missing) < len(columns)
        else f"it has none of them ({len(present)} field(s), not shown: it may be no request log)"
    )
    raise ValueError(
        f"{path}: {where}, missing column(s) {', '.join(missing)}; {shown}. "
        "Map the log's columns with trace.columns."
    )


def _arrow_stream(path: Path) -> pa.NativeFile:
    """The log's bytes as an Arrow-native stream for pyarrow.csv.open_csv: Arrow's own file reader,
    a gzipped log through Arrow's own gzip decompressor, read a block at a time as _open's are.
    Never a Python file object: open_csv's readahead wraps one in a PythonFile whose last reference
    an Arrow worker thread may drop after the interpreter began to exit; that thread then needs the
    GIL, CPython 3.11 ends it with pthread_exit inside a noexcept C++ destructor, and the process
    aborts after doing its work (rc -6: "terminate called without an active exception", or "Fatal
    Python error: PyGILState_Release"; the fault headroom/core/integrity.py's contract check had;
    a script reading the first block of an 8.6 MB gzipped CSV log and exiting: 172 of 200 runs
    under load, and 2 hung). A log that cannot be opened raises
    Python's own OSError, as _open would."""
    try:
        return pa.input_stream(str(path), compression="gzip" if _gzipped(path) else None)
    except OSError:
        with open(path, "rb"):
            pass
        raise


@contextmanager
def _gunzipped(path: Path) -> Iterator[Path]:
    """A gzipped log decompressed by Python's gzip (_open) into a temporary file, a block at a time
    (disk, not memory), removed on leaving: for the rare stream gzip.open reads whole and Arrow's
    decompressor does not (zero bytes padding it between or after members)."""
    import shutil
    import tempfile

    with tempfile.TemporaryDirectory(prefix="headroom-log-") as tmp:
        plain = Path(tmp) / path.stem
        with _open(path) as src, open(plain, "wb") as dst:
            shutil.copyfileobj(src, dst, CSV_BLOCK_BYTES)
        yield plain


def _csv_batches(path: Path, names: list[str]) -> Iterator[pa.RecordBatch]:
    """The named columns as text, a block at a time, parsed from an Arrow-native stream
    (_arrow_stream). A gzipped log whose stream Arrow refuses is judged by Python's gzip, as
    gzip.open read it before: one that is not whole is _gzip_error's one line; one that is (zero
    padding) is read again from its decompressed copy (_gunzipped), past the rows already given.
    One difference is left: Arrow's decompressor also takes a zlib-format stream after a gzip member,
    which gzip.open refused ("Not a gzipped file"); such a log now reads."""
    import pyarrow.csv as pacsv

    bad_rows: list[int] = []

    def on_invalid(row) -> str:
        bad_rows.append(row.number if row.number is not None else -1)
        return "error"

    def reader(stream: pa.NativeFile) -> pacsv.CSVStreamingReader:
        return pacsv.open_csv(
            stream,
            read_options=pacsv.ReadOptions(block_size=CSV_BLOCK_BYTES, use_threads=False),
            parse_options=pacsv.ParseOptions(invalid_row_handler=on_invalid),
            convert_options=pacsv.ConvertOptions(
                include_columns=names,
                column_types={n: pa.string() for n in names},
                strings_can_be_null=False,
            ),
        )

    rows = 0

    def batches(stream: pa.NativeFile, skip: int = 0) -> Iterator[pa.RecordBatch]:
        """reader(stream)'s batches past its first ``skip`` rows (those already given), counted."""
        nonlocal rows
        for batch in reader(stream):
            if skip:
                if skip >= batch.num_rows:
                    skip -= batch.num_rows
                    continue
                batch, skip = batch.slice(skip), 0
            rows += batch.num_rows
            yield batch

    try:
        try:
            with _arrow_stream(path) as stream:
                yield from batches(stream)
        except OSError:
            if not _gzipped(path):
                raise
            fault = _gzip_fault(path)
            if fault is not None:
                raise _gzip_error(path, fault) from None
            with _gunzipped(path) as plain, _arrow_stream(plain) as stream:
                yield from batches(stream, skip=rows)
    except pa.ArrowInvalid as exc:
        raise _csv_error(path, str(exc).splitlines()[0][:200], rows, bad_rows) from None


def _csv_error(path: Path, msg: str, rows: int, bad_rows: list[int]) -> ValueError:
    if "UTF8" in msg or "utf8" in msg.lower():
        where = _invalid_utf8_line(path)
        at = f"line {where[0]} (data row {where[0] - 1}), byte {where[1]}" if where else f"after row {rows}"
        return ValueError(f"{path}: {at}: not UTF-8 text; save the request log as UTF-8")
    if bad_rows and bad_rows[0] > 0:
        at = f"line {bad_rows[0]} (data row {bad_rows[0] - 1})"
    else:
        at = f"after data row {rows} (line {rows + 1})"
    return ValueError(
        f"{path}: {at}: not a CSV row of the request log ({msg}); the file is not the CSV it claims to be"
    )


# Parquet column types a role accepts; anything else (a boolean token count, a timestamp of
# tokens) is refused naming the column and its type.
def _token_type_ok(t: pa.DataType) -> bool:
    return (
        pa.types.is_integer(t)
        or pa.types.is_floating(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    )


def _arrival_type_ok(t: pa.DataType) -> bool:
    return _token_type_ok(t) or pa.types.is_timestamp(t)


def _hashes_type_ok(t: pa.DataType) -> bool:
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type)


def _parquet_file(path: Path, columns: dict[str, str]) -> pq.ParquetFile:
    """The open Parquet file, its footer checked: the mapped columns, their types, the row count."""
    try:
        pf = pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ValueError(
            f"{path}: not a readable Parquet file ({str(exc).splitlines()[0][:200]}); truncated or not Parquet?"
        ) from None
    schema = pf.schema_arrow
    _missing_columns(path, schema.names, columns)
    for role, name in columns.items():
        t = schema.field(name).type
        ok = {"arrival": _arrival_type_ok, "hash_ids": _hashes_type_ok}.get(role, _token_type_ok)(t)
        if not ok:
            want = {"arrival": "a timestamp, seconds or text", "hash_ids": "a list of integers"}.get(
                role, "integers (or text holding them)"
            )
            raise ValueError(f"{path}: column '{name}' ({role}) has type {t}; expected {want}")
    if pf.metadata.num_rows > MAX_REQUESTS:
        raise _too_many(path, pf.metadata.num_rows)
    return pf


def _too_many(path: Path, rows: int) -> ValueError:
    return ValueError(
        f"{path}: {rows:,} requests or more, past the most a request log may hold ({MAX_REQUESTS:,}: "
        f"32 bytes each in memory, and the model emits an invocation for every one); cut the log to "
        "the time the study needs"
    )


def _parquet_batches(path: Path, pf: pq.ParquetFile, names: list[str]) -> Iterator[pa.RecordBatch]:
    rows = 0
    try:
        for batch in pf.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=names):
            rows += batch.num_rows
            yield batch
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(
            f"{path}: unreadable after row {rows} ({str(exc).splitlines()[0][:200]}); "
            "the file is not the Parquet it claims to be"
        ) from None
    if rows != pf.metadata.num_rows:
        raise ValueError(f"{path}: its metadata claims {pf.metadata.num_rows} rows but {rows} could be read")


def _kind(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return what
    return "not a regular file"


def check_log(path: str | Path, columns: dict[str, str]) -> None:
    """What a request log must be, checked without reading its rows (the plan runs this before any
    job, headroom.core.config; the reader again): a .csv, .parquet or .jsonl name, or a gzipped .csv.gz
    or .jsonl.gz (log_format); a regular file (not a directory, FIFO, device or socket: links are
    followed), readable and not empty (a gzipped one: nor empty once decompressed); a header (CSV),
    footer (Parquet) or first object (JSONL) holding the mapped columns; `hash_ids` mapped only for
    Parquet and JSONL (a CSV cell holds no list). ValueError naming the file and what it is (a gzip
    that is not one or is cut short within what is read: one line saying so)."""
    path, columns = Path(path), mapped(columns)
    fmt = log_format(path)
    with _gzip_errors(path):
        _check_log(path, fmt, columns)


def _check_log(path: Path, fmt: str, columns: dict[str, str]) -> None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"{path}: trace.source names no such file") from None
    except OSError as exc:
        raise ValueError(f"{path}: trace.source cannot be looked at ({exc.strerror})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(
            f"{path}: trace.source is {_kind(st.st_mode)}, not a regular file; name a CSV, Parquet or JSONL "
            "request log"
        )
    if st.st_size == 0:
        raise ValueError(f"{path}: the request log is empty (0 bytes); expected a header row and requests")
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise ValueError(
            f"{path}: the request log cannot be read ({exc.strerror}); check its permissions"
        ) from None
    if _gzipped(path):
        with _open(path) as fh:
            if not fh.read(1):
                raise ValueError(
                    f"{path}: the request log is empty (0 bytes once decompressed); expected a header row "
                    "and requests"
                )
    if fmt == ".csv" and "hash_ids" in columns:
        raise ValueError(
            f"{path}: trace.columns.hash_ids maps '{columns['hash_ids']}', but a CSV cell holds no list of "
            "block hashes; use a JSONL or Parquet log, or set trace.columns.hash_ids to null (no prefix cache)"
        )
    if fmt == ".csv":
        _missing_columns(path, _csv_header(path), columns)
    elif fmt == ".jsonl":
        _missing_columns(path, _jsonl_keys(path), columns, "row 1 (line 1), the first object")
    else:
        _parquet_file(path, columns)


def _batches(path: Path, columns: dict[str, str]) -> Iterator[dict[str, pd.Series]]:
    """The mapped columns of a checked log, a block at a time: {column name: values}."""
    check_log(path, columns)
    names = list(dict.fromkeys(columns.values()))
    fmt = log_format(path)
    if fmt == ".jsonl":
        return _jsonl_blocks(path, names, {columns["hash_ids"]} if "hash_ids" in columns else set())
    batches = (
        _csv_batches(path, names)
        if fmt == ".csv"
        else _parquet_batches(path, _parquet_file(path, columns), names)
    )
    return ({n: _values(b.column(n)) for n in names} for b in batches if b.num_rows)


# -- JSONL: one JSON object per line, read a block of lines at a time ---------------------------------


def _json_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in one JSON text, strings left out, without parsing
    it (json.loads recurses: a line of 100,000 '[' would raise RecursionError)."""
    if raw.count(b"[") + raw.count(b"{") <= JSONL_MAX_DEPTH:
        return 0  # (cannot nest deeper than it opens: the common line is not scanned)
    text = np.frombuffer(re.sub(rb'"(?:[^"\\]|\\.)*"', b"", raw), np.uint8)
    step = np.isin(text, (ord("["), ord("{"))).astype(np.int64) - np.isin(text, (ord("]"), ord("}")))
    return int(np.cumsum(step).max(initial=0))


def _jsonl_object(path: Path, raw: bytes, line: int) -> dict[str, Any]:
    where = f"{path}: row {line} (line {line})"
    if _json_depth(raw) > JSONL_MAX_DEPTH:
        raise ValueError(
            f"{where}: JSON nested deeper than {JSONL_MAX_DEPTH} levels; a JSONL request log holds one flat "
            "object per line (numbers, strings and a list of block hashes)"
        )
    try:
        obj = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ValueError(
            f"{where}, byte {exc.start}: not UTF-8 text; save the request log as UTF-8"
        ) from None
    except json.JSONDecodeError as exc:
        what = "an empty line" if not raw.strip() else f"not JSON ({exc.msg}, column {exc.colno})"
        raise ValueError(f"{where}: {what}; a JSONL request log holds one JSON object per line") from None
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: a JSON {type(obj).__name__}, not an object; one object per request")
    return obj


def _jsonl_keys(path: Path) -> list[str]:
    with _open(path) as fh:
        first = fh.readline(CSV_BLOCK_BYTES + 1)
    if len(first) > CSV_BLOCK_BYTES:
        raise _long_line(path, 1)
    return list(_jsonl_object(path, first, 1))


def _long_line(path: Path, line: int) -> ValueError:
    return ValueError(
        f"{path}: row {line} (line {line}) is longer than {CSV_BLOCK_BYTES:,} bytes; not a JSONL request log"
    )


def _jsonl_rows(
    path: Path, lines: list[bytes], first: int, names: list[str], lists: set[str]
) -> dict[str, pd.Series]:
    """The named keys of a block of lines (line numbers from `first`), each object checked for them:
    a number or a string under each key, a list under those in `lists`."""
    values: dict[str, list] = {n: [] for n in names}
    for i, raw in enumerate(lines):
        obj = _jsonl_object(path, raw, first + i)
        for name in names:
            where = f"{path}: row {first + i} (line {first + i})"
            if name not in obj:
                shared = any(n in obj for n in names)  # (none shared: content of who knows what, not shown)
                raise ValueError(
                    f"{where}: missing key '{name}'; "
                    + (
                        f"present: {sorted(obj)}"
                        if shared
                        else f"it has none of the mapped keys ({len(obj)} key(s))"
                    )
                    + ". Map the log's keys with trace.columns."
                )
            value = obj[name]
            if name not in lists and (isinstance(value, bool) or not isinstance(value, int | float | str)):
                raise ValueError(
                    f"{where}, key '{name}': {json.dumps(value)[:80]} is not a number or a string"
                )
            values[name].append(value)
    return {n: pd.Series(v, dtype=object) for n, v in values.items()}


def _jsonl_blocks(path: Path, names: list[str], lists: set[str]) -> Iterator[dict[str, pd.Series]]:
    """The named keys, a block of whole lines (CSV_BLOCK_BYTES) at a time."""
    line, rest = 1, b""
    with _open(path) as fh:
        while True:
            block = fh.read(CSV_BLOCK_BYTES)
            data = rest + block
            cut = data.rfind(b"\n") if block else len(data)
            if cut < 0:
                if len(data) > CSV_BLOCK_BYTES:
                    raise _long_line(path, line)
                rest = data
                continue
            lines = data[:cut].split(b"\n") if cut else []
            rest = data[cut + 1 :]
            if lines:
                yield _jsonl_rows(path, lines, line, names, lists)
                line += len(lines)
            if not block:
                return


def _shown(value: Any) -> str:
    """A raw log value as a message quotes it (a NumPy scalar as the plain number it holds)."""
    return repr(value.item() if isinstance(value, np.generic) else value)


def _values(col: pa.Array) -> pd.Series:
    if pa.types.is_timestamp(col.type):
        return col.to_pandas()
    if (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)) and (
        col.null_count or col.flatten().null_count
    ):
        # NumPy would make every row's hashes floats with NaN for the null: keep each row as it is,
        # so the null is refused at its own row
        return pd.Series(col.to_pylist(), dtype=object)
    return pd.Series(col.to_numpy(zero_copy_only=False))


def _numeric_arrival(values: pd.Series, where: Any, column: str, unit: str) -> np.ndarray:
    """Arrivals that are plain numbers of `unit` (seconds, milliseconds or microseconds) as int64 ns;
    a number whose nanoseconds do not fit int64 (past the year 2262 from 1970) is refused, naming the
    unit it most likely is (an int64 cast would wrap it silently to the same value for every row)."""
    parsed = pd.to_numeric(values, errors="coerce")
    number = parsed.to_numpy(dtype=float)
    bad = np.flatnonzero(~np.isfinite(number))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{where(i)}, column '{column}': unparsable arrival {_shown(values.iloc[i])} (the column holds {unit})"
        )
    per = ARRIVAL_UNITS[unit]
    whole = parsed.dtype.kind == "i"  # then exact (a float holds 53 bits, epoch ns take 61)
    ns = parsed.to_numpy(np.int64) if whole else np.round(number * per)
    over = np.flatnonzero(np.abs(ns) > INT64_MAX // per if whole else np.abs(ns) >= 2.0**63)
    if over.size:
        i = int(over[0])
        likely = next((u for floor, u in EPOCH_UNIT_FLOORS if abs(number[i]) >= floor), None)
        hint = (
            f"it looks like epoch {likely}: set trace.arrival_format to {likely}"
            if likely in ARRIVAL_UNITS and likely != unit
            else f"it looks like epoch {likely}: convert the column to {' or '.join(ARRIVAL_UNITS)}"
            if likely and likely != unit
            else "check the column and trace.arrival_format"
        )
        raise ValueError(
            f"{where(i)}, column '{column}': arrival {_shown(values.iloc[i])} read as {unit} is past what "
            f"int64 nanoseconds hold (the year 2262 from 1970); {hint}"
        )
    return ns * per if whole else ns.astype(np.int64)


def check_arrival_format(fmt: str | None) -> None:
    """`trace.arrival_format`: null, a unit of ARRIVAL_UNITS, or a strptime format with at least one
    directive that the timestamp parser accepts; ValueError naming the key otherwise (checked where
    the plan runs, so a bad directive never waits for the trace job)."""
    if fmt is None or fmt in ARRIVAL_UNITS:
        return
    units = ", ".join(ARRIVAL_UNITS)
    if "%" not in fmt:
        raise ValueError(
            f"config key 'trace.arrival_format': {fmt!r} is neither a unit ({units}) nor a strptime "
            "format (it holds no % directive); set null for ISO 8601 timestamps or numbers of seconds"
        )
    try:
        pd.to_datetime(pd.Series(["0"], dtype=object), format=fmt, errors="coerce", utc=True)
    except ValueError as exc:
        raise ValueError(
            f"config key 'trace.arrival_format': {fmt!r} is not a strptime format ({exc}); e.g. "
            f"'%Y-%m-%d %H:%M:%S', or a unit ({units}), or null for ISO 8601 timestamps"
        ) from None


def _parse_arrival(
    values: pd.Series, where: Any, column: str, fmt: str | None, seconds: bool | None
) -> tuple[np.ndarray, bool]:
    """Arrival times as int64 ns, and whether the column holds numbers (`fmt` 'seconds' or
    'milliseconds'; with `fmt` null decided on the first block by what most of its values are, then
    kept: numbers of seconds or ISO 8601 timestamps); any other `fmt` is a strptime format."""
    if pd.api.types.is_datetime64_any_dtype(values):
        parsed = pd.to_datetime(values, utc=True)
    elif fmt in ARRIVAL_UNITS:
        return _numeric_arrival(values, where, column, fmt), True
    else:
        as_number = pd.to_numeric(values, errors="coerce") if fmt is None and seconds is not False else None
        if seconds is None:
            seconds = as_number is not None and as_number.notna().mean() > 0.5
        if seconds:
            return _numeric_arrival(values, where, column, "seconds"), True
        check_arrival_format(fmt)
        parsed = pd.to_datetime(values, format=fmt or "ISO8601", errors="coerce", utc=True)
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"{where(i)}, column '{column}': unparsable timestamp "
            f"{_shown(values.iloc[i])} (expected {fmt or 'ISO 8601'}; set trace.arrival_format)"
        )
    # Parsed at a coarser unit than ns, a timestamp may lie past what int64 ns hold (1677..2262).
    outside = np.flatnonzero(((parsed < _NS_MIN) | (parsed > _NS_MAX)).to_numpy())
    if outside.size:
        i = int(outside[0])
        raise ValueError(
            f"{where(i)}, column '{column}': timestamp {_shown(values.iloc[i])} lies outside "
            f"{_NS_MIN:%Y-%m-%d} .. {_NS_MAX:%Y-%m-%d}, the times int64 nanoseconds hold; is it the arrival column?"
        )
    return parsed.dt.tz_convert(None).dt.as_unit("ns").astype(np.int64).to_numpy(), False


def _parse_tokens(values: pd.Series, where: Any, column: str) -> np.ndarray:
    number = pd.to_numeric(values, errors="coerce").to_numpy(dtype=np.float64)
    too_big = number >= 2.0**63  # an int64 cast would wrap around silently
    bad = np.flatnonzero(
        ~np.isfinite(number) | (number != np.floor(number)) | (number < 1) | (number > MAX_TOKENS)
    )
    if bad.size:
        i = int(bad[0])
        if not np.isfinite(number[i]):
            what = "unparsable"
        elif number[i] != np.floor(number[i]):
            what = "non-integer"
        elif too_big[i]:
            what = "out-of-range (beyond int64)"
        elif number[i] > MAX_TOKENS:
            what = f"out-of-range ({defaults.bound_reason('tokens')})"
        else:
            what = "non-positive"
        raise ValueError(
            f"{where(i)}, column '{column}': {what} token count {_shown(values.iloc[i])} "
            f"(token counts must be integers from 1 to {MAX_TOKENS:,})"
        )
    return number.astype(np.int64)


def _parse_blocks(
    values: pd.Series, context: np.ndarray, where: Any, column: str, block_tokens: int
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's prefix-block hashes (a list of integers, ceil(context / block_tokens) of them) as
    one int64 array and the count per row."""
    parts, counts = [], np.empty(len(values), np.int64)
    for i, value in enumerate(values):
        ids = np.asarray(value) if isinstance(value, list | tuple | np.ndarray) else None
        if ids is None or ids.ndim != 1 or (ids.size and not pd.api.types.is_integer_dtype(ids.dtype)):
            raise ValueError(
                f"{where(i)}, column '{column}': {_shown(value)[:80]} is not a list of integer block hashes"
            )
        need = -(-int(context[i]) // block_tokens)
        if ids.size != need:
            raise ValueError(
                f"{where(i)}, column '{column}': {ids.size} block hashes, but {context[i]} prompt tokens at "
                f"{block_tokens} tokens a block (trace.prefix_cache.block_tokens) make {need}"
            )
        parts.append(ids.astype(np.int64))
        counts[i] = ids.size
    return (np.concatenate(parts) if parts else np.empty(0, np.int64)), counts


class _Parsed:
    """A log parsed block by block: each block checked (rows numbered across blocks, time order
    across block boundaries) and kept only as int64 arrays."""

    def __init__(self, path: Path, columns: dict[str, str], fmt: str | None, block_tokens: int | None):
        self.path, self.columns, self.fmt, self.block_tokens = path, columns, fmt, block_tokens
        self.header_lines = {".csv": 1, ".jsonl": 0}.get(log_format(path))
        self.rows = self.blocks = 0
        self.seconds: bool | None = None
        self.last: tuple[Any, int] | None = None  # (raw arrival, ns) of the previous block's last row
        self.parts: dict[str, list[np.ndarray]] = {
            k: [] for k in ("arrival", "context", "generated", "ids", "n")
        }

    def add(self, block: dict[str, pd.Series]) -> None:
        cols = self.columns
        raw = block[cols["arrival"]]
        if len(raw) == 0:
            return  # (an empty block decides nothing, seconds or timestamps included)
        if self.rows + len(raw) > MAX_REQUESTS:
            raise _too_many(self.path, self.rows + len(raw))
        offset = self.rows

        def where(i: int) -> str:
            return _where(self.path, offset + i + 1, self.header_lines)

        arrival, self.seconds = _parse_arrival(raw, where, cols["arrival"], self.fmt, self.seconds)
        self._check_order(raw, arrival, where)
        self.parts["arrival"].append(arrival)
        for role in ("context", "generated"):
            name = cols[f"{role}_tokens"]
            self.parts[role].append(_parse_tokens(block[name], where, name))
        if "hash_ids" in cols:
            ids, n = _parse_blocks(
                block[cols["hash_ids"]], self.parts["context"][-1], where, cols["hash_ids"], self.block_tokens
            )
            self.blocks += ids.size
            if self.blocks > MAX_BLOCKS:
                raise ValueError(
                    f"{where(len(raw) - 1)}: more than {MAX_BLOCKS:,} block hashes by this row, past the most a "
                    "request log may carry (8 bytes each in memory); cut the log to the time the study needs"
                )
            self.parts["ids"].append(ids)
            self.parts["n"].append(n)
        self.rows += len(raw)
        self.last = (raw.iloc[-1], int(arrival[-1]))

    def _check_order(self, raw: pd.Series, arrival: np.ndarray, where: Any) -> None:
        """Rows in time order, the previous block's last row included."""
        lead = [self.last[1]] if self.last else []
        step = np.diff(np.concatenate([np.asarray(lead, np.int64), arrival]))
        backwards = np.flatnonzero(step < 0)
        if not backwards.size:
            return
        i = int(backwards[0]) + (0 if lead else 1)  # the later row, in this block
        before = self.last[0] if lead and i == 0 else raw.iloc[i - 1]
        raise ValueError(
            f"{where(i)}, column '{self.columns['arrival']}': arrival {_shown(raw.iloc[i])} is earlier than "
            f"row {self.rows + i}'s {_shown(before)}; a request log must be in time order"
        )

    def requests(self) -> Requests:
        if self.rows == 0:
            raise ValueError(f"{self.path}: the request log has no rows")
        arrival, context, generated = (
            np.concatenate(self.parts.pop(k)) for k in ("arrival", "context", "generated")
        )
        arrival -= arrival[0]
        blocks = block_start = None
        if self.parts["n"]:
            blocks = np.concatenate(self.parts.pop("ids"))
            block_start = np.concatenate([[0], np.cumsum(np.concatenate(self.parts.pop("n")))]).astype(
                np.int64
            )
        row = np.arange(1, self.rows + 1, dtype=np.int64)
        return Requests(arrival, context, generated, row, blocks, block_start)


def read_request_log(
    path: str | Path,
    columns: dict[str, str | None],
    arrival_format: str | None = None,
    *,
    block_tokens: int | None = None,
) -> Requests:
    """Read and check a request log (CSV, Parquet or JSONL; a CSV or JSONL one gzipped: read as a
    stream through gzip), a block at a time (bounded memory: above).

    columns maps the roles 'arrival', 'context_tokens', 'generated_tokens' and optionally
    'hash_ids' (None: not in the log) to column names (JSONL: keys); `block_tokens` is the prompt
    tokens per hash. Raises ValueError naming the file, the 1-based data row and the column for: a
    missing column, an unparsable or decreasing arrival, a token count that is not an integer from 1
    to MAX_TOKENS, hash_ids that are not ceil(context / block_tokens) integers, no rows, more than
    MAX_REQUESTS rows or MAX_BLOCKS hashes; a JSONL line that is not one JSON object; a gzipped log
    that is not gzip, truncated or corrupt (one line naming the file); and what check_log refuses.
    """
    path = Path(path)
    columns = mapped(columns)
    if "hash_ids" in columns and not block_tokens:
        raise ValueError("read_request_log: hash_ids need block_tokens (trace.prefix_cache.block_tokens)")
    parsed = _Parsed(path, columns, arrival_format, block_tokens)
    with _gzip_errors(path):
        for block in _batches(path, columns):
            parsed.add(block)
    return parsed.requests()


def mapped(columns: dict[str, str | None]) -> dict[str, str]:
    """The roles a log has: trace.columns without those mapped to null (hash_ids: none in the log)."""
    return {role: name for role, name in columns.items() if name is not None}


def _segments(
    eligible, context, generated, max_batch: int, end_tick: int | None, keep_bases: bool
) -> tuple[list, ...]:
    """The engine, event to event: between two changes of the active set every tick has the same
    batch and every kv_len grows by one per tick, so it emits (start, stop, batch, max base, sum
    of bases) per segment and, with keep_bases, the bases; a request's kv_len at tick t is its
    base + t."""
    n = len(eligible)
    seg_start, seg_stop, seg_batch, seg_max, seg_sum, seg_bases = [], [], [], [], [], []
    active: dict[int, int] = {}  # request -> base
    finishing: list[tuple[int, int]] = []  # heap of (first tick it is no longer active, request)
    tick, nxt_req = 0, 0
    while end_tick is None or tick < end_tick:
        while finishing and finishing[0][0] <= tick:
            del active[heapq.heappop(finishing)[1]]
        while len(active) < max_batch and nxt_req < n and eligible[nxt_req] <= tick:
            active[nxt_req] = int(context[nxt_req]) - tick + 1
            heapq.heappush(finishing, (tick + int(generated[nxt_req]), nxt_req))
            nxt_req += 1
        if not active:
            if nxt_req >= n:
                break
            tick = int(eligible[nxt_req])
            continue
        stop = finishing[0][0]
        if len(active) < max_batch and nxt_req < n:
            stop = min(stop, int(eligible[nxt_req]))
        if end_tick is not None:
            stop = min(stop, end_tick)
        bases = active.values()
        seg_start.append(tick)
        seg_stop.append(stop)
        seg_batch.append(len(active))
        seg_max.append(max(bases))
        seg_sum.append(sum(bases))
        if keep_bases:  # (8 bytes a sequence a segment: only for per-sequence kv_lens)
            seg_bases.append(np.fromiter(bases, np.int64, len(active)))
        tick = stop
    return seg_start, seg_stop, seg_batch, seg_max, seg_sum, seg_bases


def decode_ticks(seg_start, seg_stop, seg_batch, seg_max, seg_sum) -> tuple[np.ndarray, ...]:
    """Segments expanded to one decode invocation per tick: (tick, batch, kv max, kv mean, segment)."""
    start = np.asarray(seg_start, dtype=np.int64)
    length = np.asarray(seg_stop, dtype=np.int64) - start
    first = np.repeat(np.cumsum(length) - length, length)
    ticks = np.repeat(start, length) + (np.arange(int(length.sum()), dtype=np.int64) - first)
    d_batch = np.repeat(np.asarray(seg_batch, dtype=np.int64), length)
    d_max = np.repeat(np.asarray(seg_max, dtype=np.int64), length) + ticks
    d_mean = (np.repeat(np.asarray(seg_sum, dtype=np.int64), length) + d_batch * ticks) / d_batch
    return ticks, d_batch, d_max, d_mean, np.repeat(np.arange(len(start), dtype=np.int64), length)


#: The most invocations the model may emit from the log's start to the window's end (prefills and
#: decodes): the stream is built and sorted in memory, ~120 bytes per invocation at the peak (measured:
#: 1.16 GB for 10 M).
MAX_STREAM_INVOCATIONS = 10_000_000


def check_stream_size(prefills: int, decodes: int) -> None:
    """Refuse, before allocating it, a stream past MAX_STREAM_INVOCATIONS (a log of a few requests
    generating millions of tokens each, or a long log without a window)."""
    if prefills + decodes > MAX_STREAM_INVOCATIONS:
        raise ValueError(
            f"the request log would make the engine emit {prefills + decodes:,} invocations ({prefills:,} "
            f"prefills, {decodes:,} decode steps) from its start to the window's end, past the most a trace "
            f"is built from ({MAX_STREAM_INVOCATIONS:,}, held in memory); end the window earlier "
            "(trace.window.duration_s), clip sequences (trace.tokens.max_kv_len) or cut the log"
        )


def engine_clock(requests: Requests, max_batch: int, decode_step_ns: int, end_ns: int | None) -> tuple:
    """What both engines (this module's and headroom.trace.steps') start from: (n, eligible, cached,
    end_tick) -- the requests arriving before end_ns, each request's first tick strictly after its
    arrival, its prefix-cached tokens (zeros without a cache), the first tick at or after end_ns."""
    if max_batch < 1 or decode_step_ns < 1:
        raise ValueError("simulate: max_batch and decode_step_ns must be >= 1")
    arrival, context = requests.arrival_ns, requests.context
    cached = np.zeros_like(context) if requests.cached is None else requests.cached
    n = len(arrival) if end_ns is None else int(np.searchsorted(arrival, end_ns, side="left"))
    end_tick = None if end_ns is None else -(-end_ns // decode_step_ns)
    return n, arrival // decode_step_ns + 1, cached, end_tick


def simulate(
    requests: Requests,
    *,
    max_batch: int,
    decode_step_ns: int,
    end_ns: int | None = None,
    kv_lens: bool = False,
) -> Stream:
    """All invocations that start before end_ns (None: until every request is done), in order, of
    the continuous-batching engine (every prompt prefilled whole at arrival; the chunked-prefill
    engine is headroom.trace.steps, and steps.simulate chooses between them). A prefill's q_len is
    its prompt less the prefix-cached tokens (requests.cached), its kv_len the whole prompt.
    kv_lens: keep each decode's per-sequence kv_len (Stream.bases, Stream.kv_lens)."""
    n, eligible, cached, end_tick = engine_clock(requests, max_batch, decode_step_ns, end_ns)
    arrival, context = requests.arrival_ns, requests.context
    *segments, bases = _segments(eligible[:n], context, requests.generated, max_batch, end_tick, kv_lens)
    check_stream_size(n, int(np.sum(np.asarray(segments[1], np.int64) - np.asarray(segments[0], np.int64))))
    ticks, d_batch, d_max, d_mean, d_segment = decode_ticks(*segments)
    p, d = n, len(ticks)
    serving = requests.cached is not None or kv_lens
    stream = Stream(
        time_ns=np.concatenate([arrival[:n], ticks * decode_step_ns]),
        phase=np.concatenate([np.full(p, PREFILL, np.int8), np.full(d, DECODE, np.int8)]),
        batch=np.concatenate([np.ones(p, np.int64), d_batch]),
        request=np.concatenate([np.arange(p, dtype=np.int64), np.full(d, -1, np.int64)]),
        kv_max=np.concatenate([context[:p], d_max]),
        kv_mean=np.concatenate([context[:p].astype(np.float64), d_mean]),
        q_len=np.concatenate([context[:p] - cached[:p], np.ones(d, np.int64)]) if serving else None,
        step=np.concatenate([np.full(p, PREFILL, np.int8), np.full(d, DECODE, np.int8)]) if serving else None,
        segment=np.concatenate([np.full(p, -1, np.int64), d_segment]) if serving else None,
        bases=tuple(bases),
    )
    # lexsort: last key is primary. Prefills keep log order; decode ticks are unique.
    order = np.lexsort((stream.request, stream.phase, stream.time_ns))
    return stream.take(order)
