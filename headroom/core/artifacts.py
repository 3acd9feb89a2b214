"""The one write path and the one read path for every artifact.

An artifact is a Parquet file with
- provenance in its key-value metadata (`headroom.provenance`, JSON): producing rule, the config
  subset it was given, the BLAKE3 of each input artifact and of each source file, device, versions;
- its own BLAKE3 (of the file bytes) recorded at write time in a sidecar `<name>.parquet.blake3`.

Writes are atomic: the file is written under a temporary name in the same folder, fsynced and
renamed, so a killed job never leaves a half-written artifact under the final name. The sidecar is
renamed into place *before* the Parquet file, so whenever the final name exists its hash does too.

Bytes are deterministic for identical data (no timestamps inside the file), so a regenerated
artifact with the same content does not look changed to Snakemake's checksum trigger.

Files are created with the permissions the process's umask gives any new file (0644 under umask
022, 0664 under 002), like the catalog and the report, so a team can share a results folder.
Other files a reviewer reads (the report, the catalog) get a sidecar too (`record_hash`,
`write_file`), so `headroom verify` covers them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Any

import blake3
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from headroom.core import contracts

SIDECAR_SUFFIX = ".blake3"
META_KIND = b"headroom.kind"
META_PROVENANCE = b"headroom.provenance"
META_FORMAT = b"headroom.format"
FORMAT_VERSION = b"1"
_CHUNK_BYTES = 1 << 20


class ArtifactError(ValueError):
    """An artifact is missing, unreadable, or has no recorded hash."""


class ArtifactHashError(ArtifactError):
    """An artifact's bytes no longer match the BLAKE3 recorded when it was written."""

    def __init__(self, path: str | os.PathLike, recorded: str, actual: str):
        self.path, self.recorded, self.actual = str(path), recorded, actual
        super().__init__(
            f"{path}: BLAKE3 mismatch: recorded {recorded}, file has {actual}. The artifact changed "
            f"after it was written; regenerate it (delete it and rerun) or restore the original."
        )


_DIGEST = re.compile(r"[0-9a-f]{64}")
REWRITE_HINT = "delete the artifact and its sidecar and rerun the pipeline, which writes both again"
_SIDECAR_MAX_BYTES = 4096  # a digest, two spaces and a file name


class NotRegularFileError(ArtifactError):
    """A FIFO, device, directory or socket where an artifact (or its sidecar) should be."""


def open_regular(path: str | os.PathLike):
    """`path` opened for binary reading, refused unless it is a regular file (a symlink is followed).
    Opened non-blocking first, so a FIFO is refused instead of waiting for a writer."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except IsADirectoryError:
        raise NotRegularFileError(f"{path}: a directory, not a file; remove it and rerun") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise NotRegularFileError(
            f"{path}: not a regular file (a FIFO, device, directory or socket); remove it and rerun "
            "the pipeline, which writes it again"
        )
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_regular(path: str | os.PathLike) -> bytes:
    with open_regular(path) as fh:
        return fh.read()


def hash_file(path: str | os.PathLike) -> str:
    """BLAKE3 (hex) of a regular file's bytes (NotRegularFileError for anything else)."""
    with open_regular(path) as fh:
        return hash_stream(fh)


def hash_stream(fh) -> str:
    """BLAKE3 (hex) of what a binary stream reads to its end, a chunk at a time."""
    h = blake3.blake3()
    while chunk := fh.read(_CHUNK_BYTES):
        h.update(chunk)
    return h.hexdigest()


def sidecar(path: str | os.PathLike) -> Path:
    return Path(str(path) + SIDECAR_SUFFIX)


def recorded_hash(path: str | os.PathLike) -> str:
    """The BLAKE3 recorded in `path`'s sidecar; ArtifactError naming the sidecar when it is missing,
    not a regular file, or not a BLAKE3 record (empty, not text, too long)."""
    side, fix = sidecar(path), REWRITE_HINT
    try:
        with open_regular(side) as fh:
            raw = fh.read(_SIDECAR_MAX_BYTES + 1)
    except FileNotFoundError:
        raise ArtifactError(
            f"{path}: no recorded BLAKE3 ({side} is missing); was it written by headroom.core.artifacts.write?"
        ) from None
    except NotRegularFileError:
        raise ArtifactError(f"{path}: its sidecar {side} is not a regular file; {fix}") from None
    try:
        words = raw.decode("ascii").split() if len(raw) <= _SIDECAR_MAX_BYTES else []
    except UnicodeDecodeError:
        words = []
    if not words or not _DIGEST.fullmatch(words[0]):
        raise ArtifactError(f"{path}: its sidecar {side} holds no BLAKE3 (empty or not a hash record); {fix}")
    return words[0]


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask_mode() -> int:
    """The mode open(2) gives a new file under the current umask (mkstemp's 0600 ignores it)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _mkstemp(path: Path) -> tuple[int, str]:
    """A temporary file beside `path`, with the umask's permissions rather than mkstemp's 0600."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, _umask_mode())
    return fd, tmp


def _atomic_bytes(path: Path, data: bytes) -> None:
    fd, tmp = _mkstemp(path)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def to_table(data: pd.DataFrame | pa.Table) -> pa.Table:
    if isinstance(data, pa.Table):
        return data
    if isinstance(data, pd.DataFrame):
        return pa.Table.from_pandas(data.reset_index(drop=True), preserve_index=False)
    raise TypeError(f"an artifact is a pandas DataFrame or a pyarrow Table, not {type(data).__name__}")


def _parquet(table: pa.Table, floats_split: bool) -> bytes:
    floats = [f.name for f in table.schema if pa.types.is_floating(f.type)]
    if floats_split:  # each float's bytes grouped by significance, so zstd finds the repeats
        others = [f.name for f in table.schema if f.name not in floats]
        options = {"use_dictionary": others, "use_byte_stream_split": floats}
    else:
        options = {"use_dictionary": True}
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", write_statistics=True, **options)
    return sink.getvalue().to_pybytes()


def encode(table: pa.Table) -> bytes:
    """The Parquet bytes of `table`: zstd, dictionary-encoded columns, and, where a table has float
    columns, the smaller of that and floats written byte-stream-split (a portfolio run's summaries
    are about a fifth smaller so; a low-cardinality float column is smaller as a dictionary). The
    values read back are the same either way. Fixed settings and a fixed choice: identical data
    gives identical bytes."""
    plain = _parquet(table, floats_split=False)
    if not any(pa.types.is_floating(f.type) for f in table.schema):
        return plain
    split = _parquet(table, floats_split=True)
    return split if len(split) < len(plain) else plain


def write(
    data: pd.DataFrame | pa.Table, path: str | os.PathLike, *, kind: str, provenance: dict[str, Any]
) -> str:
    """Write `data` to `path` atomically with provenance; record and return its BLAKE3.

    A `kind` with a contract in `headroom.core.contracts` is checked against it first (ValueError
    naming the kind, the column and the types; nothing is written)."""
    path = Path(path)
    table = to_table(data)
    if kind in contracts.CONTRACTS:
        contracts.check(kind, table)
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = dict(table.schema.metadata or {})
    meta[META_KIND] = kind.encode()
    meta[META_FORMAT] = FORMAT_VERSION
    meta[META_PROVENANCE] = json.dumps(provenance, sort_keys=True, default=str).encode()
    table = table.replace_schema_metadata(meta)

    fd, tmp = _mkstemp(path)
    os.close(fd)
    with _into_place(tmp, path):
        with open(tmp, "wb") as fh:
            fh.write(encode(table))
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        digest = hash_file(tmp)
        _atomic_bytes(sidecar(path), f"{digest}  {path.name}\n".encode())
    return digest


@contextlib.contextmanager
def _into_place(tmp: str, path: Path):
    """Around the writing of `tmp` (a temporary file beside `path`, its sidecar written inside the
    block, first): on success renamed onto `path` and the folder synced; on any failure, removed."""
    try:
        yield
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def write_sidecar(path: str | os.PathLike, digest: str) -> None:
    """Record `digest` as the BLAKE3 of `path` (atomically)."""
    path = Path(path)
    _atomic_bytes(sidecar(path), f"{digest}  {path.name}\n".encode())


def copy_verified(src: str | os.PathLike, dest: str | os.PathLike) -> str:
    """Copy an artifact and its sidecar byte for byte (a replay's import) and return its BLAKE3: the
    source verified, the copy hashed again, both renamed into place (the sidecar first) from
    temporary files named as write() names them, so a killed copy leaves only what the next run of
    its job removes (clean_temp_files)."""
    digest = verify(src)
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _mkstemp(dest)
    with _into_place(tmp, dest):
        with open_regular(src) as fin, os.fdopen(fd, "wb") as fout:
            shutil.copyfileobj(fin, fout, _CHUNK_BYTES)
            fout.flush()
            os.fsync(fout.fileno())
        if hash_file(tmp) != digest:
            raise ArtifactError(f"{src}: copy to {dest} changed its bytes")
        _atomic_bytes(sidecar(dest), read_regular(sidecar(src)))
    return digest


def record_hash(path: str | os.PathLike) -> str:
    """Record the BLAKE3 of a file written elsewhere (a report page, a figure) in its sidecar."""
    digest = hash_file(path)
    write_sidecar(path, digest)
    return digest


def write_file(path: str | os.PathLike, data: bytes) -> str:
    """Write bytes atomically with their BLAKE3 in a sidecar (renamed into place first)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    digest = blake3.blake3(data).hexdigest()
    write_sidecar(path, digest)
    _atomic_bytes(path, data)
    _fsync_dir(path.parent)
    return digest


def verify(path: str | os.PathLike) -> str:
    """Return the artifact's BLAKE3 after checking it against the recorded one."""
    if not Path(path).exists():
        raise ArtifactError(f"{path}: artifact does not exist")
    actual = hash_file(path)  # refuses a FIFO or a device before anything else is read
    recorded = recorded_hash(path)
    if actual != recorded:
        raise ArtifactHashError(path, recorded, actual)
    return actual


def read_verified_bytes(path: str | os.PathLike) -> tuple[bytes, str]:
    """The file's bytes and their BLAKE3, read once and checked against the recorded hash, so what
    the caller parses is exactly what was verified (no window for the file to change in between)."""
    if not Path(path).exists():
        raise ArtifactError(f"{path}: artifact does not exist")
    data = read_regular(path)
    recorded = recorded_hash(path)
    actual = blake3.blake3(data).hexdigest()
    if actual != recorded:
        raise ArtifactHashError(path, recorded, actual)
    return data, actual


def parse_parquet(data: bytes) -> pa.Table:
    """A Parquet file's bytes as a Table, parsed from an Arrow-owned copy of them. Parsed from the
    Python `bytes` themselves, the last reference to them may be dropped by one of Arrow's worker
    threads after the interpreter began to exit; that thread then needs the GIL, cannot take it,
    and the process aborts ("terminate called without an active exception", exit 134)."""
    owned = pa.allocate_buffer(len(data))
    pa.FixedSizeBufferWriter(owned).write(data)
    return pq.read_table(pa.BufferReader(owned))


def read_table(path: str | os.PathLike) -> pa.Table:
    """Verified read as a pyarrow Table (parsed from the very bytes that were hashed)."""
    data, _ = read_verified_bytes(path)
    try:
        return parse_parquet(data)
    except (OSError, pa.ArrowInvalid) as exc:
        raise ArtifactError(f"{path}: not a readable Parquet artifact ({exc}); {REWRITE_HINT}") from exc


def read(path: str | os.PathLike) -> pd.DataFrame:
    """Verified read as a pandas DataFrame (fails naming the path and both hashes on mismatch)."""
    return read_table(path).to_pandas()


def _meta(path: str | os.PathLike) -> dict[bytes, bytes]:
    try:
        with open_regular(path) as fh:
            return pq.read_schema(fh).metadata or {}
    except (OSError, pa.ArrowInvalid) as exc:
        raise ArtifactError(f"{path}: not a readable Parquet artifact ({exc}); {REWRITE_HINT}") from exc


def read_provenance(path: str | os.PathLike) -> dict[str, Any]:
    raw = _meta(path).get(META_PROVENANCE)
    return json.loads(raw) if raw else {}


def read_kind(path: str | os.PathLike) -> str | None:
    raw = _meta(path).get(META_KIND)
    return raw.decode() if raw else None


_RUN = re.compile(r"run-\d+")
_RUN_SAMPLES = re.compile(r"run-\d+-samples")


def kind_of_name(path: str | os.PathLike) -> str:
    """The kind an artifact's file name says it holds: portfolio/run-<r>.parquet is a `portfolio`,
    portfolio/run-<r>-samples.parquet a `portfolio_samples`, any other <kind>.parquet a <kind>."""
    path = Path(path)
    if path.parent.name == "portfolio" and _RUN_SAMPLES.fullmatch(path.stem):
        return "portfolio_samples"
    if path.parent.name == "portfolio" and _RUN.fullmatch(path.stem):
        return "portfolio"
    return path.stem


def run_problem(path: str | os.PathLike, provenance: dict[str, Any]) -> str | None:
    """Why a portfolio run's file holds another run (run-1.parquet copied over run-2.parquet: the same
    kind, the run its rule recorded in `wildcards.run` another), or None."""
    if kind_of_name(path) not in ("portfolio", "portfolio_samples"):
        return None
    named = Path(path).stem.split("-")[1]
    recorded = (provenance.get("wildcards") or {}).get("run")
    if recorded is None or str(recorded) == named:
        return None
    return f"holds portfolio run {recorded}, not the run {named} its name says"


def temp_files(path: str | os.PathLike) -> list[Path]:
    """Temporary files of interrupted writes of `path` (and of its sidecar), as write() names them."""
    path = Path(path)
    found = set(path.parent.glob(f".{path.name}.*.tmp"))
    found |= set(path.parent.glob(f".{sidecar(path).name}.*.tmp"))
    return sorted(found)


def clean_temp_files(path: str | os.PathLike) -> list[Path]:
    """Remove what killed writes of `path` left behind. Only the job that writes `path` calls this
    (Snakemake runs one job per output at a time), so no write in progress is removed."""
    removed = []
    for tmp in temp_files(path):
        tmp.unlink(missing_ok=True)
        removed.append(tmp)
    return removed
