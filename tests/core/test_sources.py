"""A rule's source closure: every project module its script imports, through other modules too; a
module's imports are parsed once per version of the file, so an edited module is read again."""

from __future__ import annotations

import os

from headroom.core import sources


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_closure_follows_imports_and_sees_an_edited_module(tmp_path):
    _write(tmp_path / "headroom/__init__.py", "")
    _write(tmp_path / "headroom/a.py", "from headroom import b\n")
    _write(tmp_path / "headroom/b.py", "import os\n")
    _write(tmp_path / "headroom/c.py", "")
    _write(tmp_path / "scripts/one.py", "from headroom import a\n")
    _write(tmp_path / "scripts/two.py", "def f():\n    import headroom.a\n")
    assert sources.closure("scripts/one.py", tmp_path) == (
        "headroom/__init__.py",
        "headroom/a.py",
        "headroom/b.py",
        "scripts/one.py",
    )
    # b.py now imports c.py: a closure computed after the edit (another script's) includes it
    b = tmp_path / "headroom/b.py"
    b.write_text("import os\nfrom headroom import c\n")
    st = b.stat()
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert "headroom/c.py" in sources.closure("scripts/two.py", tmp_path)
