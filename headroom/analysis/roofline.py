"""An analytical model of each (candidate, shape): does it explain the measured latencies?

Per shape (trace row) and candidate (tile, RoPE placement, generation):

* FLOPs. ``flops`` = 4 * B * Hq * D * P, the two matmuls (QK^T and PV, a multiply-add = 2 FLOPs) over
  the P (query, key) pairs the causal mask keeps (bottom-right aligned: query i sees keys
  j <= i + Skv - Sq). ``executed_flops`` counts what the tiles compute: every visited
  block_m x block_n block in full (prefill: one program per (batch, query head, block of block_m
  queries) visiting the key blocks up to its last row's diagonal; decode: the Hq/Hkv query heads of a
  KV head packed into M, padded to the kernel's decode block_m = min(block_m, max(16, next power of
  two of Hq/Hkv)), over ceil(Skv/block_n) key blocks). Softmax and RoPE
  arithmetic are not counted (a few % of the matmul FLOPs at head_dim >= 32).
* Bytes. Compulsory traffic: q, k, v and o once, and the cos/sin rows of the Sq new positions.
  K/V blocks re-read by further programs (other query blocks, other query heads of a GQA group) come
  from L2. Unfused RoPE adds a kernel that reads q (and, in prefill, the Sq new keys) and writes the
  rotated copies, which attention then reads instead: ``intermediate_bytes`` written plus read again.
* Residency. The working set that competes for L2 is the one the measurement had: the portfolio's
  ``working_set_bytes`` (its rotating input sets) when timings are given, else the call's own
  (a hot loop on one set). When it fits the measured L2 and timing was not cold (``flush_l2``),
  every byte is charged to L2 bandwidth. Otherwise compulsory bytes and the intermediate's
  write-back go to HBM, and its re-read hits L2 when the intermediate fits in L2, HBM when not.
* Time. predicted_us = max(compute, memory) + launches x launch overhead of the mode, where
  compute = executed_flops / matmul rate, memory = hbm_bytes / HBM bandwidth + l2 traffic / L2
  bandwidth, launches = the candidate's launch sequence from kernels/schedule.py (the rules
  kernels.plan builds its launches by): the standalone RoPE launches of its placement (unfused: q,
  and k in prefill; q_fused: k in prefill), the attention launch, and decode's reduction launch
  when the split-KV plan of kernels/split.py (``decode_splits``, given the SM count) splits the
  keys and the generation's variant does not merge them in the kernel.

Constants come only from ``calibration.parquet`` rows with status 'ok' measured in the matching
regime (HBM bandwidth from a working set larger than L2, L2 bandwidth from one that fits); a
constant with no such row leaves predictions NaN with status 'skipped' and the reason.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
import pandas as pd

from headroom.core import contracts
from headroom.core.contracts import dtype_bytes
from headroom.families.attention.candidates import placement
from kernels import schedule, split

MODES = ("eager", "graph")
CONSTANTS = ("hbm_bytes_per_s", "l2_bytes_per_s", "launch_eager_us", "launch_graph_us", "matmul_flops_per_s")

_RATE_UNITS = {
    "bytes/s": 1.0,
    "b/s": 1.0,
    "byte/s": 1.0,
    "gb/s": 1e9,
    "gib/s": 2.0**30,
    "tb/s": 1e12,
    "flop/s": 1.0,
    "flops/s": 1.0,
    "flops": 1.0,
    "gflop/s": 1e9,
    "tflop/s": 1e12,
    "tflops": 1e12,
}
_TIME_UNITS = {"us": 1.0, "µs": 1.0, "ns": 1e-3, "ms": 1e3, "s": 1e6}


def causal_pairs(q_len: int, kv_len: int) -> int:
    """(query, key) pairs kept by the bottom-right causal mask: sum_i min(Skv, i + Skv - Sq + 1)."""
    if q_len < 1 or kv_len < q_len:
        raise ValueError(f"shape: need 1 <= q_len <= kv_len, got q_len={q_len}, kv_len={kv_len}")
    return q_len * (kv_len - q_len) + q_len * (q_len + 1) // 2


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def decode_splits(programs: int, kv_len: int, sm_count: int | None) -> int:
    """Number of KV splits the decode launch uses (kernels/split.py's plan on a GPU of sm_count
    SMs; 1 when the SM count is unknown)."""
    if not sm_count or sm_count <= 0:
        return 1
    return split.decode_split_plan(programs, kv_len, int(sm_count))[0]


def launches(rope: str, generation: int, *, phase: str, q_len: int, splits: int) -> int:
    """Kernel launches of one run: kernels/schedule.py's launch sequence of the candidate (RoPE
    placement, generation and its default variant) with k rotated in prefill, a rotated cache in
    decode, as the portfolio times them."""
    steps = schedule.launch_sequence(
        rope, generation, rotate_k=phase == "prefill", q_len=q_len, num_splits=splits
    )
    return len(steps)


def _decode_launch_splits(shape: Mapping, block_m: int, sm_count: int | None) -> int:
    """decode_splits of a decode shape's launch (B * Hkv * row-block programs); 1 for prefill."""
    if str(shape["phase"]) != "decode" or int(shape["q_len"]) != 1:
        return 1
    group = int(shape["heads_q"]) // int(shape["heads_kv"])
    programs = (
        int(shape["batch"]) * int(shape["heads_kv"]) * _ceil_div(group, split.decode_block_m(block_m, group))
    )
    return decode_splits(programs, int(shape["kv_len"]), sm_count)


def tile_work(shape: Mapping, block_m: int, block_n: int) -> dict:
    """Executed FLOPs and K/V bytes loaded by the tiles of one candidate on one shape."""
    b, sq, skv = int(shape["batch"]), int(shape["q_len"]), int(shape["kv_len"])
    hq, hkv, d = int(shape["heads_q"]), int(shape["heads_kv"]), int(shape["head_dim"])
    if hq % hkv:
        raise ValueError(f"shape: heads_q={hq} is not a multiple of heads_kv={hkv}")
    e = dtype_bytes(shape["dtype"])
    if str(shape["phase"]) == "decode" and sq == 1:
        group = hq // hkv
        block_m = split.decode_block_m(block_m, group)
        programs = b * hkv * _ceil_div(group, block_m)
        kv_blocks = _ceil_div(skv, block_n)
        executed = programs * block_m * block_n * kv_blocks * 4 * d
        kv_loaded = programs * skv * d * 2 * e
    else:
        executed = 0
        kv_loaded = 0
        for m in range(_ceil_div(sq, block_m)):
            last_row = min((m + 1) * block_m, sq) - 1
            visible = last_row + skv - sq + 1  # keys the block's last row sees
            executed += block_m * block_n * _ceil_div(visible, block_n) * 4 * d
            kv_loaded += visible * d * 2 * e  # masked loads past the diagonal fetch nothing
        executed *= b * hq
        kv_loaded *= b * hq
    return {"executed_flops": executed, "kv_loaded_bytes": kv_loaded}


def work(shape: Mapping) -> dict:
    """The useful work of one call, whatever runs it: FLOPs of the causal mask's (query, key) pairs
    and the compulsory bytes (q in, o out, k and v in, the cos and sin rows of the new positions)."""
    b, sq, skv = int(shape["batch"]), int(shape["q_len"]), int(shape["kv_len"])
    hq, hkv, d = int(shape["heads_q"]), int(shape["heads_kv"]), int(shape["head_dim"])
    e = dtype_bytes(shape["dtype"])
    q_bytes, kv_bytes = b * hq * sq * d * e, 2 * b * hkv * skv * d * e
    return {
        "flops": 4 * b * hq * d * causal_pairs(sq, skv),
        "q_bytes": q_bytes,
        "kv_bytes": kv_bytes,
        "compulsory_bytes": 2 * q_bytes + kv_bytes + 2 * sq * d * e,
    }


def traffic(
    shape: Mapping,
    block_m: int,
    block_n: int,
    fused: bool,
    l2_bytes: float | None,
    *,
    working_set_bytes: float | None = None,
    cold: bool = False,
    sm_count: int | None = None,
    rope: str | None = None,
    generation: int | None = None,
) -> dict:
    """FLOPs, bytes by level and launches of one candidate on one shape (see module docstring).

    working_set_bytes: bytes competing for L2 during the measurement (None: this call's own);
    cold: the timing flushed L2 before each sample, so nothing starts resident;
    sm_count: the GPU's SMs, for decode's split-KV reduction launch (None: no split assumed);
    rope, generation: the candidate's placement and generation, which fix its launches (None, as
    in artifacts recorded before generation 2: generation 1, its placement from fused, the byte
    model's switch).
    """
    b, sq = int(shape["batch"]), int(shape["q_len"])
    hkv, d = int(shape["heads_kv"]), int(shape["head_dim"])
    e = dtype_bytes(shape["dtype"])
    prefill, rope = str(shape["phase"]) == "prefill", rope or ("fused" if fused else "unfused")
    useful = work(shape)
    q_bytes, kv_bytes, compulsory = useful["q_bytes"], useful["kv_bytes"], useful["compulsory_bytes"]
    new_k_bytes = b * hkv * sq * d * e if prefill else 0  # decode: the cache is already rotated
    intermediate = 0 if fused else q_bytes + new_k_bytes
    tiles = tile_work(shape, block_m, block_n)
    splits = _decode_launch_splits(shape, block_m, sm_count)
    kv_reuse = max(0, tiles["kv_loaded_bytes"] - kv_bytes)
    working_set = compulsory + intermediate
    competing = (
        working_set if working_set_bytes is None or pd.isna(working_set_bytes) else float(working_set_bytes)
    )
    if l2_bytes is not None and not cold and competing <= l2_bytes:
        residency, hbm = "l2", 0
        l2 = compulsory + kv_reuse + 2 * intermediate
    else:
        residency = "hbm"
        reread_in_l2 = l2_bytes is not None and intermediate <= l2_bytes
        hbm = compulsory + intermediate + (0 if reread_in_l2 else intermediate)
        l2 = kv_reuse + (intermediate if reread_in_l2 else 0)
    return {
        "flops": useful["flops"],
        "executed_flops": tiles["executed_flops"],
        "compulsory_bytes": compulsory,
        "intermediate_bytes": intermediate,
        "working_set_bytes": working_set,
        "competing_bytes": competing,
        "hbm_bytes": hbm,
        "l2_traffic_bytes": l2,
        "residency": residency,
        "launches": launches(rope, generation or 1, phase=str(shape["phase"]), q_len=sq, splits=splits),
        "decode_splits": splits,
    }


def _regime_kind(regime: object) -> str | None:
    text = str(regime).lower()
    if "l2" in text or "resident" in text:
        return "l2"
    if any(word in text for word in ("hbm", "spill", "dram")):
        return "hbm"
    return None


def calibrated_constants(calibration: pd.DataFrame | None, l2_bytes: float | None) -> tuple[dict, dict]:
    """Constants from calibration rows measured in the matching regime.

    Returns (values, reasons): values maps each name in ``CONSTANTS`` to SI-ish units (bytes/s,
    FLOP/s, µs); reasons maps every constant left out to why. Bandwidths take the largest accepted
    row (the ceiling the machine reached), launch overheads the median of accepted rows.
    A bandwidth row is accepted only when its regime label agrees with its working set vs L2
    (hbm: working_set_bytes > l2_bytes, l2: <=), so a copy that never left L2 cannot set HBM speed.
    """
    values: dict[str, float] = {}
    reasons: dict[str, str] = {}
    if calibration is None or calibration.empty:
        return values, {c: "no calibration rows" for c in CONSTANTS}
    missing = [c for c in ("name", "value") if c not in calibration.columns]
    if missing:
        raise ValueError(f"calibration: missing column(s) {missing}")
    for name in CONSTANTS:
        rows = calibration[calibration["name"].astype(str) == name]
        if rows.empty:
            reasons[name] = "not in calibration.parquet"
            continue
        if "status" in rows.columns:
            bad = rows[rows["status"].astype(str) != "ok"]
            rows = rows[rows["status"].astype(str) == "ok"]
            if rows.empty:
                why = bad["reason"].iloc[0] if "reason" in bad.columns else bad["status"].iloc[0]
                reasons[name] = str(why)
                continue
        accepted = []
        for _, row in rows.iterrows():
            unit = str(row.get("unit", "") or "").strip().lower()
            value = float(row["value"])
            if not math.isfinite(value) or value <= 0:
                continue
            if name.endswith("_us"):
                accepted.append(value * _TIME_UNITS.get(unit or "us", float("nan")))
                continue
            value *= _RATE_UNITS.get(unit, 1.0) if unit else 1.0
            if name in ("hbm_bytes_per_s", "l2_bytes_per_s"):
                want = "hbm" if name.startswith("hbm") else "l2"
                if _regime_kind(row.get("regime")) != want:
                    continue
                ws = row.get("working_set_bytes")
                if l2_bytes is not None and ws is not None and pd.notna(ws):
                    if (want == "hbm") != (float(ws) > l2_bytes):
                        continue
            accepted.append(value)
        accepted = [v for v in accepted if math.isfinite(v)]
        if not accepted:
            reasons[name] = "no ok row measured in the matching regime"
        elif name.endswith("_us"):
            values[name] = float(np.median(accepted))
        else:
            values[name] = float(max(accepted))
    return values, reasons


def l2_bytes_of(environment: pd.DataFrame | None, calibration: pd.DataFrame | None) -> float | None:
    """The measured L2 size: environment.l2_bytes, else calibration's ok `l2_bytes` row, else None."""
    if environment is not None and "l2_bytes" in environment.columns:
        values = pd.to_numeric(environment["l2_bytes"], errors="coerce").dropna()
        if len(values) and float(values.iloc[0]) > 0:
            return float(values.iloc[0])
    if calibration is not None and {"name", "value"} <= set(calibration.columns):
        rows = calibration[calibration["name"].astype(str) == "l2_bytes"]
        if "status" in rows.columns:
            rows = rows[rows["status"].astype(str) == "ok"]
        values = pd.to_numeric(rows["value"], errors="coerce").dropna()
        if len(values) and float(values.iloc[0]) > 0:
            return float(values.iloc[0])
    return None


def sm_count_of(environment: pd.DataFrame | None) -> int | None:
    """environment.sm_count when it is a positive number (the interpreter records none)."""
    if environment is None or "sm_count" not in environment.columns or environment.empty:
        return None
    value = pd.to_numeric(environment["sm_count"], errors="coerce").iloc[0]
    return int(value) if pd.notna(value) and value > 0 else None


def _missing_reason(lacking: list[str], reasons: dict[str, str]) -> str:
    """'a, b not calibrated: why; c not calibrated: other why' (constants grouped by reason)."""
    by_reason: dict[str, list[str]] = {}
    for name in sorted(lacking):
        by_reason.setdefault(reasons.get(name, "unknown"), []).append(name)
    return "; ".join(f"{', '.join(names)} not calibrated: {why}" for why, names in by_reason.items())


def measured_latency(timings: pd.DataFrame | None) -> pd.DataFrame:
    """Median over runs and invocations of median_us per (candidate, shape_key, mode)."""
    if timings is None or timings.empty:
        return pd.DataFrame(columns=["candidate", "shape_key", "mode", "measured_us"])
    t = timings.copy()
    if "mode" not in t.columns:
        t["mode"] = "eager"
    return (
        t.groupby(["candidate", "shape_key", "mode"], as_index=False)["median_us"]
        .median()
        .rename(columns={"median_us": "measured_us"})
    )


def predict(
    trace: pd.DataFrame,
    candidates: pd.DataFrame,
    calibration: pd.DataFrame | None,
    *,
    l2_bytes: float | None,
    timings: pd.DataFrame | None = None,
    cold: bool = False,
    sm_count: int | None = None,
) -> pd.DataFrame:
    """One row per (candidate, shape_key, mode) with the model's terms, prediction and measurement.

    Fused rows also carry the fusion saving against the same tile unfused, split into
    ``traffic_saved_us`` (difference of max(compute, memory)) and ``launches_saved_us``.
    Native candidates (``backend`` other than 'triton') have no tile of ours to model: left out.
    """
    _check_predict_inputs(trace, candidates)
    if "backend" in candidates.columns:
        candidates = candidates[candidates["backend"].fillna("triton") == "triton"]
    l2_bytes = l2_bytes if l2_bytes is not None and float(l2_bytes) > 0 else None
    consts, reasons = calibrated_constants(calibration, l2_bytes)
    # one reason for every row without a prediction: which constants are missing overall, and why
    uncalibrated = _missing_reason([c for c in CONSTANTS if c not in consts], reasons)
    shapes = trace.drop_duplicates("shape_key").sort_values("shape_key")
    competing = _competing_working_sets(timings)
    rows = []
    for _, shape in shapes.iterrows():
        for cand in candidates.itertuples(index=False):
            fused, (rope, generation) = bool(cand.fused), placement(cand)
            for mode in MODES:
                t = traffic(
                    shape,
                    int(cand.block_m),
                    int(cand.block_n),
                    fused,
                    l2_bytes,
                    cold=cold,
                    working_set_bytes=competing.get((str(shape["shape_key"]), mode)),
                    sm_count=sm_count,
                    rope=rope,
                    generation=generation,
                )
                rows.append(
                    {
                        "candidate": str(cand.candidate),
                        "tile": int(cand.tile),
                        "fused": fused,
                        "shape_key": str(shape["shape_key"]),
                        "phase": str(shape["phase"]),
                        "mode": mode,
                        **t,
                        "l2_bytes": float(l2_bytes) if l2_bytes is not None else float("nan"),
                        **_prediction(t, mode, consts, uncalibrated),
                    }
                )
    out = pd.DataFrame(rows)
    out = out.merge(measured_latency(timings), on=["candidate", "shape_key", "mode"], how="left")
    out["measured_over_predicted"] = out["measured_us"] / out["predicted_us"]
    return _fusion_split(out)


def _check_predict_inputs(trace: pd.DataFrame, candidates: pd.DataFrame) -> None:
    for name, df, cols in (
        ("trace", trace, TRACE_SHAPE_COLUMNS),
        ("candidates", candidates, ("candidate", "tile", "block_m", "block_n", "fused")),
    ):
        if not isinstance(df, pd.DataFrame):
            raise ValueError(f"{name} must be a pandas DataFrame")
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ValueError(f"{name}: missing column(s) {missing}")


# The trace contract's shape columns (all but the invocation).
TRACE_SHAPE_COLUMNS = tuple(c for c in contracts.TRACE_COLUMNS if c != "invocation")


def _competing_working_sets(timings: pd.DataFrame | None) -> dict:
    """(shape_key, mode) -> median working set the portfolio timed it with (its L2 competition)."""
    if timings is None or "working_set_bytes" not in timings.columns:
        return {}
    t = timings if "mode" in timings.columns else timings.assign(mode="eager")
    return t.groupby(["shape_key", "mode"])["working_set_bytes"].median().to_dict()


def _prediction(t: dict, mode: str, consts: dict, uncalibrated: str) -> dict:
    """compute, memory and launch terms of one row and their sum; skipped when a constant it needs
    (matmul rate, the mode's launch cost, the bandwidth of where its bytes live) is not calibrated."""
    launch_key = f"launch_{mode}_us"
    need = [
        "matmul_flops_per_s",
        launch_key,
        "l2_bytes_per_s" if t["residency"] == "l2" else "hbm_bytes_per_s",
    ]
    if t["l2_traffic_bytes"] and "l2_bytes_per_s" not in need:
        need.append("l2_bytes_per_s")
    if any(k not in consts for k in need):
        nan = float("nan")
        return {
            "compute_us": nan,
            "memory_us": nan,
            "launch_us": nan,
            "predicted_us": nan,
            "status": "skipped",
            "reason": uncalibrated,
        }
    compute_us = t["executed_flops"] / consts["matmul_flops_per_s"] * 1e6
    memory_us = t["hbm_bytes"] / consts.get("hbm_bytes_per_s", math.inf) * 1e6
    memory_us += t["l2_traffic_bytes"] / consts.get("l2_bytes_per_s", math.inf) * 1e6
    launch_us = t["launches"] * consts[launch_key]
    return {
        "compute_us": compute_us,
        "memory_us": memory_us,
        "launch_us": launch_us,
        "predicted_us": max(compute_us, memory_us) + launch_us,
        "status": "ok",
        "reason": "",
    }


def _fusion_split(df: pd.DataFrame) -> pd.DataFrame:
    keys = ["tile", "shape_key", "mode"]
    body = df["compute_us"].combine(df["memory_us"], max)
    df = df.assign(body_us=body)
    unfused = df[~df["fused"]].set_index(keys)
    joined = df.join(
        unfused[["body_us", "launch_us", "predicted_us", "measured_us"]].add_prefix("unfused_"), on=keys
    )
    fused = joined["fused"]
    df["traffic_saved_us"] = np.where(fused, joined["unfused_body_us"] - joined["body_us"], np.nan)
    df["launches_saved_us"] = np.where(fused, joined["unfused_launch_us"] - joined["launch_us"], np.nan)
    df["fusion_saving_pred_us"] = np.where(
        fused, joined["unfused_predicted_us"] - joined["predicted_us"], np.nan
    )
    df["fusion_saving_measured_us"] = np.where(
        fused, joined["unfused_measured_us"] - joined["measured_us"], np.nan
    )
    df["launch_share_pct"] = 100.0 * df["launches_saved_us"] / df["fusion_saving_pred_us"]
    return df.drop(columns="body_us")
