"""Serving traces from hand-built JSONL logs whose cache hits and chunk boundaries are known: a
request repeating another's prefix, a prompt of 2.5 budgets, a step mixing decodes with a chunk,
an eviction, per-sequence decode lengths; determinism; and every bad log refused naming what was
wrong."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headroom.core import artifacts
from headroom.trace.invocations import SERVING_COLUMNS, build, build_trace, describe_text, settings
from headroom.trace.requests import read_request_log

PART = {"heads_q": 4, "heads_kv": 2, "head_dim": 32, "dtype": "float32"}
COLUMNS = {"arrival": "t", "context_tokens": "n_in", "generated_tokens": "n_out", "hash_ids": "h"}


def _jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


_FRESH = iter(range(10**6, 10**9))


def _req(t_ms, n_in, n_out, h=None) -> dict:
    """A request; without `h`, block hashes no other request shares (so it never hits the cache)."""
    if h is None:
        h = [next(_FRESH) for _ in range(-(-n_in // 512))] if isinstance(n_in, int) else []
    return {"t": t_ms, "n_in": n_in, "n_out": n_out, "h": h}


def _cfg(source, **over) -> dict:
    cfg = {
        "source": source,
        "columns": COLUMNS,
        "arrival_format": "milliseconds",
        "round_to": 1,
        "invocations": None,
        "prefix_cache": {"block_tokens": 512, "capacity_blocks": 100},
        "batching": {"max_batch": 4, "decode_step_s": 0.02},
    }
    for key, value in over.items():
        cfg[key] = {**cfg[key], **value} if isinstance(cfg.get(key), dict) else value
    return cfg


def _prefills(df: pd.DataFrame) -> list[tuple]:
    p = df[df["phase"] == "prefill"]
    return list(zip(p["request"], p["q_len"], p["kv_len"], p["cached_tokens"], p["step"], strict=True))


# -- prefix cache ---------------------------------------------------------------------------------


def test_a_request_repeating_a_prefix_prefills_only_its_new_tokens(tmp_path):
    log = _jsonl(
        tmp_path / "log.jsonl",
        [
            _req(0, 1024, 2, [1, 2]),
            _req(1000, 1536, 2, [1, 2, 3]),
            _req(2000, 1024, 2, [1, 2]),
            _req(3000, 600, 2, [9, 8]),
        ],
    )
    df, prov = build(_cfg(log), PART)
    # row 2 repeats row 1's two blocks and adds one; row 3 repeats it whole (one token is always
    # computed); row 4 shares nothing
    assert _prefills(df) == [
        (1, 1024, 1024, 0, "prefill"),
        (2, 512, 1536, 1024, "prefill"),
        (3, 1, 1024, 1023, "prefill"),
        (4, 600, 600, 0, "prefill"),
    ]
    assert set(SERVING_COLUMNS) <= set(df.columns)
    assert (df.loc[df["phase"] == "decode", "cached_tokens"] == 0).all()
    cache = prov["prefix_cache"]
    assert cache["hit_rate"] == pytest.approx((1024 + 1023) / (1024 + 1536 + 1024 + 600))
    assert cache["hit_rate"] == cache["unbounded_hit_rate"]  # nothing was evicted


def test_an_evicted_prefix_is_computed_again_and_the_unbounded_rate_says_what_it_cost(tmp_path):
    rows = [_req(0, 1024, 2, [1, 2]), _req(1000, 1024, 2, [3, 4]), _req(2000, 1024, 2, [1, 2])]
    log = _jsonl(tmp_path / "log.jsonl", rows)
    small = build(
        _cfg(log, prefix_cache={"capacity_blocks": 3}), PART
    )  # row 2 evicts block 1, so nothing hits
    large = build(_cfg(log, prefix_cache={"capacity_blocks": 4}), PART)
    assert [p[1:4] for p in _prefills(small[0])] == [(1024, 1024, 0)] * 3
    assert [p[1:4] for p in _prefills(large[0])][2] == (1, 1024, 1023)
    assert small[1]["prefix_cache"]["hit_rate"] == 0.0
    assert small[1]["prefix_cache"]["unbounded_hit_rate"] == pytest.approx(1023 / 3072)


def test_lru_keeps_what_was_used_last(tmp_path):
    # capacity 4: row 3 touches blocks 1 and 2 again, so row 4's blocks evict 3 and 4, not 1 and 2
    rows = [
        _req(0, 1024, 2, [1, 2]),
        _req(10, 1024, 2, [3, 4]),
        _req(20, 1024, 2, [1, 2]),
        _req(30, 1024, 2, [5, 6]),
    ]
    rows.append(_req(40, 1024, 2, [1, 2]))
    df, _ = build(_cfg(_jsonl(tmp_path / "log.jsonl", rows), prefix_cache={"capacity_blocks": 4}), PART)
    assert [p[3] for p in _prefills(df)] == [0, 0, 1023, 0, 1023]


def test_the_default_capacity_is_the_kv_budget_over_a_blocks_bytes(tmp_path):
    log = _jsonl(tmp_path / "log.jsonl", [_req(0, 1024, 2, [1, 2])])
    llama = {"heads_q": 32, "heads_kv": 8, "head_dim": 128, "dtype": "bfloat16"}
    _, prov = build(
        _cfg(log, prefix_cache={"capacity_blocks": None, "kv_budget_gb": 100, "layers": 32}), llama
    )
    assert prov["prefix_cache"]["capacity_blocks"] == int(100e9 // (2 * 8 * 128 * 2 * 32 * 512)) == 1490
    with pytest.raises(ValueError, match="kv_budget_gb.*holds no block"):
        build(_cfg(log, prefix_cache={"capacity_blocks": None, "kv_budget_gb": 0.001}), llama)


def test_a_log_without_hash_ids_has_no_cache_and_no_serving_columns(tmp_path):
    log = _jsonl(tmp_path / "log.jsonl", [_req(0, 1024, 2), _req(5, 1024, 2)])
    df, prov = build(_cfg(log, columns={**COLUMNS, "hash_ids": None}), PART)
    assert not set(SERVING_COLUMNS) & set(df.columns) and "prefix_cache" not in prov
    assert (df.loc[df["phase"] == "prefill", "q_len"] == 1024).all()


# -- chunked prefill ------------------------------------------------------------------------------


def test_a_prompt_of_two_and_a_half_budgets_is_three_chunks(tmp_path):
    log = _jsonl(tmp_path / "log.jsonl", [_req(0, 2500, 2)])
    df = build_trace(_cfg(log, batching={"max_batched_tokens": 1000}), PART)
    # eligible at step 1 (the first after its arrival at 0), one chunk a step, then two decodes
    assert _prefills(df) == [
        (1, 1000, 1000, 0, "prefill"),
        (1, 1000, 2000, 1000, "prefill"),
        (1, 500, 2500, 2000, "prefill"),
    ]
    assert df["arrival_s"].tolist() == [0.02, 0.04, 0.06, 0.08, 0.10]
    decode = df[df["phase"] == "decode"]
    assert decode["kv_len"].tolist() == [2501, 2502] and (decode["step"] == "decode").all()


def test_a_step_with_decodes_and_a_chunk_is_mixed(tmp_path):
    # row 1 (10 tokens, 3 generated) prefills at step 1 and decodes at steps 2-4; row 2 (2,500
    # tokens) arrives at 50 ms, is admitted at step 3 and shares the budget with row 1's decode
    log = _jsonl(tmp_path / "log.jsonl", [_req(0, 10, 3), _req(50, 2500, 1)])
    df = build_trace(_cfg(log, batching={"max_batched_tokens": 1000}), PART)
    got = list(zip(df["arrival_s"], df["phase"], df["q_len"], df["kv_len"], df["step"], strict=True))
    assert got == [
        (0.02, "prefill", 10, 10, "prefill"),
        (0.04, "decode", 1, 11, "decode"),
        (0.06, "prefill", 999, 999, "mixed-prefill"),
        (0.06, "decode", 1, 12, "mixed-decode"),
        (0.08, "prefill", 999, 1998, "mixed-prefill"),
        (0.08, "decode", 1, 13, "mixed-decode"),
        (0.10, "prefill", 502, 2500, "prefill"),
        (0.12, "decode", 1, 2501, "decode"),
    ]


def test_a_chunk_after_a_cached_prefix_starts_where_the_cache_ends(tmp_path):
    log = _jsonl(tmp_path / "log.jsonl", [_req(0, 1024, 1, [1, 2]), _req(1000, 3072, 1, [1, 2, 3, 4, 5, 6])])
    df = build_trace(_cfg(log, batching={"max_batched_tokens": 1500}), PART)
    assert [p[1:4] for p in _prefills(df) if p[0] == 2] == [(1500, 2524, 1024), (548, 3072, 2524)]


def test_the_budget_must_leave_room_beyond_the_decodes():
    with pytest.raises(
        ValueError, match=r"max_batched_tokens': 4 must be more than trace.batching.max_batch = 4"
    ):
        settings({"batching": {"max_batch": 4, "max_batched_tokens": 4}})


# -- per-sequence decode lengths ------------------------------------------------------------------


def test_per_sequence_decodes_keep_every_kv_len_and_kv_len_is_the_longest(tmp_path):
    log = _jsonl(tmp_path / "log.jsonl", [_req(0, 100, 3), _req(0, 40, 3)])
    df = build_trace(_cfg(log, round_to=16, batching={"kv_summary": "per_sequence"}), PART)
    decode = df[df["phase"] == "decode"]
    assert [list(v) for v in decode["kv_lens"]] == [
        [112, 48],
        [112, 48],
        [112, 48],
    ]  # 101..103, 41..43 rounded
    assert (decode["kv_len"] == decode["kv_lens"].map(max)).all()
    assert decode["shape_key"].iloc[0] == "decode|b2|q1|kvvar112m80|h4/2|d32|float32"
    assert df.loc[df["phase"] == "prefill", "kv_lens"].isna().all()
    path = tmp_path / "trace.parquet"
    artifacts.write(df, path, kind="trace", provenance={})  # the contract admits list<int32>
    assert pa.types.is_list(artifacts.read_table(path).schema.field("kv_lens").type)


# -- determinism and formats ----------------------------------------------------------------------


def test_the_same_log_gives_the_same_trace_as_jsonl_and_as_parquet(tmp_path):
    rng = np.random.default_rng(3)
    rows, t = [], 0
    for _ in range(60):
        t += int(rng.integers(0, 400))
        n = int(rng.integers(1, 3000))
        rows.append(_req(t, n, int(rng.integers(1, 30)), [int(x) for x in rng.integers(0, 6, -(-n // 512))]))
    log = _jsonl(tmp_path / "log.jsonl", rows)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "log.parquet")
    cfg = _cfg(log, batching={"max_batched_tokens": 700, "kv_summary": "per_sequence"})
    first, again = build(cfg, PART), build(cfg, PART)
    pd.testing.assert_frame_equal(first[0], again[0])
    assert first[1]["prefix_cache"] == again[1]["prefix_cache"]
    parquet = build_trace({**cfg, "source": str(tmp_path / "log.parquet")}, PART)
    pd.testing.assert_frame_equal(first[0], parquet)
    assert set(first[0]["step"]) >= {"prefill", "decode", "mixed-prefill", "mixed-decode"}
    text = describe_text(first[0], 0.5, first[1])
    assert "prefix cache: 100 blocks of 512 tokens; hit rate" in text and "decode raggedness" in text


def test_arrival_units(tmp_path):
    rows = [{"t": 0, "n_in": 5, "n_out": 1}, {"t": 1500, "n_in": 5, "n_out": 1}]
    log = _jsonl(tmp_path / "log.jsonl", rows)
    cols = {"arrival": "t", "context_tokens": "n_in", "generated_tokens": "n_out"}
    assert read_request_log(log, cols, "milliseconds").arrival_ns.tolist() == [0, 1_500_000_000]
    assert read_request_log(log, cols, "seconds").arrival_ns.tolist() == [0, 1_500_000_000_000]


# -- bad logs -------------------------------------------------------------------------------------

GOOD = json.dumps(_req(0, 600, 1, [1, 2]))


@pytest.mark.parametrize(
    ("lines", "match"),
    [
        ([GOOD, "{not json"], r"row 2 \(line 2\): not JSON"),
        ([GOOD, "", GOOD], r"row 2 \(line 2\): an empty line"),
        ([GOOD, "[1, 2]"], r"row 2 \(line 2\): a JSON list, not an object"),
        ([GOOD, json.dumps({"t": 1, "n_in": 600, "h": [1, 2]})], r"row 2 \(line 2\): missing key 'n_out'"),
        ([GOOD, json.dumps(_req(1, True, 1, [1, 2]))], r"row 2 \(line 2\), key 'n_in': true is not a number"),
        ([GOOD, json.dumps(_req(1, 2.5, 1, [1]))], r"row 2 \(line 2\), column 'n_in': non-integer token count 2.5"),
        ([GOOD, json.dumps(_req("soon", 600, 1, [1, 2]))], r"row 2 \(line 2\), column 't': unparsable arrival 'soon' \(the column holds milliseconds\)"),
        ([json.dumps(_req(5, 600, 1, [1, 2])), GOOD], r"row 2 \(line 2\), column 't': arrival 0 is earlier than row 1's 5"),
        ([GOOD, json.dumps(_req(1, 600, 1, [1]))], r"row 2 \(line 2\), column 'h': 1 block hashes, but 600 prompt tokens at 512 tokens a block .* make 2"),
        ([GOOD, json.dumps(_req(1, 600, 1, "ab"))], r"row 2 \(line 2\), column 'h': 'ab' is not a list of integer block hashes"),
        ([GOOD, json.dumps(_req(1, 600, 1, [1.5, 2]))], r"row 2 \(line 2\), column 'h': .* is not a list of integer block hashes"),
        (["\xff" + GOOD], r"row 1 \(line 1\)"),
    ],
)  # fmt: skip
def test_bad_jsonl_logs_fail_naming_file_row_and_what(tmp_path, lines, match):
    log = tmp_path / "bad.jsonl"
    log.write_bytes(
        b"\n".join(x.encode("latin-1") if x.startswith("\xff") else x.encode() for x in lines) + b"\n"
    )
    with pytest.raises(ValueError, match=match) as err:
        read_request_log(log, COLUMNS, "milliseconds", block_tokens=512)
    assert str(log) in str(err.value)


def test_a_jsonl_log_without_the_mapped_keys_is_refused_at_plan_time(tmp_path):
    from headroom.trace.requests import check_log

    log = _jsonl(tmp_path / "log.jsonl", [{"timestamp": 0, "input_length": 5, "output_length": 1}])
    with pytest.raises(
        ValueError, match=r"row 1 \(line 1\), the first object, missing column\(s\) arrival -> 't'"
    ):
        check_log(log, COLUMNS)


def test_a_line_longer_than_a_block_fails_at_once(tmp_path, monkeypatch):
    from headroom.trace import requests

    monkeypatch.setattr(requests, "CSV_BLOCK_BYTES", 64)
    log = tmp_path / "long.jsonl"
    log.write_text(GOOD + "\n" + json.dumps(_req(1, 600, 1, [1, 2])) + " " * 100 + "\n")
    with pytest.raises(ValueError, match=r"long\.jsonl: row 2 \(line 2\) is longer than 64 bytes"):
        read_request_log(log, COLUMNS, "milliseconds", block_tokens=512)


def test_hash_ids_need_a_log_that_holds_lists(tmp_path):
    csv = tmp_path / "log.csv"
    csv.write_text("t,n_in,n_out,h\n0,5,1,1\n")
    with pytest.raises(
        ValueError, match=r"log\.csv: trace\.columns\.hash_ids maps 'h', but a CSV cell holds no list"
    ):
        read_request_log(csv, COLUMNS, "milliseconds", block_tokens=512)
    parquet = tmp_path / "log.parquet"
    pq.write_table(pa.table({"t": [0], "n_in": [5], "n_out": [1], "h": ["1"]}), parquet)
    with pytest.raises(
        ValueError, match=r"column 'h' \(hash_ids\) has type string; expected a list of integers"
    ):
        read_request_log(parquet, COLUMNS, "milliseconds", block_tokens=512)


# -- the shipped Mooncake trace and its study -----------------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
MOONCAKE = "data/traces/mooncake-fast25/conversation_trace.jsonl.gz"


def test_the_shipped_mooncake_log_is_the_file_its_notice_names():
    # shipped gzipped (gzip -9 -n): the notice gives the gzip's BLAKE3 and, for what gunzip gives
    # back, the upstream file's SHA-256, BLAKE3 and size
    from tests.trace.notices import assert_shipped_as_its_notice_says

    folder = ROOT / "data/traces/mooncake-fast25"
    assert_shipped_as_its_notice_says(
        ROOT / MOONCAKE, folder / "NOTICE.md", folder / "LICENSE-APACHE-2.0.txt"
    )


@pytest.mark.parametrize("cuda", [False, True])
def test_the_mooncake_study_resolves_and_builds(cuda):
    from headroom.core import config

    base = config.load(ROOT / "config" / "config.yaml")
    overlay = config.load(ROOT / "config" / "studies" / "mooncake-conv.yaml")
    study = config.resolve(config.deep_merge(base, overlay), cuda_available=cuda)
    df, prov = build(study["trace"], study["partition"], base_dir=ROOT)
    assert len(df) == study["trace"]["invocations"] and prov["source_blake3"] == artifacts.hash_file(
        ROOT / MOONCAKE
    )
    assert prov["prefix_cache"]["log_unbounded_hit_rate"] == pytest.approx(0.374, abs=0.001)
    prefill = df[df["phase"] == "prefill"]
    assert (prefill["q_len"] < prefill["kv_len"]).any()  # chunks over a cached prefix
    assert (
        df.loc[df["phase"] == "decode", "kv_len"] == df.loc[df["phase"] == "decode", "kv_lens"].map(max)
    ).all()
    if cuda:
        assert df["arrival_s"].between(600.0, 900.0, inclusive="left").all() and df["kv_len"].max() > 100_000
        assert prov["prefix_cache"]["capacity_blocks"] == 1490
    else:
        assert df["kv_len"].max() <= 64 and {"prefill", "mixed-prefill", "mixed-decode"} <= set(df["step"])


def test_trace_describe_reports_the_serving_facts_of_a_written_trace(tmp_path, capsys):
    from headroom.core import cli

    rows = [_req(0, 1024, 3, [1, 2]), _req(10, 2000, 3, [1, 2, 3, 4]), _req(20, 900, 2)]
    cfg = _cfg(
        _jsonl(tmp_path / "log.jsonl", rows),
        batching={"max_batched_tokens": 800, "kv_summary": "per_sequence"},
    )
    df, prov = build(cfg, PART)
    path = tmp_path / "trace.parquet"
    artifacts.write(df, path, kind="trace", provenance={"extra": prov})
    assert cli.main(["trace", "describe", str(path), "--train-fraction", "0.5"]) == 0
    out = capsys.readouterr().out
    # row 2 hits row 1's two blocks (1,024 of 3,924 prompt tokens); 2,000 - 1,024 = 976 new tokens
    # take two chunks of the 800-token budget; row 1's 1,024 and row 3's 900 take two each
    assert f"hit rate {1024 / 3924:.1%} of the prompt tokens of the window's 3 requests" in out
    assert "window prefill chunks: 6 for 3 requests (3 in more than one chunk, at most 2)" in out
    assert "decode raggedness (max / mean kv_len of a batch)" in out
