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
