"""The trace stage: config -> invocation trace (synthetic or a request log), window, sampler,
rounding, shape keys, describe, determinism and the stage script's provenance."""

import runpy
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from headroom.core import artifacts, config, contracts, defaults
from headroom.trace import invocations as trace
from headroom.trace.invocations import (
    COLUMNS,
    build,
    build_trace,
    describe,
    describe_text,
    scale_tokens,
    shape_key,
)
from headroom.trace.requests import Requests
from tests.pipeline import Named

ROOT = Path(__file__).resolve().parents[2]
AZURE = "data/traces/azure-2023-conv/AzureLLMInferenceTrace_conv.csv.gz"  # shipped gzip -9 -n
PART = {"heads_q": 32, "heads_kv": 8, "head_dim": 128, "dtype": "bfloat16"}
SMALL = {"heads_q": 4, "heads_kv": 2, "head_dim": 32, "dtype": "float32"}
REQUIRED = contracts.TRACE_COLUMNS


def log_csv(tmp_path: Path, arrivals_s, context, generated) -> str:
    path = tmp_path / "log.csv"
    pd.DataFrame({"TIMESTAMP": arrivals_s, "ContextTokens": context, "GeneratedTokens": generated}).to_csv(
        path, index=False
    )
    return str(path)


# -- the model, end to end through build_trace ---------------------------------------------------


def test_two_overlapping_requests_give_the_expected_trace(tmp_path):
    # Worked out in test_tracelog: A (0 s, 10 + 3 tokens), B (0.03 s, 20 + 2 tokens), 20 ms steps.
    src = log_csv(tmp_path, [0.0, 0.03], [10, 20], [3, 2])
    cfg = {"source": src, "invocations": None, "round_to": 1, "batching": {"decode_step_s": 0.02}}
    df = build_trace(cfg, SMALL)
    assert df["phase"].tolist() == ["prefill", "decode", "prefill", "decode", "decode"]
    assert df["batch"].tolist() == [1, 1, 1, 2, 2]
    assert df["q_len"].tolist() == [10, 1, 20, 1, 1]
    assert df["kv_len"].tolist() == [10, 11, 20, 21, 22]
    assert df["arrival_s"].tolist() == [0.0, 0.02, 0.03, 0.04, 0.06]
    assert df["request"].tolist() == [1, -1, 2, -1, -1]
    assert df["shape_key"].tolist()[3] == "decode|b2|q1|kvmax21|h4/2|d32|float32"
    assert df["shape_key"].tolist()[0] == "prefill|b1|q10|kv10|h4/2|d32|float32"

    mean = build_trace({**cfg, "batching": {"decode_step_s": 0.02, "kv_summary": "mean"}}, SMALL)
    assert mean["kv_len_raw"].tolist() == [10.0, 11.0, 20.0, 16.5, 17.5]
    assert mean["kv_len"].tolist() == [10, 11, 20, 17, 18]  # rounded up, even at round_to 1
    assert mean["shape_key"].tolist()[3] == "decode|b2|q1|kvmean17|h4/2|d32|float32"
    assert mean["kv_summary"].tolist() == ["exact", "mean", "exact", "mean", "mean"]


def test_window_selects_exactly_the_invocations_in_it(tmp_path):
    # Requests each second from 0 to 5 s, one generated token each, 0.5 s steps: request k
    # prefills at k s and decodes at k + 0.5 s. Window [2 s, 4 s) holds rows 3 and 4 (at 2 s and
    # 3 s) and their decodes; the request at 4 s lies on the open end and is out.
    src = log_csv(tmp_path, [0, 1, 2, 3, 4, 5], [16] * 6, [1] * 6)
    cfg = {"source": src, "invocations": None, "batching": {"decode_step_s": 0.5}}
    df = build_trace({**cfg, "window": {"start_s": 2, "duration_s": 2}}, SMALL)
    assert df["arrival_s"].tolist() == [2.0, 2.5, 3.0, 3.5]
    assert df["request"].tolist() == [3, -1, 4, -1]
    assert df["invocation"].tolist() == [0, 1, 2, 3]
    assert df["source_invocation"].tolist() == [4, 5, 6, 7]  # place in the stream from the log's start

    capped = build_trace({**cfg, "window": {"start_s": 2, "max_invocations": 3}}, SMALL)
    assert capped["arrival_s"].tolist() == [2.0, 2.5, 3.0]


def test_samplers_keep_chronological_order(tmp_path):
    src = log_csv(tmp_path, list(range(10)), [16] * 10, [1] * 10)  # 20 invocations
    cfg = {"source": src, "batching": {"decode_step_s": 0.5}}
    full = build_trace({**cfg, "invocations": None}, SMALL)
    assert len(full) == 20
    stride = build_trace({**cfg, "invocations": 6, "sampler": "stride"}, SMALL)
    assert stride["source_invocation"].tolist() == [0, 3, 6, 10, 13, 16]  # floor(i * 20 / 6)
    assert stride["arrival_s"].tolist() == full["arrival_s"].iloc[[0, 3, 6, 10, 13, 16]].tolist()
    assert stride["invocation"].tolist() == list(range(6))
    head = build_trace({**cfg, "invocations": 6, "sampler": "head"}, SMALL)
    assert head["source_invocation"].tolist() == list(range(6))
    with pytest.raises(ValueError, match=r"holds 20 invocations, fewer than trace.invocations = 21"):
        build_trace({**cfg, "invocations": 21}, SMALL)
    # stratified: 10 prefills (mixed steps) and 10 decodes (decode-only), 3 of each, each kind stride
    # sampled, every one weighted by its kind's count over its sample
    strat = build_trace(
        {**cfg, "invocations": 6, "sampler": "stratified", "stratified": {"min_per_kind": 3}}, SMALL
    )
    assert strat["source_invocation"].is_monotonic_increasing and strat["invocation"].tolist() == list(
        range(6)
    )
    assert (strat["phase"] == "prefill").sum() == 3 and strat["weight"].tolist() == [10 / 3] * 6


def test_tokens_are_scaled_half_up_and_clipped_to_max_kv_len():
    r = Requests(np.zeros(4, np.int64), np.array([5, 1, 20, 40]), np.array([3, 1, 10, 1]), np.arange(1, 5))
    scaled = scale_tokens(r, 0.5, None)
    assert scaled.context.tolist() == [3, 1, 10, 20]  # 2.5 -> 3, 0.5 -> 1 (never 0)
    assert scaled.generated.tolist() == [2, 1, 5, 1]
    clipped = scale_tokens(r, 1.0, 16)
    assert clipped.context.tolist() == [5, 1, 15, 15]
    assert clipped.generated.tolist() == [3, 1, 1, 1]
    assert (clipped.context + clipped.generated).max() <= 16


def test_relative_source_resolves_against_base_dir(tmp_path):
    log_csv(tmp_path, [0.0, 1.0], [16, 16], [1, 1])
    df = build_trace({"source": "log.csv", "invocations": None}, SMALL, base_dir=tmp_path)
    assert (df["phase"] == "prefill").sum() == 2


# -- the shipped Azure trace ---------------------------------------------------------------------


def test_the_shipped_azure_log_is_the_file_its_notice_names():
    # shipped gzipped (gzip -9 -n): the notice gives the gzip's SHA-256, BLAKE3 and size and, for
    # what gunzip gives back (the upstream CSV byte for byte), the upstream file's
    import hashlib

    from tests.trace.notices import assert_shipped_as_its_notice_says

    folder = ROOT / "data/traces/azure-2023-conv"
    packed = assert_shipped_as_its_notice_says(ROOT / AZURE, folder / "NOTICE.md", folder / "LICENSE")
    assert f"SHA-256 `{hashlib.sha256(packed).hexdigest()}`" in (folder / "NOTICE.md").read_text()


def test_azure_window_has_one_prefill_per_request_in_it():
    cfg = {"source": AZURE, "invocations": None, "window": {"start_s": 600.0, "duration_s": 30.0}}
    df, prov = build(cfg, PART, base_dir=ROOT)
    log = pd.read_csv(ROOT / AZURE)
    t = pd.to_datetime(log["TIMESTAMP"])
    rel_s = (t - t.iloc[0]).dt.total_seconds()
    in_window = log[(rel_s >= 600.0) & (rel_s < 630.0)]
    prefill = df[df["phase"] == "prefill"]
    assert len(prefill) == len(in_window) > 100
    assert prefill["request"].tolist() == (in_window.index + 1).tolist()
    assert prefill["q_len"].tolist() == (np.ceil(in_window["ContextTokens"] / 16) * 16).astype(int).tolist()
    assert df["arrival_s"].between(600.0, 630.0, inclusive="left").all()
    assert (df.loc[df["phase"] == "decode", "batch"] > 1).any()  # requests overlap in a real log
    assert prov["source_blake3"] == artifacts.hash_file(ROOT / AZURE)
    assert prov["window_prefills"] == len(in_window)


@pytest.mark.parametrize("cuda", [False, True])
def test_the_azure_overlay_resolves_and_builds(cuda):
    # config/studies/azure-conv.yaml on the shipped study, as `--configfile config/config.yaml
    # config/studies/azure-conv.yaml` merges it: the interpreter gets tiny shapes, a GPU full-size ones.
    base = config.load(ROOT / "config" / "config.yaml")
    study = config.resolve(
        config.deep_merge(base, config.load(ROOT / "config" / "studies" / "azure-conv.yaml")),
        cuda_available=cuda,
    )
    df, prov = build(study["trace"], study["partition"], base_dir=ROOT)
    assert prov["source"] == AZURE and prov["source_blake3"] == artifacts.hash_file(ROOT / AZURE)
    assert len(df) == study["trace"]["invocations"] and set(df["phase"]) == {"prefill", "decode"}
    assert (df["kv_len"] % study["trace"]["round_to"] == 0).all()
    if cuda:
        assert df["arrival_s"].between(600.0, 1200.0, inclusive="left").all()
        assert df["kv_len"].max() > 1024
    else:
        assert df["kv_len"].max() <= 64 and df["q_len"].max() <= 64
        assert df["batch"].max() <= study["trace"]["batching"]["max_batch"] <= 4


# -- synthetic -----------------------------------------------------------------------------------


def test_synthetic_trace_is_chronological_seeded_and_complete():
    df = build_trace({}, PART)
    n = defaults.value("trace", "invocations")
    assert len(df) == n
    assert tuple(df.columns) == (*COLUMNS, "weight") and set(REQUIRED) <= set(df.columns)
    assert df["invocation"].tolist() == list(range(n))
    assert df["arrival_s"].is_monotonic_increasing
    assert set(df["phase"]) == {"prefill", "decode"}
    assert (df.loc[df["phase"] == "decode", "q_len"] == 1).all()
    assert (df.loc[df["phase"] == "prefill", "q_len"] == df.loc[df["phase"] == "prefill", "kv_len"]).all()
    assert (df[["heads_q", "heads_kv", "head_dim"]] == [32, 8, 128]).all().all() and set(df["dtype"]) == {
        "bfloat16"
    }
    pd.testing.assert_frame_equal(df, build_trace({"seed": 0}, PART))
    assert not build_trace({"seed": 1}, PART)["shape_key"].equals(df["shape_key"])


def test_synthetic_sessions_prefill_then_decode_with_growing_kv_len():
    # One sequence at a time and exact lengths: sessions decode one after another, first come
    # first served, each with kv_len running from context + 1 to context + generated.
    cfg = {"invocations": None, "round_to": 1, "batching": {"max_batch": 1}, "synthetic": {"requests": 12}}
    df = build_trace(cfg, PART)
    req = trace.synthetic_requests({**defaults.section("trace")["synthetic"], "requests": 12}, seed=0)
    decode_kv = df.loc[df["phase"] == "decode", "kv_len"].tolist()
    expected = [c + k for c, g in zip(req.context, req.generated, strict=True) for k in range(1, g + 1)]
    assert decode_kv == expected
    assert (df.loc[df["phase"] == "decode", "batch"] == 1).all()
    assert df.loc[df["phase"] == "prefill", "q_len"].tolist() == req.context.tolist()


# -- shape keys and describe ---------------------------------------------------------------------


def test_shape_key_is_canonical():
    assert (
        shape_key("prefill", 1, 512, 512, 32, 8, 128, "bfloat16")
        == "prefill|b1|q512|kv512|h32/8|d128|bfloat16"
    )
    assert (
        shape_key("decode", 4, 1, 1040, 32, 8, 128, "bfloat16", "max")
        == "decode|b4|q1|kvmax1040|h32/8|d128|bfloat16"
    )
    df = build_trace(
        {"source": AZURE, "invocations": 400, "window": {"duration_s": 300.0}}, PART, base_dir=ROOT
    )
    shape = ["phase", "batch", "q_len", "kv_len", "kv_summary"]
    assert (df.groupby("shape_key")[shape].nunique() == 1).all().all()  # a key has one shape
    assert (df.groupby(shape)["shape_key"].nunique() == 1).all()  # a shape has one key


def test_describe_reports_the_mix_and_unseen_test_keys():
    df = pd.DataFrame(
        {
            "invocation": range(8),
            "phase": ["prefill", "decode", "decode", "prefill", "prefill", "decode", "decode", "decode"],
            "batch": [1, 2, 2, 1, 1, 4, 4, 3],
            "q_len": [64, 1, 1, 32, 64, 1, 1, 1],
            "kv_len": [64, 80, 80, 32, 64, 96, 96, 128],
            "shape_key": ["a", "b", "b", "c", "a", "d", "d", "e"],
            "arrival_s": np.arange(8) * 0.5,
        }
    )
    d = describe(df, 0.5)
    assert d["invocations"] == 8 and d["distinct_shape_keys"] == 5 and d["duration_s"] == 3.5
    assert d["phases"]["prefill"]["share"] == 3 / 8
    assert d["phases"]["decode"]["batch_counts"] == {2: 2, 3: 1, 4: 2}
    assert d["phases"]["decode"]["kv_len"]["max"] == 128.0
    split = d["split"]
    assert (split["train_invocations"], split["test_invocations"]) == (4, 4)
    assert (split["test_keys"], split["unseen_test_keys"]) == (3, 2)  # test {a, d, e}; train {a, b, c}
    assert split["unseen_test_key_share"] == 2 / 3 and split["unseen_test_invocation_share"] == 3 / 4
    assert describe(df)["split"] is None
    text = describe_text(df, 0.5)
    assert "unseen in train: 2 of 3 (66.7% of keys, 75.0% of test invocations)" in text
    assert "decode batch sizes: 2: 2, 3: 1, 4: 2" in text
    with pytest.raises(ValueError, match="train_fraction"):
        describe(df, 1.0)


# -- bad config and bad input --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cfg", "match"),
    [
        ({"sources": "x"}, "trace.sources"),
        ({"batching": {"kv_summary": "median"}}, "trace.batching.kv_summary"),
        ({"batching": {"max_batch": 0}}, "trace.batching.max_batch"),
        ({"tokens": {"max_kv_len": 100}}, r"trace.tokens.max_kv_len.*multiple of trace.round_to = 16"),
        ({"window": {"start_s": -1}}, "trace.window.start_s"),
        ({"window": {"stop_s": 1}}, "trace.window.stop_s"),
        ({"synthetic": {"generated_tokens": [5, 2]}}, "trace.synthetic.generated_tokens"),
        ({"synthetic": {"prompt_tokens": [16, 0]}}, r"trace.synthetic.prompt_tokens\[1\]"),
        ({"sampler": "random"}, "trace.sampler"),
        ({"invocations": 0}, "trace.invocations"),
    ],
)
def test_bad_settings_fail_naming_the_key(cfg, match):
    with pytest.raises(ValueError, match=match):
        build_trace(cfg, PART)


def test_bad_partition_fails_naming_the_key():
    with pytest.raises(ValueError, match="partition.head_dim"):
        build_trace({}, {"heads_q": 32, "heads_kv": 8, "dtype": "bfloat16"})


def test_empty_window_fails_naming_the_file_and_the_column(tmp_path):
    src = log_csv(tmp_path, [0.0, 1.0], [16, 16], [1, 1])
    with pytest.raises(
        ValueError, match=rf"{src}: trace.window \(start_s=50.*column 'TIMESTAMP' spans 0..1.000 s"
    ):
        build_trace({"source": src, "invocations": None, "window": {"start_s": 50.0}}, SMALL)


def test_config_schema_and_defaults_name_the_same_keys():
    schema = yaml.safe_load((ROOT / "headroom" / "core" / "schema.yaml").read_text())["properties"]["trace"][
        "properties"
    ]
    assert set(schema) == set(defaults.section("trace"))
    for key, default in defaults.section("trace").items():
        if isinstance(default, dict):
            assert set(schema[key]["properties"]) == set(default), key
    study = yaml.safe_load((ROOT / "config" / "config.yaml").read_text())
    for section in (study["trace"], {**study["trace"], **study["smoke"]["trace"]}):
        trace.settings(section)  # the shipped study and its smoke overlay are valid


# -- the stage script: provenance, determinism, nothing written on bad input ---------------------


class _Snakemake:
    def __init__(self, out: Path, trace_cfg: dict, source: list[str]):
        code = [
            str(ROOT / p)
            for p in ("headroom/trace/invocations.py", "headroom/trace/requests.py", "scripts/trace.py")
        ]
        self.rule = "trace"
        self.input = Named(source=source, code=code)
        self.output = Named(trace=str(out))
        self.params = {"trace": trace_cfg, "partition": SMALL}
        self.wildcards = {}
        self.log = [str(out.with_suffix(".log"))]


def run_script(out: Path, trace_cfg: dict, source: list[str]) -> None:
    runpy.run_path(
        str(ROOT / "scripts" / "trace.py"), init_globals={"snakemake": _Snakemake(out, trace_cfg, source)}
    )


def test_script_writes_byte_identical_traces_with_the_source_hash(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # Snakemake runs scripts in the project root
    cfg = {
        "source": AZURE,
        "invocations": 12,
        "tokens": {"scale": 0.03125, "max_kv_len": 64},
        "window": {"duration_s": 60.0},
    }
    run_script(tmp_path / "a" / "trace.parquet", cfg, [AZURE])
    run_script(tmp_path / "b" / "trace.parquet", cfg, [AZURE])
    run_script(tmp_path / "c" / "trace.parquet", {**cfg, "round_to": 32}, [AZURE])
    a, b, c = (artifacts.verify(tmp_path / d / "trace.parquet") for d in "abc")
    assert a == b != c
    prov = artifacts.read_provenance(tmp_path / "a" / "trace.parquet")
    source_hash = artifacts.hash_file(ROOT / AZURE)
    assert prov["extra"]["source_blake3"] == source_hash and prov["inputs"] == {AZURE: source_hash}
    assert prov["extra"]["settings"]["tokens"] == {"scale": 0.03125, "max_kv_len": 64}
    assert prov["extra"]["settings"]["columns"] == defaults.section("trace")["columns"]
    assert len(artifacts.read(tmp_path / "a" / "trace.parquet")) == 12


def test_script_writes_nothing_for_a_bad_log(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    bad = tmp_path / "bad.csv"
    bad.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-01-01 00:00:00,5,1\n2023-01-01 00:00:01,-5,1\n"
    )
    out = tmp_path / "results" / "trace.parquet"
    with pytest.raises(SystemExit, match=r"bad.csv: row 2 \(line 3\), column 'ContextTokens'"):
        run_script(out, {"source": str(bad), "invocations": None}, [str(bad)])
    assert not out.exists() and not artifacts.sidecar(out).exists()
    assert [p.name for p in out.parent.iterdir()] == ["trace.log"]


def test_the_stratified_allocation_gives_each_kind_its_floor_and_the_rest_in_proportion():
    from headroom.trace.invocations import allocation, stratified

    assert allocation({"decode-only": 2700, "mixed": 250}, 128, 64) == {"decode-only": 64, "mixed": 64}
    # the rest in proportion to what each kind has left (largest remainders), never more than it holds
    assert allocation({"decode-only": 900, "mixed": 100}, 200, 50) == {"decode-only": 144, "mixed": 56}
    assert allocation({"decode-only": 900, "mixed": 10}, 128, 64) == {"decode-only": 118, "mixed": 10}
    # a floor the count cannot give every kind is an equal share
    assert allocation({"decode-only": 900, "mixed": 100}, 6, 64) == {"decode-only": 3, "mixed": 3}
    kinds = np.array(["decode-only"] * 90 + ["mixed"] * 10)[np.random.default_rng(0).permutation(100)]
    idx, w = stratified(kinds, 40, 15)
    assert (np.diff(idx) > 0).all() and len(idx) == 40
    x = np.random.default_rng(1).gamma(2.0, size=100) * np.where(kinds == "mixed", 10.0, 1.0)
    for k in ("decode-only", "mixed"):  # weights sum to the window's count per kind
        assert w[kinds[idx] == k].sum() == pytest.approx((kinds == k).sum())
    # the weighted sample mean estimates the window's mean without the kinds' bias
    assert abs((w * x[idx]).sum() / w.sum() - x.mean()) < abs(x[idx].mean() - x.mean())
