"""A file too big for one transfer to the offline GPU host travels in pieces (tools/pieces.sh) and is
joined, checked and installed there (tools/device_flashinfer.sh): joined byte for byte, with a
manifest of every piece's and the whole's size and SHA-256, and a missing or corrupt piece named in
one line. Generated data only: no network, no FlashInfer."""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PIECES = ROOT / "tools" / "pieces.sh"
DEVICE_FLASHINFER = ROOT / "tools" / "device_flashinfer.sh"
sys.path.insert(0, str(ROOT / "tools"))
import wheelhouse_check  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("split") is None, reason="needs coreutils (split, sha256sum)")

PIECE_BYTES = 4096
SIZE = 5 * PIECE_BYTES + 123  # six pieces, the last one short


def _run(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, **kw)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(path: Path) -> list[dict[str, str]]:
    header, *lines = path.read_text().splitlines()
    return [dict(zip(header.split("\t"), line.split("\t"), strict=True)) for line in lines]


@pytest.fixture
def split_file(tmp_path):
    """A generated file cut into pieces: (the file, the pieces' folder)."""
    original = tmp_path / "archive.tar"
    original.write_bytes(random.Random(33).randbytes(SIZE))
    out = _run(PIECES, "split", original, tmp_path / "pieces", "--piece-bytes", PIECE_BYTES)
    assert out.returncode == 0, out.stderr
    return original, tmp_path / "pieces"


def _one_error_line(out: subprocess.CompletedProcess) -> str:
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    return lines[0]


def test_split_writes_bounded_pieces_and_a_manifest_of_sizes_and_hashes(split_file):
    original, pieces = split_file
    rows = _manifest(pieces / "archive.tar.manifest.tsv")
    parts = [r for r in rows if r["kind"] == "piece"]
    assert [r["name"] for r in parts] == [f"archive.tar.part-{i:03d}" for i in range(6)]
    assert sorted(p.name for p in pieces.glob("*.part-*")) == [r["name"] for r in parts]
    for row in parts:
        path = pieces / row["name"]
        assert int(row["bytes"]) == path.stat().st_size <= PIECE_BYTES
        assert row["sha256"] == _sha256(path)
    assert int(parts[-1]["bytes"]) == 123
    (whole,) = [r for r in rows if r["kind"] == "whole"]
    assert whole == {"kind": "whole", "name": "archive.tar", "bytes": str(SIZE), "sha256": _sha256(original)}


def test_join_gives_back_the_file_byte_for_byte(split_file, tmp_path):
    original, pieces = split_file
    out = _run(PIECES, "join", pieces, tmp_path / "joined.tar")
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "joined.tar").read_bytes() == original.read_bytes()


def test_a_missing_piece_is_named_in_one_line(split_file, tmp_path):
    _, pieces = split_file
    (pieces / "archive.tar.part-002").unlink()
    line = _one_error_line(_run(PIECES, "join", pieces, tmp_path / "joined.tar"))
    assert "missing piece archive.tar.part-002" in line and "5 of 6" in line
    assert not (tmp_path / "joined.tar").exists()


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_corrupt_piece_is_named_in_one_line(split_file, tmp_path, damage):
    _, pieces = split_file
    victim = pieces / "archive.tar.part-004"
    data = bytearray(victim.read_bytes())
    if damage == "flip":
        data[100] ^= 0xFF  # same size: only the hash can tell
    else:
        del data[-1]
    victim.write_bytes(bytes(data))
    line = _one_error_line(_run(PIECES, "join", pieces, tmp_path / "joined.tar"))
    assert "corrupt piece archive.tar.part-004" in line
    assert ("sha256" if damage == "flip" else f"{PIECE_BYTES - 1} bytes") in line
    assert not (tmp_path / "joined.tar").exists()


def _carry(pieces: Path, folder: Path, names: list[str]) -> Path:
    """One transfer: the manifest and some of the pieces."""
    folder.mkdir()
    for manifest in pieces.glob("*.manifest.tsv"):
        shutil.copy(manifest, folder)
    for name in names:
        shutil.copy(pieces / name, folder)
    return folder


def test_pieces_carried_in_consecutive_transfers_accumulate_then_join(split_file, tmp_path):
    original, pieces = split_file
    names = sorted(p.name for p in pieces.glob("*.part-*"))
    first = _carry(pieces, tmp_path / "call1", names[:3])
    second = _carry(pieces, tmp_path / "call2", names[3:])
    stash = tmp_path / "stash"
    out = _run(PIECES, "stash", first, stash)
    assert out.returncode == 3, out.stderr
    assert "3 of 6" in out.stdout and names[3] in out.stdout
    out = _run(PIECES, "stash", second, stash)
    assert out.returncode == 0, out.stderr
    assert _run(PIECES, "join", stash, tmp_path / "joined.tar").returncode == 0
    assert (tmp_path / "joined.tar").read_bytes() == original.read_bytes()


def test_stash_refuses_a_corrupt_piece_and_another_archives_pieces(split_file, tmp_path):
    _, pieces = split_file
    carried = _carry(pieces, tmp_path / "call1", ["archive.tar.part-001"])
    (carried / "archive.tar.part-001").write_bytes(b"x" * PIECE_BYTES)
    line = _one_error_line(_run(PIECES, "stash", carried, tmp_path / "stash"))
    assert "corrupt piece archive.tar.part-001" in line
    other = tmp_path / "other.tar"
    other.write_bytes(b"another archive")
    assert _run(PIECES, "split", other, tmp_path / "other").returncode == 0
    assert _run(PIECES, "stash", tmp_path / "other", tmp_path / "stash2").returncode == 0
    line = _one_error_line(_run(PIECES, "stash", _carry(pieces, tmp_path / "call2", []), tmp_path / "stash2"))
    assert "holds the pieces of other.tar" in line


def _wheel(folder: Path, name: str, requires: tuple[str, ...] = ()) -> Path:
    """A minimal pure-Python wheel: package NAME with VALUE = 33 and a console script NAME-cli."""
    dist_info = f"{name}-1.0.dist-info"
    requires_dist = "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name}/__init__.py": "VALUE = 33\n\ndef main():\n    print(VALUE)\n",
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n{requires_dist}",
        f"{dist_info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist_info}/entry_points.txt": f"[console_scripts]\n{name}-cli = {name}:main\n",
    }
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arcname, text in files.items():
            zf.writestr(arcname, text)
        zf.writestr(f"{dist_info}/RECORD", "".join(f"{n},,\n" for n in files) + f"{dist_info}/RECORD,,\n")
    return path


def test_device_flashinfer_installs_once_every_piece_has_arrived(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    _wheel(wheels, "demo_fi")
    (wheels / "padding.bin").write_bytes(random.Random(7).randbytes(3 * PIECE_BYTES))  # several pieces
    _run("tar", "-cf", tmp_path / "flashinfer.tar", "-C", wheels, ".")
    pieces = tmp_path / "pieces"
    cut = _run(PIECES, "split", tmp_path / "flashinfer.tar", pieces, "--piece-bytes", PIECE_BYTES)
    assert cut.returncode == 0, cut.stderr
    names = sorted(p.name for p in pieces.glob("*.part-*"))
    host = tmp_path / "host"
    site = host / "site"
    (site / "bin").mkdir(parents=True)
    (site / "bin" / "snakemake").write_text("the carried wheels' script\n")
    bin_dir = tmp_path / "bin"  # python3 on PATH is this interpreter, as on the host
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def call(carried: Path, *extra: str) -> subprocess.CompletedProcess:
        args = ("--carried", carried, "--pieces", host / "pieces", "--site", site)
        return _run(DEVICE_FLASHINFER, *extra, *args, env=env)

    first = call(_carry(pieces, tmp_path / "call1", names[:2]))
    assert first.returncode == 0, first.stderr
    assert not (site / "demo_fi").exists()
    line = _one_error_line(call(tmp_path / "nothing-carried", "--require"))
    assert f"missing piece {names[2]}" in line
    second = call(_carry(pieces, tmp_path / "call2", names[2:]))
    assert second.returncode == 0, second.stderr
    on_site = {**env, "PYTHONPATH": str(site)}
    ran = _run(sys.executable, "-c", "import demo_fi; print(demo_fi.VALUE)", env=on_site)
    assert ran.stdout.strip() == "33", ran.stderr
    assert (site / "bin" / "snakemake").read_text() == "the carried wheels' script\n"  # merged, not replaced
    assert (site / "bin" / "demo_fi-cli").read_text().startswith("#!/usr/bin/env python3\n")
    assert (site / ".flashinfer").read_text().split() == ["demo_fi-1.0-py3-none-any.whl"]
    assert call(tmp_path / "nothing-carried", "--require").returncode == 0  # installed: nothing to do


def test_wheelhouse_check_no_deps_checks_the_roots_only(tmp_path):
    _wheel(tmp_path, "demo_fi", requires=("not-shipped>=1",))
    args = [str(tmp_path), "--root", "demo-fi==1.0", "--max-total-bytes", "0"]
    assert wheelhouse_check.main(args) == 1  # its declared dependency is not in the folder
    assert wheelhouse_check.main([*args, "--no-deps"]) == 0
    assert wheelhouse_check.main([str(tmp_path), "--root", "demo-fi==2.0", "--no-deps"]) == 1


def test_the_flashinfer_extra_pins_what_the_wheelhouse_carries():
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = project["optional-dependencies"]["flashinfer"]
    assert all("==" in req for req in extra), extra  # pinned: the host runs what was measured
    assert any(req.startswith("flashinfer-python==") for req in extra)
    assert "optional-dependencies" in (ROOT / "tools" / "wheelhouse.sh").read_text()  # read from there
