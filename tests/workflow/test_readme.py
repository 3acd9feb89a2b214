"""The README's SQL examples run against a real pipeline run and return rows."""

from __future__ import annotations

import re

import pytest

from tests.pipeline import ROOT, headroom

pytestmark = pytest.mark.slow


def readme_queries() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Querying results with SQL", 1)[1].split("\n## ", 1)[0]
    return [q for q in re.findall(r'headroom query "(.*?)"', section, re.S)]


def test_readme_has_three_sql_examples():
    assert len(readme_queries()) == 3


@pytest.mark.parametrize("index", range(3))
def test_readme_sql_example_runs(pipeline_run, index):
    sql = readme_queries()[index]
    proc = headroom(pipeline_run, "query", sql, "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.strip().splitlines()) > 1, proc.stdout  # header + rows
