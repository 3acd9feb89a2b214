"""One contract per artifact kind: a write that breaks it fails before anything reaches the disk."""

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headroom.core import artifacts, contracts

ROOT = Path(__file__).resolve().parents[2]
PROV = {"rule": "test"}


def _trace(**overrides) -> pd.DataFrame:
    row = {
        "invocation": 0,
        "phase": "decode",
        "batch": 2,
        "q_len": 1,
        "kv_len": 64,
        "heads_q": 4,
        "heads_kv": 2,
        "head_dim": 32,
        "dtype": "float32",
        "shape_key": "decode-b2-q1-kv64",
    }
    row.update(overrides)
    return pd.DataFrame([row])


def test_missing_required_column_is_refused_naming_kind_and_column(tmp_path):
    path = tmp_path / "trace.parquet"
    with pytest.raises(ValueError, match=r"artifact kind 'trace': missing required column\(s\) \['kv_len'\]"):
        artifacts.write(_trace().drop(columns="kv_len"), path, kind="trace", provenance=PROV)
    assert not path.exists() and not artifacts.sidecar(path).exists()


def test_wrong_type_is_refused_naming_column_expected_and_actual(tmp_path):
    with pytest.raises(
        ValueError, match=r"'trace': column 'batch' has type (large_)?string, expected integer"
    ):
        artifacts.write(_trace(batch="2"), tmp_path / "t.parquet", kind="trace", provenance=PROV)
    # A known optional column is typed too.
    with pytest.raises(ValueError, match=r"column 'arrival_s' has type bool, expected floating point"):
        artifacts.write(_trace(arrival_s=True), tmp_path / "t.parquet", kind="trace", provenance=PROV)


def test_extra_columns_integer_widths_and_all_missing_columns_are_accepted(tmp_path):
    df = _trace(my_new_column="x", arrival_s=None, kv_summary=float("nan"))
    df["batch"] = df["batch"].astype("int32")
    artifacts.write(df, tmp_path / "t.parquet", kind="trace", provenance=PROV)
    assert pq.read_schema(tmp_path / "t.parquet").field("my_new_column").type in (
        pa.string(),
        pa.large_string(),
    )


def test_unknown_kind_has_no_contract_and_says_where_to_add_one():
    with pytest.raises(ValueError, match="'tracee' has no contract; add one to headroom/core/contracts.py"):
        contracts.contract("tracee")


def test_recorded_reference_artifacts_meet_their_contracts():
    paths = sorted((ROOT / "data" / "reference").rglob("*.parquet"))
    assert paths, "no recorded reference artifacts found"
    kinds = set()
    for path in paths:
        kind = artifacts.read_kind(path)
        contracts.check(kind, pq.read_schema(path))
        kinds.add(kind)
    assert {"trace", "candidates", "correctness", "portfolio", "portfolio_samples", "lifecycle"} <= kinds


def test_required_columns_are_the_stage_contract():
    # DESIGN's table of required columns; a change here is a change of the contract between stages.
    assert contracts.TRACE_COLUMNS == (
        "invocation",
        "phase",
        "batch",
        "q_len",
        "kv_len",
        "heads_q",
        "heads_kv",
        "head_dim",
        "dtype",
        "shape_key",
    )
    assert set(contracts.PORTFOLIO.required_names) >= {"run", "mode", "invocation", "candidate", "median_us"}
    assert contracts.DECISION.required_names == ("verdict", "reason")


def _family_trace(**overrides) -> pd.DataFrame:
    row = {
        "invocation": 0, "family": "rmsnorm", "step": 3, "step_kind": "decode-only", "time_s": 0.06,
        "shape_key": "tokens=3|hidden=512|dtype=float16", "shape": '{"dtype": "float16", "hidden": 512, "tokens": 3}',
        "weight": 2.0, "tokens": 3, "hidden": 512, "dtype": "float16",
    }  # fmt: skip
    row.update(overrides)
    return pd.DataFrame([row])


def test_a_kernel_familys_trace_and_candidates_meet_the_familys_contract(tmp_path):
    # its `step` is the engine step's index (an integer), not attention's serving step (a string)
    artifacts.write(_family_trace(), tmp_path / "t.parquet", kind="trace", provenance=PROV)
    contracts.check("trace", pq.read_schema(tmp_path / "t.parquet"))  # a schema alone: by its columns
    with pytest.raises(ValueError, match=r"'trace': missing required column\(s\) \['shape'\]"):
        artifacts.write(
            _family_trace().drop(columns="shape"), tmp_path / "t.parquet", kind="trace", provenance=PROV
        )
    with pytest.raises(
        ValueError, match=r"'trace': column 'step' has type (large_)?string, expected integer"
    ):
        contracts.check("trace", artifacts.to_table(_family_trace(step="decode")))
    cands = pd.DataFrame(
        {"candidate": ["BLOCK128-w1-s3"], "family": ["rmsnorm"], "params": ['{"BLOCK": 128}']}
    )
    artifacts.write(cands, tmp_path / "c.parquet", kind="candidates", provenance=PROV)
    with pytest.raises(ValueError, match=r"'candidates': missing required column\(s\) \['params'\]"):
        contracts.check("candidates", artifacts.to_table(cands.drop(columns="params")))


def test_attentions_family_column_is_typed_and_keeps_attentions_contract(tmp_path):
    artifacts.write(_trace(family="attention"), tmp_path / "t.parquet", kind="trace", provenance=PROV)
    with pytest.raises(ValueError, match=r"'trace': missing required column\(s\) \['kv_len'\]"):
        contracts.check("trace", artifacts.to_table(_trace(family="attention").drop(columns="kv_len")))
    with pytest.raises(ValueError, match=r"'trace': column 'family' has type bool, expected string"):
        contracts.check("trace", artifacts.to_table(_trace(family=True)))
    assert contracts.family_of(artifacts.to_table(_trace())) == contracts.ATTENTION  # no column: attention
    # not among the columns the library's builders write (headroom.families.study.tagged adds it)
    assert "family" not in contracts.TRACE.names and "family" not in contracts.CANDIDATES.names


def test_the_steps_contract():
    from headroom.trace import step_table

    assert contracts.STEPS.required_names == step_table.COLUMNS
    assert contracts.contract("steps").schema().field("prefill_chunks").type == contracts.INT_LISTS
