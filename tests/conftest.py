"""Test-wide setup. Triton fixes interpreter vs compiled mode when a kernel module is imported,
so TRITON_INTERPRET is decided here, before any test module imports `kernels`."""

import os
import shutil

import pytest

if shutil.which("nvidia-smi") is None and "TRITON_INTERPRET" not in os.environ:
    os.environ["TRITON_INTERPRET"] = "1"


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _cuda():
        return
    skip = pytest.mark.skip(
        reason="needs a CUDA GPU; this machine has none (CI never does): GPU results are committed under data/ and BENCHMARKS.md"
    )
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def pipeline_run(tmp_path_factory):
    """The default study run once end to end in a temporary copy of the project (on a machine
    without CUDA: the interpreter and the smoke overlay). Tests that change the project clone it."""
    from tests.pipeline import copy_project, snakemake

    project = copy_project(tmp_path_factory.mktemp("pipeline") / "headroom")
    proc = snakemake(project)
    project.joinpath("snakemake-run.log").write_text(proc.stdout + proc.stderr)
    return project


@pytest.fixture
def pipeline_clone(pipeline_run, tmp_path):
    """A private copy of the finished run that a test may change freely."""
    from tests.pipeline import clone_run

    return clone_run(pipeline_run, tmp_path / "headroom")
