"""Bad configurations fail before any job runs, naming the key; device resolution is in one place."""

from __future__ import annotations

import copy

import pytest
import yaml

from headroom.core import config as hconfig
from tests.pipeline import ROOT, copy_project, snakemake

BASE = hconfig.load(ROOT / "config/config.yaml")


def _bad(edit):
    cfg = copy.deepcopy(BASE)
    edit(cfg)
    return cfg


BAD = {
    # schema
    "device": (lambda c: c.update(device="tpu"), "device"),
    "portfolio.reps": (lambda c: c["portfolio"].update(reps=0), "portfolio.reps"),
    "portfolio.mode": (lambda c: c["portfolio"].update(mode="sometimes"), "portfolio.mode"),
    "tiles[1].num_warps": (lambda c: c["tiles"][1].update(num_warps=3), "tiles[1].num_warps"),
    "partition.head_dim": (lambda c: c["partition"].update(head_dim=96), "partition.head_dim"),
    "trace.invocations": (lambda c: c["trace"].update(invocations=-4), "trace.invocations"),
    "unknown top-level key": (lambda c: c.update(portfolo={"reps": 3}), "portfolo"),
    "decision threshold": (
        lambda c: c["decision"].update(max_graph_fusion_speedup=0.9),
        "decision.max_graph_fusion_speedup",
    ),
    # semantics
    "heads not divisible": (lambda c: c["partition"].update(heads_q=30), "partition.heads_q"),
    "block not power of two": (lambda c: c["tiles"][2].update(block_n=48), "tiles[2].block_n"),
    "block below 16": (lambda c: c["tiles"][0].update(block_m=8), "tiles[0].block_m"),
    "duplicate tile": (lambda c: c["tiles"].append(dict(c["tiles"][0])), "tiles[5]"),
    "train fraction": (lambda c: c["policies"].update(train_fraction=1.0), "policies.train_fraction"),
    "too few invocations": (lambda c: c["trace"].update(invocations=1), "trace.invocations"),
    "graph_sweep tile index": (lambda c: c["graph_sweep"].update(tile=9), "graph_sweep.tile"),
    "missing replay dir": (lambda c: c.update(replay="no/such/dir"), "replay"),
}


@pytest.mark.parametrize("cuda", [True, False], ids=["gpu", "cpu"])
@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_config_names_the_key(name, cuda):
    # also on a machine without CUDA, where only the smoke overlay would run: the study is checked
    edit, key = BAD[name]
    with pytest.raises(hconfig.ConfigError) as exc:
        hconfig.resolve(_bad(edit), cuda_available=cuda)
    assert f"'{key}'" in str(exc.value), str(exc.value)


def test_bfloat16_is_refused_on_the_interpreter():
    cfg = _bad(
        lambda c: c.update(device="interpret", smoke={**c["smoke"], "partition": {"dtype": "bfloat16"}})
    )
    with pytest.raises(hconfig.ConfigError, match="'smoke.partition.dtype'"):
        hconfig.resolve(cfg)


def test_auto_without_cuda_selects_interpreter_and_smoke_shapes():
    study = hconfig.resolve(copy.deepcopy(BASE), cuda_available=False)
    assert study["device"] == "interpret"
    assert study["partition"] == {**BASE["partition"], **BASE["smoke"]["partition"]}
    assert study["portfolio"]["reps"] == BASE["smoke"]["portfolio"]["reps"]
    assert "smoke" not in study


def test_auto_with_cuda_keeps_the_default_study():
    study = hconfig.resolve(copy.deepcopy(BASE), cuda_available=True)
    assert study["device"] == "cuda"
    assert study["partition"]["dtype"] == "bfloat16" and study["portfolio"]["reps"] == 280
    assert (
        len(study["tiles"]) == 5 and study["trace"]["invocations"] == 48 and study["portfolio"]["runs"] == 3
    )


def test_smoke_overlay_is_validated_too_and_its_keys_keep_their_prefix():
    cfg = _bad(lambda c: c["smoke"]["portfolio"].update(reps=0))
    with pytest.raises(hconfig.ConfigError, match="config key 'smoke.portfolio.reps'"):
        hconfig.resolve(cfg, cuda_available=False)
    # a semantic check on a value the overlay sets
    cfg = _bad(lambda c: c["smoke"]["partition"].update(heads_q=3))
    with pytest.raises(hconfig.ConfigError, match="config key 'smoke.partition.heads_q'"):
        hconfig.resolve(cfg, cuda_available=False)
    # a key the overlay does not set keeps its own name
    cfg = _bad(lambda c: c["smoke"]["trace"].update(invocations=1))
    with pytest.raises(hconfig.ConfigError, match="config key 'smoke.trace.invocations'"):
        hconfig.resolve(cfg, cuda_available=False)
    cfg = _bad(lambda c: c["policies"].update(train_fraction=1.5))
    with pytest.raises(hconfig.ConfigError, match="config key 'policies.train_fraction'"):
        hconfig.resolve(cfg, cuda_available=False)


def test_unknown_key_in_a_graph_sweep_shape_is_refused():
    cfg = _bad(lambda c: c["graph_sweep"]["shapes"][1].update(kv_lne=256))
    with pytest.raises(hconfig.ConfigError, match=r"'graph_sweep.shapes\[1\]'.*kv_lne"):
        hconfig.resolve(cfg, cuda_available=True)


@pytest.mark.parametrize(
    "edit, key",
    [
        (lambda c: c["partition"].update(heads_q=30), "partition.heads_q"),  # semantic
        (lambda c: c["portfolio"].update(reps="many"), "reps"),  # schema (snakemake.utils.validate)
        (lambda c: c["tiles"][0].update(block_m=24), "tiles[0].block_m"),
    ],
)
def test_snakemake_refuses_bad_config_before_any_job_and_leaves_results_untouched(tmp_path, edit, key):
    project = copy_project(tmp_path / "p")
    results = project / "results"
    results.mkdir()
    (results / "keep.txt").write_text("untouched")
    cfg = _bad(edit)
    (project / "config/config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    proc = snakemake(project, check=False, timeout=300)
    assert proc.returncode != 0
    assert key in proc.stdout + proc.stderr
    assert sorted(p.name for p in results.iterdir()) == ["keep.txt"]
    assert (results / "keep.txt").read_text() == "untouched"
