"""The contract between stages: one schema per artifact kind.

Each kind lists its *required* columns (every artifact of that kind has them, with that type) and
its *known optional* columns (typed; checked when present). A stage may add more columns freely:
they are neither required nor checked. Units are in the names: `_us` microseconds, `_s` seconds,
`_bytes` bytes, `_pct` percent.

`artifacts.write` checks a table against its kind's contract before anything reaches the disk, and
readers import their column lists from here, so a column is named in one place. Types are compared
by family (any integer width is an integer, `string` and `large_string` are strings), and a column
whose values are all missing (Arrow type `null`) satisfies any type: there is nothing to contradict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

STR, INT, FLOAT, BOOL = pa.string(), pa.int64(), pa.float64(), pa.bool_()
INTS = pa.list_(pa.int32())  # a list of integers per row (any integer width, list or large_list)
INT_LISTS = pa.list_(INTS)  # a list of integer lists per row (a step's prefill chunks)


@dataclass(frozen=True)
class Contract:
    """An artifact kind's known columns (in the order its stage writes them) and which are required."""

    kind: str
    columns: tuple[tuple[str, pa.DataType], ...]
    required: frozenset[str]
    #: Columns typed when present that are not among `names` (the columns its stage writes, in order):
    #: added by the stage script after the library built the table (the family column of attention's).
    tagged: tuple[tuple[str, pa.DataType], ...] = ()

    @property
    def required_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.columns if name in self.required)

    @property
    def names(self) -> tuple[str, ...]:
        """Every known column, in the order the producing stage writes them."""
        return tuple(name for name, _ in self.columns)

    def schema(self) -> pa.Schema:
        return pa.schema(list(self.columns))

    def check(self, data: pa.Table | pa.Schema) -> None:
        """ValueError naming the kind, the column and the expected/actual type on the first breach.

        Given a table (not only its schema), a column whose values are all missing (null or NaN,
        e.g. a `reason` column of skipped rows that pandas typed float) satisfies any type."""
        schema = data if isinstance(data, pa.Schema) else data.schema
        present = {f.name: f.type for f in schema}
        missing = [name for name in self.required_names if name not in present]
        if missing:
            raise ValueError(
                f"artifact kind {self.kind!r}: missing required column(s) {missing} "
                f"(contract in headroom/core/contracts.py)"
            )
        for name, expected in self.columns + self.tagged:
            actual = present.get(name)
            if actual is None or same_family(expected, actual):
                continue
            if isinstance(data, pa.Table) and _all_missing(data.column(name)):
                continue
            raise ValueError(
                f"artifact kind {self.kind!r}: column {name!r} has type {actual}, "
                f"expected {_family_name(expected)} (contract in headroom/core/contracts.py)"
            )


def _all_missing(column: pa.ChunkedArray) -> bool:
    return pc.all(pc.is_null(column, nan_is_null=True)).as_py() is not False


def _contract(
    kind: str, columns: str, *, required: str, types: dict[str, pa.DataType] | None = None, tagged: str = ""
) -> Contract:
    """Columns as 'a b c' (types from _T, or `types` where a kind's column means something else under
    the same name); `required` names the subset every artifact has; `tagged` the typed columns outside
    `columns` (Contract.tagged)."""
    names, must = columns.split(), required.split()
    unknown = [name for name in must if name not in names]
    if unknown:
        raise AssertionError(f"contract {kind}: required {unknown} not among its columns")
    types = {**_T, **(types or {})}
    return Contract(
        kind,
        tuple((name, types[name]) for name in names),
        frozenset(must),
        tuple((name, types[name]) for name in tagged.split()),
    )


_FAMILIES = (
    ("string", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
    ("integer", pa.types.is_integer),
    ("floating point", pa.types.is_floating),
    ("boolean", pa.types.is_boolean),
    (
        "list of integers",
        lambda t: (pa.types.is_list(t) or pa.types.is_large_list(t)) and pa.types.is_integer(t.value_type),
    ),
    (
        "list of integer lists",
        lambda t: (
            (pa.types.is_list(t) or pa.types.is_large_list(t))
            and (pa.types.is_list(t.value_type) or pa.types.is_large_list(t.value_type))
            and pa.types.is_integer(t.value_type.value_type)
        ),
    ),
)


def _family_name(t: pa.DataType) -> str:
    return next((name for name, test in _FAMILIES if test(t)), str(t))


def same_family(expected: pa.DataType, actual: pa.DataType) -> bool:
    if pa.types.is_null(actual):
        return True
    if pa.types.is_dictionary(actual):
        actual = actual.value_type
    return _family_name(expected) == _family_name(actual)


# A table: one line per group of related columns reads better than the formatter's one per column.
_T = {
    # shapes
    "invocation": INT, "phase": STR, "batch": INT, "q_len": INT, "kv_len": INT, "heads_q": INT,
    "heads_kv": INT, "head_dim": INT, "dtype": STR, "shape_key": STR, "arrival_s": FLOAT,
    "kv_summary": STR, "kv_len_raw": FLOAT, "request": INT, "source_invocation": INT, "step": STR,
    "cached_tokens": INT, "kv_lens": INTS, "weight": FLOAT,
    # kernel families' traces and the engine's steps (`step` there is the step's index: INT)
    "step_kind": STR, "time_s": FLOAT, "shape": STR, "params": STR, "tokens": INT, "decode_kv_lens": INTS,
    "prefill_chunks": INT_LISTS,
    # candidates
    "candidate": STR, "tile": INT, "block_m": INT, "block_n": INT, "num_warps": INT, "num_stages": INT,
    "fused": BOOL, "backend": STR, "rope": STR, "generation": INT,
    # correctness
    "rel_err": FLOAT, "max_abs_err": FLOAT, "tolerance": FLOAT, "abs_tolerance": FLOAT, "nan_count": INT,
    "unwritten_count": INT, "passed": BOOL, "status": STR, "reason": STR, "rotate_k": BOOL,
    "input_seed": INT,
    # timing
    "run": INT, "pid": INT, "mode": STR, "median_us": FLOAT, "mean_us": FLOAT, "p10_us": FLOAT,
    "p90_us": FLOAT, "std_us": FLOAT, "rel_std_pct": FLOAT, "reps": INT, "rep": INT, "position": INT,
    "latency_us": FLOAT, "calls": INT, "timed_calls": INT, "calls_per_sample": INT, "device": STR,
    "working_set_bytes": INT, "timing_method": STR, "host_us": FLOAT, "l2_bytes": INT, "regime": STR, "regime_multiple": FLOAT,
    "residency": STR, "target_bytes": INT, "buffer_sets": INT, "calls_per_graph": INT,
    "fusion_speedup": FLOAT, "rse_pct": FLOAT, "stop_reason": STR, "cell_wall_s": FLOAT,
    # lifecycle
    "kind": STR, "candidate_b": STR, "policy": STR, "value": FLOAT, "unit": STR, "compile_s": FLOAT,
    "cache_bytes": FLOAT, "n": INT, "specializations": INT, "specialization_s": STR, "toolchain_s": FLOAT,
    "first_call_s": FLOAT, "alternating_us": FLOAT, "same_us": FLOAT, "penalty_pct": FLOAT, "work_bytes": FLOAT, "raw_ns": FLOAT,
    "baseline_ns": FLOAT, "compile_workers": INT,
    # calibration
    "name": STR, "method": STR, "device_name": STR, "sm_clock_mhz": FLOAT,
    # environment
    "environment_id": STR, "gpu_name": STR, "sm_count": INT, "memory_bytes": INT,
    # analysis
    "fusion": STR, "test_us": FLOAT, "gain_vs_global_pct": FLOAT, "gap_to_oracle_pct": FLOAT,
    "net_gain_pct": FLOAT, "ci_low": FLOAT, "ci_high": FLOAT, "predicted_us": FLOAT, "measured_us": FLOAT,
    "verdict": STR,
    # recommendation (what to ship; headroom/analysis/recommendation.py)
    "schema_version": INT, "study": STR, "scope": STR, "family": STR, "headline_verdict": STR, "ship": STR,
    "kernel": STR, "our_kernel": STR, "natives_shipped": STR, "runs_agree": INT, "runs": INT,
    "alternative": STR, "speedup": FLOAT,
    "speedup_ci_low": FLOAT, "speedup_ci_high": FLOAT, "expected_gain_pct": FLOAT,
    "expected_gain_ci_low": FLOAT, "expected_gain_ci_high": FLOAT, "gap_pct": FLOAT, "gap_ci_low": FLOAT,
    "gap_ci_high": FLOAT, "attention_layer_pct": FLOAT, "attention_layer_prefill_pct": FLOAT,
    "attention_layer_decode_pct": FLOAT, "speedup_layer_pct": FLOAT, "speedup_layer_ci_low": FLOAT,
    "speedup_layer_ci_high": FLOAT, "expected_gain_layer_pct": FLOAT, "gap_layer_pct": FLOAT,
    "faster_native": STR, "faster_native_speedup": FLOAT, "decision_blake3": STR, "dispatch_blake3": STR, "kernel_source_blake3": STR, "driver": STR,
    "torch": STR, "triton": STR, "flashinfer": STR, "kernel_family": STR, "family_version": STR, "family_source_blake3": STR,
}  # fmt: skip

_TRACE = "invocation phase batch q_len kv_len heads_q heads_kv head_dim dtype shape_key"
_CANDIDATE = "candidate tile block_m block_n num_warps num_stages fused"
_STATS = "median_us mean_us p10_us p90_us std_us rel_std_pct"

# step, cached_tokens and kv_lens came with serving traces (issue 22; headroom/trace/invocations.py
# SERVING_COLUMNS): absent in traces without a prefix cache, chunked prefill or per-sequence decodes.
# weight came with the stratified sampler (decision v4): absent where every invocation stands for one.
# family ('attention') came with kernel families (issue 32), added by the stage after the library built
# the table: absent in older studies, whose traces and candidates are attention's (`family_of`).
TRACE = _contract(
    "trace",
    f"{_TRACE} arrival_s kv_summary kv_len_raw request source_invocation step cached_tokens kv_lens weight",
    required=_TRACE,
    tagged="family",
)
# rope and generation came with generation-2 kernels: absent in older studies (generation 1).
CANDIDATES = _contract(
    "candidates", f"{_CANDIDATE} backend rope generation", required=_CANDIDATE, tagged="family"
)

#: The built-in family (the attention kernels above), and what an artifact without a `family` column is.
ATTENTION = "attention"
#: How a study names another kernel family (its `family:` key, headroom/core/config.py checks the form;
#: headroom.families.load imports it, in the trace stage): `package.module:ATTRIBUTE`.
FAMILY_SPEC = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*")
# A kernel family's trace and candidates (headroom.families, docs/families.md): the framework's columns;
# a trace adds one column per feature of the family, untyped here (the family declares their kinds).
# Its `step` is the engine step's index (headroom/trace/step_table.py), not attention's serving step.
_FAMILY_TRACE = "invocation family step step_kind time_s shape_key shape weight"
FAMILY_TRACE = _contract("trace", _FAMILY_TRACE, required=_FAMILY_TRACE, types={"step": INT})
FAMILY_CANDIDATES = _contract("candidates", "candidate family params", required="candidate family params")
#: Kinds whose artifacts a kernel family makes in its own columns: the family's contract applies to a
#: table whose `family` column names another family than attention.
FAMILY_CONTRACTS = {c.kind: c for c in (FAMILY_TRACE, FAMILY_CANDIDATES)}
# The serving engine's steps a family's trace is expanded from (headroom/trace/step_table.py COLUMNS).
_STEPS = "step time_s kind tokens decode_kv_lens prefill_chunks"
STEPS = _contract("steps", _STEPS, required=_STEPS, types={"step": INT})
CORRECTNESS = _contract(
    "correctness",
    "candidate shape_key rel_err max_abs_err tolerance abs_tolerance nan_count unwritten_count passed status "
    "reason tile fused phase batch q_len kv_len heads_q heads_kv head_dim dtype rotate_k input_seed",
    required="candidate shape_key rel_err max_abs_err tolerance nan_count unwritten_count passed",
)
# rse_pct, stop_reason and cell_wall_s came with the adaptive sampler (issue 19): absent in older studies.
#: The values of portfolio's ``stop_reason``: ``fixed`` (the fixed sampler's count), ``target`` (the
#: stop rule's noise target met), ``count_cap`` (``max_samples`` reached first), ``time_cap``
#: (``max_time_s``). The timing harness writes them, the noise report counts them.
STOP_REASONS = ("fixed", "target", "count_cap", "time_cap")
PORTFOLIO = _contract(
    "portfolio",
    "run pid device mode invocation shape_key phase candidate tile fused backend position "
    f"{_STATS} reps rse_pct stop_reason cell_wall_s timed_calls calls_per_sample working_set_bytes "
    "timing_method host_us",
    required="run pid mode invocation shape_key candidate tile fused median_us mean_us p10_us p90_us std_us reps",
)
PORTFOLIO_SAMPLES = _contract(
    "portfolio_samples",
    "run mode invocation candidate rep position latency_us calls",
    required="run mode invocation candidate rep position latency_us",
)
LIFECYCLE = _contract(
    "lifecycle",
    "kind candidate candidate_b policy mode invocation shape_key value unit compile_s cache_bytes "
    "specializations specialization_s toolchain_s first_call_s alternating_us same_us penalty_pct work_bytes raw_ns "
    "baseline_ns n compile_workers status reason device",
    required="candidate compile_s cache_bytes",
)
GRAPH_SWEEP = _contract(
    "graph_sweep",
    "regime regime_multiple residency working_set_bytes target_bytes l2_bytes mode fused tile candidate "
    f"shape_key phase buffer_sets calls_per_graph {_STATS} reps fusion_speedup status reason device",
    required="regime working_set_bytes l2_bytes mode fused tile shape_key median_us status",
)
CALIBRATION = _contract(
    "calibration",
    "name value unit working_set_bytes regime method reps status reason device device_name sm_clock_mhz",
    required="name value unit",
)
ENVIRONMENT = _contract(
    "environment", "device gpu_name sm_count l2_bytes memory_bytes environment_id", required="device"
)
# The analysis artifacts: the stage contract's required columns; the analysis stages add more.
_POLICY_EVAL = (
    "run mode policy fusion test_us gain_vs_global_pct gap_to_oracle_pct net_gain_pct ci_low ci_high"
)
POLICY_EVAL = _contract("policy_eval", _POLICY_EVAL, required=_POLICY_EVAL)
FACTORIAL = _contract("factorial", "run mode policy", required="run mode policy")
ROOFLINE = _contract(
    "roofline",
    "candidate shape_key mode predicted_us measured_us",
    required="candidate shape_key mode predicted_us",
)
DECISION = _contract("decision", "verdict reason", required="verdict reason")
#: One row per (scope, alternative): the kernel or policy to ship per mode and deployment-profile part,
#: its speedups over each alternative, what they are worth per decoder layer, and what it is valid for.
#: kernel_family, family_version, family_source_blake3 and params came with kernel families (issue 32):
#: a family's rows only (its attention columns null); `family` is the decision's figure family.
#: flashinfer (the version dispatch.json's identity.soft records) came with FlashInfer (issue 33):
#: absent where the study's environment recorded none.
_RECOMMENDATION_KEY = "schema_version study scope verdict ship policy kernel decision_blake3 dispatch_blake3"
RECOMMENDATION = _contract(
    "recommendation",
    "schema_version study scope family verdict headline_verdict ship policy kernel our_kernel natives_shipped "
    "tile block_m block_n "
    "num_warps num_stages rope generation backend fused runs_agree runs latency_us alternative speedup "
    "speedup_ci_low speedup_ci_high expected_gain_pct expected_gain_ci_low expected_gain_ci_high gap_pct "
    "gap_ci_low gap_ci_high attention_layer_pct attention_layer_prefill_pct attention_layer_decode_pct "
    "speedup_layer_pct speedup_layer_ci_low speedup_layer_ci_high expected_gain_layer_pct gap_layer_pct "
    "faster_native faster_native_speedup decision_blake3 dispatch_blake3 gpu_name sm_count heads_q heads_kv head_dim dtype kernel_source_blake3 "
    "driver torch triton flashinfer kernel_family family_version family_source_blake3 params",
    required=_RECOMMENDATION_KEY,
)

#: What a reader of a trace or a candidates table may rely on; the timing statistics of a row.
TRACE_COLUMNS = TRACE.required_names
CANDIDATE_COLUMNS = CANDIDATES.required_names
STAT_COLUMNS = ("median_us", "mean_us", "p10_us", "p90_us", "std_us", "rel_std_pct")

CONTRACTS: dict[str, Contract] = {
    c.kind: c
    for c in (
        TRACE, CANDIDATES, STEPS, CORRECTNESS, PORTFOLIO, PORTFOLIO_SAMPLES, LIFECYCLE, GRAPH_SWEEP,
        CALIBRATION, ENVIRONMENT, POLICY_EVAL, FACTORIAL, ROOFLINE, DECISION, RECOMMENDATION,
    )
}  # fmt: skip


def contract(kind: str) -> Contract:
    try:
        return CONTRACTS[kind]
    except KeyError:
        raise ValueError(
            f"artifact kind {kind!r} has no contract; add one to headroom/core/contracts.py "
            f"(known kinds: {sorted(CONTRACTS)})"
        ) from None


def family_of(data: pa.Table | pa.Schema | Any) -> str | None:
    """The kernel family an artifact's rows belong to: its `family` column's one value; ATTENTION
    for a table without the column (artifacts recorded before families) or whose values are all
    missing; None for a schema with the column (its values are not there to read). ValueError for a
    table that mixes families: one artifact holds one family's rows. `data`: an Arrow table or schema,
    or a pandas DataFrame."""
    if isinstance(data, pa.Schema):
        return ATTENTION if "family" not in data.names else None
    names = data.column_names if isinstance(data, pa.Table) else list(data.columns)
    if "family" not in names:
        return ATTENTION
    values = data.column("family").to_pylist() if isinstance(data, pa.Table) else data["family"].tolist()
    found = sorted({v for v in values if v is not None and v == v}, key=repr)  # (v == v: not NaN)
    if len(found) > 1:
        raise ValueError(
            f"a table mixes the rows of families {', '.join(map(repr, found))}; one artifact holds one"
        )
    return found[0] if found else ATTENTION


def contract_for(kind: str, data: pa.Table | pa.Schema) -> Contract:
    """The contract `data` of `kind` is held to: a kernel family's (FAMILY_CONTRACTS) when its
    `family` column names a family other than attention, else the kind's own."""
    base = contract(kind)
    family = FAMILY_CONTRACTS.get(kind)
    if family is None:
        return base
    try:
        name = family_of(data)
    except ValueError as exc:
        raise ValueError(f"artifact kind {kind!r}: {exc}") from None
    if name is None:  # a schema with a family column: the one whose required columns it has
        present = set(data.names)
        return base if set(base.required_names) <= present else family
    # a family column that names no family (not a string) is held to the kind's own contract, which types it
    return family if isinstance(name, str) and name != ATTENTION else base


def check(kind: str, data: pa.Table | pa.Schema) -> None:
    """Check a table (or a schema) against the contract of `kind` (ValueError naming what is wrong):
    for a trace or candidates table of a kernel family, the family's contract (`contract_for`)."""
    contract_for(kind, data).check(data)


# Bytes per element of the dtypes a partition may name (the trace's `dtype` column).
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "fp16": 2, "bf16": 2, "fp32": 4}


def dtype_bytes(dtype: str) -> int:
    key = str(dtype).removeprefix("torch.")
    if key not in DTYPE_BYTES:
        raise ValueError(f"dtype {dtype!r} not understood; expected one of {sorted(DTYPE_BYTES)}")
    return DTYPE_BYTES[key]
