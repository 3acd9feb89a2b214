"""A study's `slurm:` overlay reaches the Slurm executor plugin as the plugin's own resources
(`constraint`, `qos`, `gpu_model`), never as sbatch options inside `slurm_extra`, which the plugin
(2.8) refuses for every option it manages. Read from Snakemake's dry-run plan: no Slurm needed."""

from __future__ import annotations

import importlib.util
import re
from types import SimpleNamespace

import pytest

from tests.pipeline import copy_project, snakemake


def _gpu_job_resources(project, overlay: str) -> str:
    (project / "config/studies/tiny.yaml").write_text(
        (project / "config/studies/tiny.yaml").read_text() + overlay
    )
    out = snakemake(project, "--dry-run", "--config", "studies=[tiny]").stdout
    gpu_jobs = [line for line in out.splitlines() if "resources:" in line and "gpu=1" in line]
    assert gpu_jobs, out[-3000:]
    return gpu_jobs[0]


def test_constraint_and_qos_are_the_plugins_resources(tmp_path):
    project = copy_project(tmp_path / "headroom")
    overlay = '\nslurm:\n  constraint: "h100&nvlink"\n  qos: gpu\n  slurm_extra: "--exclusive"\n'
    resources = _gpu_job_resources(project, overlay)
    assert "constraint=h100&nvlink" in resources and "qos=gpu" in resources, resources
    extra = re.search(r"slurm_extra=([^,]*)", resources).group(1)
    assert extra == "--exclusive", resources  # no --constraint/--qos smuggled in
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        pytest.skip("snakemake-executor-plugin-slurm is not installed (pip install -e '.[test]')")
    from snakemake_executor_plugin_slurm.validation import validate_slurm_extra

    validate_slurm_extra(SimpleNamespace(resources=SimpleNamespace(slurm_extra=extra)))  # accepted


def test_a_study_without_a_constraint_asks_for_none(tmp_path):
    project = copy_project(tmp_path / "headroom")
    resources = _gpu_job_resources(project, "")
    # unset, not an empty string: the plugin passes `-C ''` for an empty constraint
    assert "constraint" not in resources and "qos" not in resources, resources
