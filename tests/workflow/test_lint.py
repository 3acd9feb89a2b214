"""`snakemake --lint` has nothing to say about the workflow."""

import subprocess
import sys

from tests.pipeline import ROOT, env


def test_snakemake_lint_is_clean():
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint"],
        cwd=ROOT,
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert "Congratulations, your workflow is in a good condition!" in out, out
