"""Studies: names, overlays, replay folders and GPU placement, resolved once before any job."""

from __future__ import annotations

import copy
import shutil

import pytest

from headroom.core import artifacts, replay
from headroom.core import config as hconfig
from tests.pipeline import ROOT

BASE = hconfig.load(ROOT / "config/config.yaml")
REFERENCE = ROOT / "data/reference/h200"


def _plan(**edits):
    cfg = copy.deepcopy(BASE)
    cfg.update(edits)
    return hconfig.plan_studies(cfg, {}, cuda_available=False)


def test_default_run_is_the_default_study():
    assert list(_plan()) == ["default"]


def test_overlay_study_merges_onto_the_default_and_keeps_its_name():
    studies = _plan(studies=["default", "azure-conv"])
    assert list(studies) == ["default", "azure-conv"]
    assert studies["azure-conv"]["trace"]["source"].endswith("AzureLLMInferenceTrace_conv.csv.gz")
    assert studies["default"]["trace"]["source"] == "synthetic"
    assert studies["azure-conv"]["name"] == "azure-conv"


def test_command_line_values_win_over_the_overlay():
    cfg = copy.deepcopy(BASE)
    cfg["studies"] = ["azure-conv"]
    studies = hconfig.plan_studies(cfg, {"device": "cuda"}, cuda_available=False)
    assert studies["azure-conv"]["device"] == "cuda"


def test_replay_names_map_to_recorded_folders():
    studies = _plan(
        studies=["replay-h200-mooncake-conv-flashinfer-3x30", "replay-h200-azure-conv-flashinfer-6x160"]
    )
    assert studies["replay-h200-mooncake-conv-flashinfer-3x30"]["replay"].endswith(
        "data/reference/h200/mooncake-conv-flashinfer-3x30"
    )
    assert {s["device"] for s in studies.values()} == {"replay"}


def test_replay_shorthand_is_one_replay_study():
    assert list(_plan(replay="data/reference/h200/mooncake-conv-flashinfer-3x30")) == [
        "replay-h200-mooncake-conv-flashinfer-3x30"
    ]


def test_recorded_devices_win_over_this_machine():
    # a cluster job re-reads the workflow on its node: `auto` must not flip to the interpreter there
    cfg = copy.deepcopy(BASE)
    studies = hconfig.plan_studies(cfg, {}, cuda_available=False, recorded_devices={"default": "cuda"})
    assert studies["default"]["device"] == "cuda"
    assert studies["default"]["portfolio"]["reps"] == BASE["portfolio"]["reps"]  # no smoke overlay


@pytest.mark.parametrize(
    "edits, expected",
    [
        ({"studies": ["nosuch"]}, "unknown study 'nosuch'"),
        ({"studies": ["default", "default"]}, "study 'default' is listed twice"),
        ({"studies": ["a/b"]}, "study name 'a/b'"),
    ],
)
def test_bad_study_lists_name_the_study(edits, expected):
    with pytest.raises(hconfig.ConfigError, match="config key 'studies'") as exc:
        _plan(**edits)
    assert expected in str(exc.value)


def test_overlay_failing_the_schema_names_study_and_key(tmp_path, monkeypatch):
    monkeypatch.setattr(hconfig, "STUDIES_DIR", tmp_path)
    (tmp_path / "wide.yaml").write_text("portfolio:\n  reps: 0\n")
    with pytest.raises(hconfig.ConfigError) as exc:
        _plan(studies=["wide"])
    assert "study 'wide'" in str(exc.value) and "'portfolio.reps'" in str(exc.value)


def test_overlay_yaml_syntax_error_names_file_and_line(tmp_path, monkeypatch):
    monkeypatch.setattr(hconfig, "STUDIES_DIR", tmp_path)
    (tmp_path / "broken.yaml").write_text("trace:\n  invocations: 6\n  window: {start_s: 0\n")
    with pytest.raises(hconfig.ConfigError) as exc:
        _plan(studies=["broken"])
    msg = str(exc.value)
    assert "broken.yaml" in msg and "line 4" in msg and "YAML syntax error" in msg


def test_replay_onto_its_own_results_is_refused(tmp_path):
    with pytest.raises(hconfig.ConfigError, match="overlaps the study's own results folder"):
        hconfig.check_replay_source("replay-results", "results", "results")
    with pytest.raises(hconfig.ConfigError, match="overlaps"):
        hconfig.check_replay_source("x", "results/x", "results")
    hconfig.check_replay_source("replay-default", "results/default", "results")  # another study: fine


def test_results_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "results").write_text("not a folder")
    with pytest.raises(hconfig.ConfigError, match="is not a folder"):
        hconfig.check_results_dir(tmp_path / "results")


def test_gpu_assignment_spreads_studies_over_local_gpus():
    assert hconfig.gpu_assignment(["a", "b", "c"], [0, 1]) == {"a": 0, "b": 1, "c": 0}
    assert hconfig.gpu_assignment(["a"], ["3"]) == {"a": 3}  # --config gives strings
    assert hconfig.gpu_assignment(["a", "b"], None) == {"a": None, "b": None}
    with pytest.raises(hconfig.ConfigError, match="local_gpus"):
        hconfig.gpu_assignment(["a"], [0, 0])


def test_recorded_reference_folders_verify_and_hold_together():
    for study in ("mooncake-conv-flashinfer-3x30", "azure-conv-flashinfer-6x160"):
        names = replay.check_recorded(REFERENCE / study)
        assert "trace.parquet" in names and "portfolio/run-3-samples.parquet" in names


def test_replay_folder_mixing_two_studies_is_refused_naming_the_artifacts(tmp_path):
    mixed = tmp_path / "mixed"
    shutil.copytree(REFERENCE / "mooncake-conv-flashinfer-3x30", mixed)
    for name in ("trace.parquet", "trace.parquet.blake3"):
        shutil.copyfile(REFERENCE / "azure-conv-flashinfer-6x160" / name, mixed / name)
    with pytest.raises(replay.ReplayError) as exc:
        replay.check_recorded(mixed, study="replay-mixed")
    msg = str(exc.value)
    assert "replay-mixed" in msg and "correctness.parquet was made from a trace.parquet" in msg


def test_replay_folder_whose_hash_does_not_verify_is_refused(tmp_path):
    bad = tmp_path / "bad"
    shutil.copytree(REFERENCE / "mooncake-conv-flashinfer-3x30", bad)
    data = bytearray((bad / "lifecycle.parquet").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (bad / "lifecycle.parquet").write_bytes(bytes(data))
    with pytest.raises(replay.ReplayError, match="lifecycle.parquet") as exc:
        replay.check_recorded(bad, study="replay-bad")
    assert artifacts.recorded_hash(bad / "lifecycle.parquet") in str(exc.value)


class _Smk:
    """The parts of Snakemake's `snakemake` object the stage harness reads."""

    def __init__(self, params, inputs=(), study="s1"):
        self.rule = "policies"
        self.params = params
        self.wildcards = {"study": study}
        self.input = list(inputs)
        self.log = []


def test_gpu_job_on_a_node_without_a_gpu_fails_naming_the_study():

    import torch

    from headroom.measure import device

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(RuntimeError, match="study 'h100-study' runs on device 'cuda'.*no CUDA device"):
        device.check("h100-study", "cuda")


def test_measurements_from_two_environments_are_refused_naming_the_artifacts(tmp_path):
    import logging

    import pandas as pd

    from headroom.core import stage

    paths = []
    for name, env in [("run-1", "aaaa"), ("run-2", "aaaa"), ("run-3", "bbbb")]:
        path = tmp_path / f"{name}.parquet"
        artifacts.write(pd.DataFrame({"x": [1]}), path, kind="measurement", provenance={"environment": env})
        paths.append(str(path))
    job = stage.Stage(_Smk({}, paths), logging.getLogger("t"))
    with pytest.raises(RuntimeError, match="2 environments") as exc:
        stage.check_environments(job)
    assert "bbbb: " + paths[2] in str(exc.value)
    stage.check_environments(stage.Stage(_Smk({}, paths[:2]), logging.getLogger("t")))  # one: fine
    # the catalog reads every study: an interpreter study beside a replayed GPU reference is fine there
    stage.check_environments(stage.Stage(_Smk({}, paths, study=""), logging.getLogger("t")))
