"""graph_sweep: does RoPE fusion still pay once CUDA Graph replay amortizes the launches?

For one tile, fused vs unfused, eager vs CUDA Graph replay, at working sets given as multiples of
the L2 size read from the device. A regime's working set is built from N distinct input sets,
N = max(1, round(multiple * L2 / set_bytes)): eager calls rotate among them, and the captured
graph holds N * ceil(graph_calls / N) calls that visit every set equally often. The actual
``working_set_bytes`` (N * set_bytes of q, k, v) is recorded beside the target, and
``residency`` says whether it fits the L2 ('l2-resident') or not ('spilled').

Rows, one per (shape, regime, mode, fused):
    regime ('<multiple>xL2'), regime_multiple, residency, working_set_bytes, target_bytes,
    l2_bytes, mode, fused, tile, candidate, shape_key, phase, buffer_sets, calls_per_graph,
    median_us, mean_us, p10_us, p90_us, std_us, rel_std_pct, reps, fusion_speedup (unfused median
    / fused median of the same shape, regime and mode, on both rows), status ('ok' | 'skipped'),
    reason, device.
Without CUDA every row is 'skipped' with the reason and no numbers.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import pandas as pd

from headroom.core import contracts, defaults
from headroom.core import settings as stage_settings
from headroom.families.attention import inputs, portfolio, runner
from headroom.measure import timing

STAT_COLUMNS = list(contracts.STAT_COLUMNS)
COLUMNS = list(contracts.GRAPH_SWEEP.names)


def settings(section: dict[str, Any] | None) -> dict[str, Any]:
    cfg = stage_settings.merge("graph_sweep", defaults.section("graph_sweep"), section)
    if not cfg["regimes_l2"] or not all(isinstance(m, int | float) and m > 0 for m in cfg["regimes_l2"]):
        raise ValueError(f"graph_sweep.regimes_l2 must be positive numbers, got {cfg['regimes_l2']!r}")
    stage_settings.require_ints(
        "graph_sweep", cfg, (("tile", 0), ("reps", 1), ("warmup_reps", 0), ("graph_calls", 1))
    )
    if not cfg["shapes"]:
        raise ValueError("graph_sweep.shapes must list at least one shape")
    for i, s in enumerate(cfg["shapes"]):
        missing = [k for k in ("phase", "batch", "q_len", "kv_len") if k not in s]
        if missing:
            raise ValueError(f"graph_sweep.shapes[{i}] lacks {missing}")
    return cfg


def sweep_shapes(cfg: dict[str, Any], partition: dict[str, Any]) -> pd.DataFrame:
    """The config shapes as trace-like rows (heads, head_dim, dtype from the partition)."""
    from headroom.trace.invocations import shape_key

    rows = []
    for i, s in enumerate(cfg["shapes"]):
        row = {
            "invocation": i,
            "phase": s["phase"],
            "batch": int(s["batch"]),
            "q_len": int(s["q_len"]),
            "kv_len": int(s["kv_len"]),
        }
        row.update({k: partition[k] for k in ("heads_q", "heads_kv", "head_dim", "dtype")})
        row["shape_key"] = shape_key(
            row["phase"],
            row["batch"],
            row["q_len"],
            row["kv_len"],
            row["heads_q"],
            row["heads_kv"],
            row["head_dim"],
            row["dtype"],
        )
        rows.append(row)
    df = pd.DataFrame(rows)
    try:
        inputs.check_trace(df)
    except ValueError as exc:
        raise ValueError(f"graph_sweep.shapes: {exc}".replace("trace invocation", "shape")) from None
    return df


def regime_label(multiple: float) -> str:
    return f"{multiple:g}xL2"


def fusion_speedups(df: pd.DataFrame) -> pd.DataFrame:
    """Per (shape_key, regime, mode) of the ok rows: unfused_us, fused_us, speedup = unfused / fused."""
    ok = df[df["status"] == "ok"]
    piv = ok.pivot_table(
        index=["shape_key", "regime", "regime_multiple", "mode"],
        columns="fused",
        values="median_us",
        aggfunc="first",
    )
    if piv.empty or False not in piv.columns or True not in piv.columns:
        return pd.DataFrame(
            columns=["shape_key", "regime", "regime_multiple", "mode", "unfused_us", "fused_us", "speedup"]
        )
    out = piv.rename(columns={False: "unfused_us", True: "fused_us"}).reset_index()
    out.columns.name = None
    out["speedup"] = out["unfused_us"] / out["fused_us"]
    return out.sort_values(["shape_key", "regime_multiple", "mode"]).reset_index(drop=True)


def run(
    candidates: pd.DataFrame,
    section: dict[str, Any],
    partition: dict[str, Any],
    *,
    device: str,
    log: logging.Logger | None = None,
) -> pd.DataFrame:
    """Sweep rows (module docstring). ``candidates`` are the admitted ones."""
    log = log or logging.getLogger("headroom.families.attention.graph_sweep")
    cfg = settings(section)
    shapes = sweep_shapes(cfg, partition)
    pair = candidates[candidates["tile"] == cfg["tile"]]
    pair = pair[[not runner.is_varlen(c) for c in pair.itertuples(index=False)]]  # no kv_lens here
    by_fused = {bool(c.fused): c for c in pair.itertuples(index=False)}
    skip_reason = _skip_reason(device, by_fused, cfg["tile"])
    if skip_reason:
        log.warning("graph_sweep skipped: %s", skip_reason)
        return _frame(_skipped_rows(shapes, cfg, by_fused, skip_reason, device))
    rope_base = float(partition.get("rope_base", defaults.value("partition", "rope_base")))
    rows = [
        row
        for shape in shapes.itertuples(index=False)
        for row in _sweep_shape(shape, cfg, by_fused, rope_base)
    ]
    out = _frame(rows)
    sp = fusion_speedups(out)
    key = ["shape_key", "regime", "mode"]
    out = out.drop(columns="fusion_speedup").merge(sp[key + ["speedup"]], on=key, how="left")
    out = out.rename(columns={"speedup": "fusion_speedup"})[COLUMNS]
    log.info("graph_sweep fusion speedup (unfused / fused):\n%s", speedup_table(out).to_string(index=False))
    return out


def _skip_reason(device: str, by_fused: dict[bool, Any], tile: int) -> str:
    if device != "cuda":
        return "no CUDA device: graph replay and L2 working-set regimes need a GPU"
    if set(by_fused) != {False, True}:
        lacking = "fused" if True not in by_fused else "unfused"
        return (
            f"tile {tile} lacks an admitted {lacking} candidate (correctness), "
            "so fused vs unfused cannot be compared"
        )
    return ""


def _skipped_rows(
    shapes: pd.DataFrame, cfg: dict[str, Any], by_fused, reason: str, device: str
) -> list[dict]:
    rows = []
    for shape in shapes.itertuples(index=False):
        for multiple in cfg["regimes_l2"]:
            for mode in timing.MODES:
                for fused in (False, True):
                    c = by_fused.get(fused)
                    rows.append(
                        {
                            "regime": regime_label(multiple),
                            "regime_multiple": float(multiple),
                            "mode": mode,
                            "fused": fused,
                            "tile": cfg["tile"],
                            "candidate": c.candidate if c else "",
                            "shape_key": shape.shape_key,
                            "phase": shape.phase,
                            "status": "skipped",
                            "reason": reason,
                            "device": device,
                        }
                    )
    return rows


def _sweep_shape(shape: Any, cfg: dict[str, Any], by_fused: dict[bool, Any], rope_base: float) -> list[dict]:
    """Every regime x mode x fused for one shape, on CUDA."""
    import torch

    from headroom.families.attention.runner import tables as candidate_tables

    l2 = timing.l2_bytes()
    cos, sin = candidate_tables(int(shape.kv_len), int(shape.head_dim), str(shape.dtype), rope_base, "cuda")
    nbytes = inputs.set_bytes(shape)
    rows = []
    for multiple in cfg["regimes_l2"]:
        target = multiple * l2
        n_sets = max(1, round(target / nbytes))
        calls = n_sets * math.ceil(cfg["graph_calls"] / n_sets)
        # graph_sweep.reps counts timed calls in eager mode and timed replays in graph mode.
        harness = timing.Harness(
            "cuda",
            warmup=max(cfg["warmup_reps"], n_sets),
            reps=cfg["reps"],
            graph_calls=calls,
            replays=cfg["reps"],
        )
        sets = inputs.input_sets(shape, n_sets, "cuda", seed=int(shape.invocation))
        ws = n_sets * nbytes
        for mode in timing.MODES:
            for fused in (False, True):
                c = by_fused[fused]
                m = harness.time(mode, portfolio.candidate_fn(c, cos, sin, inputs.rotate_k(shape)), sets)
                rows.append(
                    {
                        "regime": regime_label(multiple),
                        "regime_multiple": float(multiple),
                        "residency": "l2-resident" if ws <= l2 else "spilled",
                        "working_set_bytes": ws,
                        "target_bytes": int(target),
                        "l2_bytes": l2,
                        "mode": mode,
                        "fused": fused,
                        "tile": cfg["tile"],
                        "candidate": c.candidate,
                        "shape_key": shape.shape_key,
                        "phase": shape.phase,
                        "buffer_sets": n_sets,
                        "calls_per_graph": calls,
                        **timing.summarize(m.samples_us),
                        "reps": int(m.samples_us.size),
                        "status": "ok",
                        "reason": "",
                        "device": "cuda",
                    }
                )
        del sets
        torch.cuda.empty_cache()
    return rows


def _frame(rows: list[dict]) -> pd.DataFrame:
    df = pd.DataFrame.from_records(rows, columns=COLUMNS)
    for col in (*STAT_COLUMNS, "regime_multiple", "fusion_speedup"):
        df[col] = df[col].astype("float64")
    for col in ("working_set_bytes", "target_bytes", "l2_bytes", "buffer_sets", "calls_per_graph", "reps"):
        df[col] = df[col].astype("Int64")
    df["tile"] = df["tile"].astype("int64")
    df["fused"] = df["fused"].astype(bool)
    for col in ("residency", "candidate", "reason"):
        df[col] = df[col].astype(object).fillna("").astype(str)
    return df


def speedup_table(df: pd.DataFrame) -> pd.DataFrame:
    """Eager and graph fusion speedup side by side per (shape_key, regime): the sweep's answer."""
    sp = fusion_speedups(df)
    if sp.empty:
        return pd.DataFrame(
            columns=["shape_key", "regime", "regime_multiple", "eager_speedup", "graph_speedup"]
        )
    wide = sp.pivot_table(index=["shape_key", "regime", "regime_multiple"], columns="mode", values="speedup")
    wide = wide.rename(columns={m: f"{m}_speedup" for m in timing.MODES}).reset_index()
    wide.columns.name = None
    return wide.sort_values(["shape_key", "regime_multiple"]).reset_index(drop=True)


def not_applicable(family: str, device: str) -> pd.DataFrame:
    """The sweep of a study whose family is not attention: one skipped row per mode saying why (the
    sweep measures attention's RoPE fusion across L2 regimes; a family has no such pair)."""
    reason = f"not applicable: the graph sweep measures attention's RoPE fusion; family {family} has none"
    rows = [{"regime": "none", "regime_multiple": float("nan"), "mode": mode, "fused": False, "tile": -1,
             "candidate": "", "shape_key": "", "phase": "", "status": "skipped", "reason": reason,
             "device": device} for mode in timing.MODES]  # fmt: skip
    return _frame(rows)
