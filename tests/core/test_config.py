"""Bad configurations fail before any job runs, naming the key; device resolution is in one place."""

from __future__ import annotations

import copy
import shutil

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
    "family without a colon": (lambda c: c.update(family="nocolon"), "family"),
    "family not a string": (lambda c: c.update(family=3), "family"),
    # upper bounds (issue 23 item 14): refused before the DAG is built
    "portfolio.runs past its bound": (lambda c: c["portfolio"].update(runs=1_000_000_000), "portfolio.runs"),
    "portfolio.reps past its bound": (lambda c: c["portfolio"].update(reps=10**9), "portfolio.reps"),
    "trace.invocations past its bound": (
        lambda c: c["trace"].update(invocations=10**9),
        "trace.invocations",
    ),
    "max_kv_len past its bound": (
        lambda c: c["trace"]["tokens"].update(max_kv_len=2**30),
        "trace.tokens.max_kv_len",
    ),
    "synthetic requests past their bound": (
        lambda c: c["trace"]["synthetic"].update(requests=10**9),
        "trace.synthetic.requests",
    ),
    "synthetic generated tokens past their bound": (
        lambda c: c["trace"]["synthetic"].update(generated_tokens=[1, 10**9]),
        "trace.synthetic.generated_tokens[1]",
    ),
    "adaptive max_samples past its bound": (
        lambda c: c["portfolio"]["adaptive"]["max_samples"].update(graph=10**9),
        "portfolio.adaptive.max_samples.graph",
    ),
    "bootstrap resamples past their bound": (
        lambda c: c["policies"].update(bootstrap_resamples=10**9),
        "policies.bootstrap_resamples",
    ),
    # non-finite numbers (item 30): refused at plan time, not in the job
    "NaN threshold": (
        lambda c: c["decision"].update(max_gap_to_oracle_pct=float("nan")),
        "decision.max_gap_to_oracle_pct",
    ),
    "infinite threshold": (
        lambda c: c["decision"].update(max_policy_gain_pct=float("inf")),
        "decision.max_policy_gain_pct",
    ),
    "NaN tolerance": (
        lambda c: c["correctness"]["tolerances"]["float16"].update(rel=float("nan")),
        "correctness.tolerances.float16.rel",
    ),
    "infinite confidence-free float": (
        lambda c: c["trace"]["batching"].update(decode_step_s=float("inf")),
        "trace.batching.decode_step_s",
    ),
}


@pytest.mark.parametrize("cuda", [True, False], ids=["cuda", "cpu"])
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
        len(study["tiles"]) == 5 and study["trace"]["invocations"] == 160 and study["portfolio"]["runs"] == 6
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


@pytest.mark.parametrize("family", [None, "a.b:C", "examples.rmsnorm.family:SMOKE", "mine:FAMILY"])
def test_family_is_null_for_attention_or_a_module_and_attribute(family):
    # the form only: whether it imports is the trace stage's to say (tests/families/test_study.py)
    for cuda in (True, False):
        assert (
            hconfig.resolve(_bad(lambda c: c.update(family=family)), cuda_available=cuda)["family"] == family
        )
    assert BASE["family"] is None  # the default study: the built-in attention kernels


@pytest.mark.parametrize("family", ["nocolon", "a.b:", ":C", "a..b:C", "a.b:C:D", "a b:C", "a-b:C", ""])
def test_a_family_of_another_form_is_one_line_naming_the_key(family):
    with pytest.raises(hconfig.ConfigError) as exc:
        hconfig.resolve(_bad(lambda c: c.update(family=family)), cuda_available=False)
    msg = str(exc.value)
    assert msg.startswith(f"config key 'family': {family!r} must be `package.module:ATTRIBUTE`"), msg
    assert "\n" not in msg
    # set by the smoke overlay: named there
    with pytest.raises(hconfig.ConfigError, match="config key 'smoke.family'"):
        hconfig.resolve(_bad(lambda c: c["smoke"].update(family=family)), cuda_available=False)


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
        (
            lambda c: c["decision"].update(max_gap_to_oracle_pct=float("nan")),
            "decision.max_gap_to_oracle_pct",
        ),
        (lambda c: c["portfolio"].update(runs=1001), "runs"),  # schema, with its reason
    ],
    ids=["semantic", "schema", "block", "nan-threshold", "runs-bound"],
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


def test_a_bound_names_its_reason():
    with pytest.raises(hconfig.ConfigError) as exc:
        hconfig.resolve(_bad(lambda c: c["portfolio"].update(runs=1_000_000_000)), cuda_available=True)
    assert "maximum of 1000" in str(exc.value) and "Snakemake job" in str(exc.value), str(exc.value)


def test_nan_in_the_smoke_overlay_is_refused_under_its_own_key():
    cfg = _bad(lambda c: c["smoke"]["portfolio"].update(floor_factor=float("nan")))
    with pytest.raises(hconfig.ConfigError, match=r"'smoke.portfolio.floor_factor'.*not a finite number"):
        hconfig.resolve(cfg, cuda_available=False)


def test_the_bounds_admit_the_planned_studies():
    """What the study-power and serving-traces issues plan: 500+ invocations, kv_len 131,072,
    adaptive repetition counts up to 100,000, Mooncake-size request logs."""

    def planned(c):
        c["trace"].update(invocations=512)
        c["trace"]["tokens"].update(max_kv_len=131_072)
        c["trace"]["synthetic"].update(requests=100_000, prompt_tokens=[126_195, 131_071])
        c["graph_sweep"]["shapes"].append({"phase": "prefill", "batch": 1, "q_len": 2048, "kv_len": 131_072})
        c["portfolio"].update(reps=100_000, runs=10)
        c["portfolio"]["adaptive"]["max_samples"].update(eager=100_000, graph=100_000)

    study = hconfig.resolve(_bad(planned), cuda_available=True)
    assert study["trace"]["tokens"]["max_kv_len"] == 131_072 and study["portfolio"]["reps"] == 100_000
    assert study["portfolio"]["adaptive"]["max_samples"] == {"eager": 100_000, "graph": 100_000}


def test_nested_cli_values_are_typed_as_the_schema_types_them():
    # what Snakemake's --config parser gives for decision={...} and smoke={...}: YAML BaseLoader strings
    values = {
        "decision": {"max_gap_to_oracle_pct": "2.0", "max_policy_gain_pct": "1"},
        "trace": {"tokens": {"max_kv_len": "null"}, "window": {"max_invocations": "64"}},
        "portfolio": {"flush_l2": "true", "reps": "ten"},
        "report": {"title": "1.0"},
        "smoke": {"portfolio": {"reps": "2"}},
    }
    hconfig.type_cli_values(values)
    assert values["decision"] == {"max_gap_to_oracle_pct": 2.0, "max_policy_gain_pct": 1}
    assert values["trace"] == {"tokens": {"max_kv_len": None}, "window": {"max_invocations": 64}}
    assert values["portfolio"] == {"flush_l2": True, "reps": "ten"}  # "ten" is left for the schema to refuse
    assert values["report"] == {"title": "1.0"}  # a string where the schema wants one stays a string
    assert values["smoke"] == {"portfolio": {"reps": 2}}
    # a study overlay's planned config takes the typed override (the default study's is Snakemake's config)
    cfg = {**BASE, "studies": ["tiny"]}
    studies = hconfig.plan_studies(
        cfg, hconfig.type_cli_values({"decision": {"max_gap_to_oracle_pct": "2.0"}})
    )
    assert studies["tiny"]["decision"]["max_gap_to_oracle_pct"] == 2.0


def test_snakemake_takes_a_nested_numeric_config_value(tmp_path):
    project = copy_project(tmp_path / "p")
    proc = snakemake(project, "--dry-run", "--config", "decision={max_gap_to_oracle_pct: 2.0}", timeout=300)
    assert "trace" in proc.stdout  # planned; on main: "'2.0' is not of type 'number'"
    proc = snakemake(project, "--dry-run", "--config", "decision={max_gap_to_oracle_pct: two}", check=False)
    assert proc.returncode != 0 and "max_gap_to_oracle_pct" in proc.stdout + proc.stderr


@pytest.mark.parametrize("name", ["wé ird;$(touch PWNED)", "a.b", "sp ace", "newline\n"])
def test_a_replay_folder_whose_name_is_no_study_name_is_refused(tmp_path, name):
    folder = tmp_path / name
    folder.mkdir()
    with pytest.raises(hconfig.ConfigError, match=r"config key 'replay'.*study name"):
        hconfig.study_names({"replay": str(folder)})


@pytest.mark.parametrize("name", ["default\n", "a\nb", "ok\r"])
def test_a_study_name_with_a_line_break_is_refused(name):
    """The rule is matched against the whole name: a trailing newline is no study name either."""
    with pytest.raises(hconfig.ConfigError, match=r"config key 'studies'.*must be letters"):
        hconfig.study_names({"studies": [name]})


def test_snakemake_refuses_a_replay_folder_named_against_the_rule_and_leaves_results_untouched(tmp_path):
    project = copy_project(tmp_path / "p")
    results = project / "results"
    results.mkdir()
    (results / "keep.txt").write_text("untouched")
    recorded = tmp_path / "wé ird;$(touch PWNED)"
    shutil.copytree(ROOT / "data/reference/h200/mooncake-conv-flashinfer-3x30", recorded)
    proc = snakemake(project, "--config", f"replay={recorded}", check=False, timeout=300)
    assert proc.returncode != 0 and "config key 'replay'" in proc.stdout + proc.stderr
    assert sorted(p.name for p in results.iterdir()) == ["keep.txt"]
    assert not list(tmp_path.rglob("PWNED"))


@pytest.mark.parametrize("text", [".nan", ".inf", "-.inf", "nan", "inf", "1e999"])
def test_a_non_finite_threshold_from_the_command_line_is_refused_at_plan_time(text):
    # Snakemake hands `--config 'decision={max_gap_to_oracle_pct: .nan}'` over as a string, for
    # the default study merged into its config, for every other study as an override
    typed = hconfig.type_cli_values({"decision": {"max_gap_to_oracle_pct": text}})
    merged = hconfig.deep_merge(BASE, typed)
    for cfg, overrides in ((merged, None), ({**merged, "studies": ["tiny"]}, typed)):
        with pytest.raises(hconfig.ConfigError, match=r"config key 'decision\.max_gap_to_oracle_pct'"):
            hconfig.plan_studies(cfg, overrides, cuda_available=False)


# -- issue 31 case 14: alias bombs and message length ----------------------------------------------


def _alias_bomb(levels: int, width: int = 9, mapping: bool = False) -> str:
    """A few hundred bytes of nested YAML aliases expanding to width ** levels values."""
    if mapping:
        lines = ["b0: &b0 {" + ", ".join(f"k{j}: x" for j in range(width)) + "}"]
        lines += [
            f"b{i}: &b{i} {{" + ", ".join(f"k{j}: *b{i - 1}" for j in range(width)) + "}"
            for i in range(1, levels + 1)
        ]
    else:
        lines = ["a0: &a0 [" + ", ".join(["x"] * width) + "]"]
        lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("mapping", [False, True], ids=["lists", "mappings"])
@pytest.mark.parametrize("levels", [6, 9])
def test_an_overlay_of_nested_aliases_is_refused_within_a_second(tmp_path, monkeypatch, levels, mapping):
    # 9 levels x 9 exhausted memory in the schema check (3.7 GB in 97 s before a cap); 6 levels made
    # a one-line error of 5.9 million characters
    import time

    overlay = tmp_path / "bomb.yaml"
    overlay.write_text("trace:\n  invocations: 10\n" + _alias_bomb(levels, mapping=mapping))
    assert len(overlay.read_bytes()) < 1000
    monkeypatch.setattr(hconfig, "STUDIES_DIR", tmp_path)
    start = time.monotonic()
    with pytest.raises(hconfig.ConfigError) as exc:
        hconfig.plan_studies({**BASE, "studies": ["bomb"]}, cuda_available=True)
    assert time.monotonic() - start < 1.0
    msg = str(exc.value)
    assert f"{overlay}: the configuration holds more than 10,000 values once its YAML aliases" in msg
    assert len(msg) < 2000


def test_a_recursive_alias_and_deep_nesting_are_refused(tmp_path):
    recursive = tmp_path / "recursive.yaml"
    recursive.write_text("a: &a [1, *a]\n")
    with pytest.raises(hconfig.ConfigError, match="or an alias inside itself"):
        hconfig.load(recursive)
    deep = tmp_path / "deep.yaml"
    deep.write_text("a: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(hconfig.ConfigError, match="nested too deeply"):
        hconfig.load(deep)


def test_shared_values_within_the_limit_still_load(tmp_path):
    # aliases are legal YAML: a study that reuses a block is fine while its expanded size is small
    ok = tmp_path / "ok.yaml"
    ok.write_text(_alias_bomb(3))  # 9 ** 3 = 729 values
    assert len(hconfig.load(ok)["a3"]) == 9
    assert hconfig.expanded_nodes(BASE) < hconfig.MAX_CONFIG_NODES / 10


def test_no_config_error_is_longer_than_2000_characters():
    # the unknown-key error printed the whole merged config (~4 KB)
    with pytest.raises(hconfig.ConfigError) as exc:
        hconfig.resolve(_bad(lambda c: c.update(bogus_key=1)), cuda_available=True)
    msg = str(exc.value)
    assert "unknown key(s) 'bogus_key'" in msg and len(msg) < 500 and "'partition'" not in msg
    with pytest.raises(hconfig.ConfigError) as exc:  # a huge value is cut, not echoed whole
        hconfig.resolve(_bad(lambda c: c.update(device=["x" * 50] * 10_000)), cuda_available=True)
    assert len(str(exc.value)) <= hconfig.MAX_MESSAGE_CHARS
    assert len(str(hconfig.ConfigError("y" * 10**6))) <= hconfig.MAX_MESSAGE_CHARS


def test_snakemake_refuses_an_alias_bomb_and_an_unknown_key_in_one_short_line(tmp_path):
    """The Snakefile's own check runs before snakemake's validate, which printed the whole config
    (47 KB for one unknown key) and would walk an alias bomb. (A --configfile of nested *mapping*
    aliases never reaches it: snakemake's own config merge expands it first, snakemake.utils.update_config.)"""
    project = copy_project(tmp_path / "p")
    for name, text, expect in [
        ("bomb", _alias_bomb(9), "more than 10,000 values once its YAML aliases"),
        ("unknown", "bogus_key: 1\n", "unknown key(s) 'bogus_key'"),
    ]:
        extra = tmp_path / f"{name}.yaml"
        extra.write_text(text)
        proc = snakemake(project, "--dry-run", "--configfile", str(extra), check=False, timeout=120)
        out = proc.stdout + proc.stderr
        assert proc.returncode != 0 and expect in out, out[-2000:]
        assert max(len(line) for line in out.splitlines()) < 2000 and len(out) < 5000, len(out)
