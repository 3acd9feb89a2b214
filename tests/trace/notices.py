"""What a shipped request log's NOTICE.md holds it to: a log shipped gzipped (`gzip -9 -n`) is the
upstream file byte for byte once decompressed, and its notice names both files."""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

import blake3

from headroom.core import artifacts


def assert_shipped_as_its_notice_says(log: Path, notice: Path, licence: Path) -> bytes:
    """The gzip at ``log``: its BLAKE3 and size, and the SHA-256, BLAKE3 and size of what gunzip
    gives back, are in ``notice``; no name or time stamp in its header; ``licence`` is shipped beside
    it. The gzip's bytes, for a caller's further checks."""
    said = notice.read_text()
    packed = log.read_bytes()
    data = gzip.decompress(packed)
    assert f"SHA-256 `{hashlib.sha256(data).hexdigest()}`" in said
    assert f"BLAKE3 `{blake3.blake3(data).hexdigest()}`" in said
    assert f"BLAKE3 `{artifacts.hash_file(log)}`" in said
    assert packed[:4] == b"\x1f\x8b\x08\x00" and packed[4:8] == bytes(4)  # -n: no name, no time stamp
    assert f"{len(data):,} bytes" in said and f"{len(packed):,} bytes" in said
    assert licence.exists()
    return packed
