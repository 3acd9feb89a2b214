"""The study matrix as Snakemake plans it: results/<study>/ per study, one catalog, GPU jobs placed
per study on a multi-GPU host, and bad input refused before any job with results/ untouched."""

from __future__ import annotations

import re
import shutil

import pytest

from tests.pipeline import ROOT, copy_project, planned_rules, snakemake


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return copy_project(tmp_path_factory.mktemp("studies") / "headroom")


def _jobs(plan: str) -> list[dict[str, str]]:
    """(rule, study, resources) of each job in a dry-run's output."""
    jobs = []
    for block in re.split(r"\n(?=(?:local)?rule )", plan):
        m = re.match(r"(?:local)?rule (\w+):", block)
        if not m:
            continue
        study = re.search(r"wildcards: .*?study=([\w-]+)", block)
        res = re.search(r"resources: (.*)", block)
        jobs.append(
            {
                "rule": m.group(1),
                "study": study.group(1) if study else "",
                "resources": dict(kv.split("=", 1) for kv in res.group(1).split(", ")) if res else {},
                "outputs": re.search(r"output: (.*)", block).group(1) if "output:" in block else "",
            }
        )
    return jobs


def test_two_studies_and_a_replay_plan_into_their_own_folders_with_one_catalog(project):
    proc = snakemake(
        project,
        "--dry-run",
        "--config",
        "studies=[default,azure-conv,replay-h200-mooncake-conv-flashinfer-3x30]",
    )
    jobs = _jobs(proc.stdout)
    for job in jobs:
        if job["study"]:
            assert all(o.startswith(f"results/{job['study']}/") for o in job["outputs"].split(", ")), job
    by_study = {}
    for job in jobs:
        by_study.setdefault(job["study"], set()).add(job["rule"])
    assert {"trace", "correctness", "portfolio", "report"} <= by_study["default"]
    assert by_study["azure-conv"] == by_study["default"]
    assert (
        "replay" in by_study["replay-h200-mooncake-conv-flashinfer-3x30"]
        and "portfolio" not in by_study["replay-h200-mooncake-conv-flashinfer-3x30"]
    )
    assert [j["rule"] for j in jobs].count("catalog") == 1


def test_local_gpus_give_each_study_its_own_gpu_and_never_share_it(project):
    proc = snakemake(
        project,
        "--dry-run",
        "--config",
        "studies=[default,azure-conv,replay-h200-mooncake-conv-flashinfer-3x30]",
        "local_gpus=[0,1]",
    )
    gpu_of = {}
    for job in _jobs(proc.stdout):
        res = job["resources"]
        if res.get("gpu") != "1":
            assert not any(k.startswith("gpu_") for k in res), job  # CPU jobs hold no GPU
            continue
        held = sorted(k for k, v in res.items() if re.fullmatch(r"gpu_\d+", k) and v == "1")
        assert len(held) == 1, job  # exactly one GPU, so two jobs of one study serialise on it
        gpu_of.setdefault(job["study"], set()).add(held[0])
    assert gpu_of == {"default": {"gpu_0"}, "azure-conv": {"gpu_1"}}


def _refused(project, *args, expect):
    results = project / "results"
    results.mkdir(exist_ok=True)
    (results / "keep.txt").write_text("untouched")
    proc = snakemake(project, *args, check=False, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    for text in expect:
        assert text in out, out[-3000:]
    assert sorted(p.name for p in results.iterdir()) == ["keep.txt"]
    return out


@pytest.mark.parametrize(
    "args, expect",
    [
        (["--config", "studies=[default,nosuch]"], ["unknown study 'nosuch'", "'studies'"]),
        (["--config", "studies=[default,default]"], ["study 'default' is listed twice"]),
        (["--config", "replay=results"], ["overlaps the study's own results folder"]),
    ],
    ids=["unknown", "duplicate", "replay-onto-itself"],
)
def test_bad_study_input_fails_before_any_job(project, args, expect):
    _refused(project, *args, expect=expect)


def test_overlay_failing_the_schema_names_study_and_key(tmp_path):
    project = copy_project(tmp_path / "p")
    (project / "config/studies/wide.yaml").write_text("portfolio:\n  reps: 0\n")
    _refused(project, "--config", "studies=[wide]", expect=["study 'wide'", "portfolio.reps"])


def test_overlay_with_a_yaml_syntax_error_names_file_and_line(tmp_path):
    project = copy_project(tmp_path / "p")
    (project / "config/studies/broken.yaml").write_text("trace:\n  invocations: [6\n")
    _refused(project, "--config", "studies=[broken]", expect=["broken.yaml, line 3", "YAML syntax error"])


def test_replay_folder_that_does_not_verify_is_refused(tmp_path):
    project = copy_project(tmp_path / "p")
    shutil.copytree(ROOT / "data/reference/h200/mooncake-conv-flashinfer-3x30", project / "recorded")
    path = project / "recorded/trace.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    _refused(project, "--config", "replay=recorded", expect=["replay-recorded", "trace.parquet"])


def test_results_that_is_a_file_is_refused_before_any_job(tmp_path):
    project = copy_project(tmp_path / "p")
    (project / "results").write_text("oops")
    proc = snakemake(project, "--dry-run", check=False, timeout=300)
    assert proc.returncode != 0
    assert "results exists and is not a folder" in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr


def test_default_study_plans_as_before(project):
    plan = planned_rules(project)
    assert plan["portfolio"] == 3 and plan["catalog"] == 1 and plan["report"] == 1


def test_a_cuda_study_without_flashinfer_is_refused_at_plan_time_naming_the_extra(project):
    """The shipped default lists FlashInfer's candidates on CUDA hosts (issue 33): where FlashInfer
    is not installed the plan stops before any job, naming the extra and the key that leaves them
    out (a replay of such a study needs no FlashInfer: tests/workflow/test_reference.py)."""
    import importlib.util

    if importlib.util.find_spec("flashinfer") is not None:
        pytest.skip("FlashInfer is installed here: nothing to refuse")
    out = _refused(project, "--dry-run", "--config", "device=cuda", expect=["invalid configuration"])
    assert "config key 'native_candidates': flashinfer-paged, flashinfer-ragged need FlashInfer" in out
    assert 'pip install -e ".[pipeline,flashinfer]"' in out and "Traceback" not in out
