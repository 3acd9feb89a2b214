"""The committed H200 reference studies replay on a CPU machine: hashes verify, the analysis is
regenerated, the verdict is the recorded one, and REPRODUCTION.md is what the script generates."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.pipeline import ROOT, copy_project, headroom, snakemake

pytestmark = pytest.mark.slow

# gate exit codes: 0 stop, 3 continue, 4 no-decision
EXPECTED = {"default": ("continue", 3), "azure-conv": ("continue", 3)}


@pytest.fixture(scope="module")
def replayed(tmp_path_factory):
    out = {}
    for study in EXPECTED:
        project = copy_project(tmp_path_factory.mktemp(study) / "headroom")
        snakemake(project, "--config", f"replay=data/reference/h200/{study}")
        out[study] = project
    return out


@pytest.mark.parametrize("study", sorted(EXPECTED))
def test_reference_study_replays_to_its_verdict(replayed, study):
    project = replayed[study]
    verdict, code = EXPECTED[study]
    proc = headroom(project, "verify")
    assert proc.returncode == 0, proc.stdout
    proc = headroom(project, "gate")
    assert proc.returncode == code and proc.stdout.startswith(verdict), proc.stdout
    md = (project / "results/report/report.md").read_text()
    assert f"**Verdict: {verdict}.**" in "\n".join(md.splitlines()[:5])
    assert "not GPU measurements" not in md.splitlines()[0]


def test_reference_data_hashes_hold(tmp_path):
    from headroom.core import artifacts
    from headroom.core.catalog import discover

    for study in EXPECTED:
        found = discover(ROOT / "data/reference/h200" / study)
        assert len(found) >= 13, study  # 7 artifacts + 3 runs x (summary + samples)
        for path in found:
            artifacts.verify(path)


def test_reproduction_md_is_generated_from_the_replays(replayed, tmp_path):
    out = tmp_path / "REPRODUCTION.md"
    args = [sys.executable, str(ROOT / "scripts/reproduction.py"), "--out", str(out)]
    for study, project in replayed.items():
        args += ["--results", f"{study}={project / 'results'}"]
    subprocess.run(args, check=True, capture_output=True)
    assert out.read_text() == (ROOT / "REPRODUCTION.md").read_text(), (
        "REPRODUCTION.md is stale: regenerate it with `python scripts/reproduction.py`"
    )
