"""The decision rule's tags: data/validation/rule-tags.tsv records each tag's commit (a clone that did
not fetch tags can recreate them from it: `git tag TAG COMMIT`), and each recorded commit decides
under the rule version its tag names (in the file the record names: the engine's until decision-v3.3,
headroom/decide/rule.py since decision-v4), the newest being today's rule."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from headroom.decide import rule

ROOT = Path(__file__).resolve().parents[2]
TAGS = pd.read_csv(ROOT / "data/validation/rule-tags.tsv", sep="\t")


def _git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def test_the_newest_tag_is_the_rule_the_engine_applies():
    assert TAGS["tag"].is_unique and TAGS["commit"].str.fullmatch("[0-9a-f]{40}").all()
    assert TAGS["tag"].iloc[-1] == rule.RULE_VERSION


@pytest.mark.parametrize("tag", list(TAGS["tag"]))
def test_each_tagged_commit_sets_the_rule_version_its_tag_names(tag):
    if shutil.which("git") is None or _git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout")
    commit, path = TAGS.set_index("tag").loc[tag, ["commit", "file"]]
    engine_py = _git("show", f"{commit}:{path}")
    if engine_py.returncode != 0:
        pytest.skip(f"commit {commit[:7]} is not in this clone (shallow?)")
    assert f'RULE_VERSION = "{tag}"' in engine_py.stdout
    local = _git("rev-parse", "--verify", "--quiet", f"refs/tags/{tag}^{{commit}}")
    if local.returncode == 0:  # a tag of that name, where this clone has one, is the recorded commit
        assert local.stdout.strip() == commit
