"""Lifecycle costs: what owning a portfolio costs, parsed from lifecycle.parquet, charged per invocation.

The one place that knows the lifecycle.parquet layouts we accept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from headroom.core.names import CATEGORY_KEYED, CONFIG_TABLE

_TIME_TO_US = {"s": 1e6, "ms": 1e3, "us": 1.0, "µs": 1.0, "ns": 1e-3}
_SIZE_TO_BYTES = {"bytes": 1.0, "b": 1.0, "kib": 1024.0, "mib": 1024.0**2}


@dataclass(frozen=True)
class LifecycleCosts:
    """What owning a portfolio costs, in the units the policy figures need.

    compile_s: cold compile seconds per candidate; cache_bytes: on-disk cache per candidate;
    dispatch_us: per-lookup overhead per policy name; switch_us: penalty of running a different
    candidate than the previous invocation did (median over all switch rows), switch_us_by_mode:
    the same per mode when the rows carry one; plan_us: building a generation-2 candidate's plan
    (median over the trace's shapes; plan_us_by_shape: per shape, what is charged), paid once per
    batch shape and spread over the layers of a forward pass (eager mode; a captured graph holds its
    plan). Negative switch penalties (alternating faster than
    repeating: noise) are charged as 0, so noise never pays for an adaptive policy.
    """

    compile_s: dict[str, float] = field(default_factory=dict)
    cache_bytes: dict[str, float] = field(default_factory=dict)
    dispatch_us: dict[str, float] = field(default_factory=dict)
    switch_us: float = 0.0
    switch_us_by_mode: dict[str, float] = field(default_factory=dict)
    measured: bool = False
    plan_us: dict[str, float] = field(default_factory=dict)  # plan build per candidate (median shape)
    plan_us_by_shape: dict[tuple[str, str], float] = field(default_factory=dict)  # (candidate, shape_key)

    def plan_for(self, candidate: str, shape_key: str) -> float:
        """The plan build of ``candidate`` for this shape; its median over shapes where the shape was
        not measured; 0 for a candidate without plans (native, generation 1)."""
        return self.plan_us_by_shape.get((candidate, shape_key), self.plan_us.get(candidate, 0.0))

    def plan_charges(self, mode: str, names, shape_keys, n: int, layers_per_forward: int) -> np.ndarray:
        """(n, C) plan charge per call: each candidate's plan for the invocation's own shape over the
        layers of a forward pass; 0 under graph replay (the plan is built at capture)."""
        if mode == "graph" or not self.plan_us or not shape_keys:
            return np.zeros((n, len(names)))
        per = [[self.plan_for(c, s) for c in names] for s in shape_keys]
        return np.array(per, dtype=float) / layers_per_forward

    def switch_for(self, mode: str) -> float:
        return self.switch_us_by_mode.get(mode, self.switch_us)

    def dispatch_for(self, policy: str) -> tuple[float, str]:
        """Dispatch µs for a policy and how it was obtained (unmeasured kinds take the dearest)."""
        if policy in self.dispatch_us:
            return self.dispatch_us[policy], "measured"
        if not self.dispatch_us:
            return 0.0, "not measured (0 charged)"
        if policy == "global":
            return 0.0, "not measured; global needs no lookup (0 charged)"
        if policy == CONFIG_TABLE:
            us = self.dispatch_for("exact-key")[0]
            return us, "not measured; charged exact-key's lookup (a table lookup too)"
        if policy == CATEGORY_KEYED:
            # the baseline of the policy figure: charging it the dearest lookup would flatter the
            # policies it is compared with, so it gets the cheapest (a category test is cheaper still)
            return min(self.dispatch_us.values()), "not measured; charged the cheapest measured lookup"
        dearest = max(self.dispatch_us.values())
        return dearest, "not measured; charged the dearest measured lookup"


def _unit_factor(unit: object, table: dict[str, float], what: str) -> float:
    key = str(unit).strip().lower() if unit is not None and not pd.isna(unit) else ""
    table = {k.lower(): v for k, v in table.items()}
    if key not in table:
        raise ValueError(
            f"lifecycle: unit {unit!r} of {what} rows not understood; use one of {sorted(table)}"
        )
    return table[key]


def _plan_us(df: pd.DataFrame) -> tuple[dict[str, float], dict[tuple[str, str], float]]:
    """Plan build µs (rows of kind plan): the median per candidate over the shapes it was built for,
    and per (candidate, shape_key) when the rows name a shape (the median of that shape's rows)."""
    rows = df[df["kind"].astype(str).str.lower() == "plan"]
    out: dict[str, list[float]] = {}
    by_shape: dict[tuple[str, str], list[float]] = {}
    for row in rows.itertuples(index=False):
        value = float(row.value)
        if math.isfinite(value):
            unit = getattr(row, "unit", None) or "us"
            us = value * _unit_factor(unit, _TIME_TO_US, "plan")
            out.setdefault(str(row.candidate), []).append(us)
            shape = getattr(row, "shape_key", None)
            if shape is not None and not pd.isna(shape) and str(shape):
                by_shape.setdefault((str(row.candidate), str(shape)), []).append(us)
    median = {cand: float(np.median(values)) for cand, values in out.items()}
    return median, {key: float(np.median(values)) for key, values in by_shape.items()}


def charge(
    choice: np.ndarray,
    category: np.ndarray,
    plan: np.ndarray,
    dispatch_us: float,
    switch_us: float,
    compile_us,
) -> np.ndarray:
    """What a choice sequence pays per invocation besides its latency, (..., n) for ``choice`` (..., n):

    * the policy's lookup (``dispatch_us``; 0 under graph replay, where it runs at capture);
    * ``switch_us`` on every invocation that runs another candidate than the previous one *within the
      same category*: across a category change every policy, the global kernel included, runs another
      kernel (attention's prefill and decode kernels alternate), so only switches beyond the global
      kernel's are charged;
    * ``plan`` (n, C) (or (..., n, C)): each candidate's plan build for that invocation's shape, per
      call (0 in graph mode);
    * ``compile_us`` (C,): each used candidate's compile time amortized per invocation.

    category: (n,) or (..., n) category codes of the invocations in order (``Keying.category_codes``).
    One function for the pipeline and the simulator (headroom.decide.engine)."""
    same = category[..., 1:] == category[..., :-1]
    switched = (choice[..., 1:] != choice[..., :-1]) & same
    out = np.zeros(choice.shape)
    out[..., 1:] = switch_us * switched
    out += np.take_along_axis(np.broadcast_to(plan, (*choice.shape, plan.shape[-1])), choice[..., None], -1)[
        ..., 0
    ]
    used = np.zeros((*choice.shape[:-1], len(compile_us)), bool)
    np.put_along_axis(used, choice, True, axis=-1)
    return out + (dispatch_us + used @ np.asarray(compile_us, float))[..., None]


def _parse_long(df, compile_s, cache_bytes, dispatch_us, switches) -> None:
    """Rows of kind compile|cache|dispatch|switch with value and unit (plan: see _plan_us)."""
    kinds = df["kind"].astype(str).str.lower()
    unknown = sorted(set(kinds) - {"compile", "cache", "dispatch", "switch", "plan"})
    if unknown:
        raise ValueError(
            f"lifecycle: unknown kind(s) {unknown}; expected compile, cache, dispatch, switch, plan"
        )
    units = df["unit"] if "unit" in df.columns else pd.Series([None] * len(df), index=df.index)
    for kind, default_unit in (
        ("compile", "s"),
        ("cache", "bytes"),
        ("dispatch", "ns"),
        ("switch", "us"),
    ):
        rows = df[kinds == kind]
        for idx, row in rows.iterrows():
            unit = (
                units.loc[idx] if units.loc[idx] is not None and not pd.isna(units.loc[idx]) else default_unit
            )
            value = float(row["value"])
            if not math.isfinite(value):
                continue
            if kind == "compile":
                compile_s[str(row["candidate"])] = value * _unit_factor(unit, _TIME_TO_US, kind) / 1e6
            elif kind == "cache":
                cache_bytes[str(row["candidate"])] = value * _unit_factor(unit, _SIZE_TO_BYTES, kind)
            elif kind == "dispatch":
                if "policy" not in df.columns or pd.isna(row["policy"]):
                    raise ValueError("lifecycle: a dispatch row needs a `policy` naming the lookup kind")
                dispatch_us[str(row["policy"])] = value * _unit_factor(unit, _TIME_TO_US, kind)
            else:
                mode = row["mode"] if "mode" in df.columns and pd.notna(row["mode"]) else ""
                switches.append((str(mode), value * _unit_factor(unit, _TIME_TO_US, kind)))


def _parse_wide(df, compile_s, cache_bytes, dispatch_us, switches) -> None:
    """Columns compile_s, cache_bytes, dispatch_ns|dispatch_us (with policy), switch_us."""
    if "candidate" in df.columns:
        for col, target in (("compile_s", compile_s), ("cache_bytes", cache_bytes)):
            if col in df.columns:
                for cand, value in zip(df["candidate"], df[col], strict=True):
                    if pd.notna(cand) and pd.notna(value):
                        target[str(cand)] = float(value)
    for col, factor in (("dispatch_ns", 1e-3), ("dispatch_us", 1.0)):
        if col in df.columns:
            if "policy" not in df.columns:
                raise ValueError(f"lifecycle: column {col} needs a `policy` column naming the lookup kind")
            for pol, value in zip(df["policy"], df[col], strict=True):
                if pd.notna(pol) and pd.notna(value):
                    dispatch_us[str(pol)] = float(value) * factor
    if "switch_us" in df.columns:
        modes = df["mode"] if "mode" in df.columns else pd.Series([""] * len(df), index=df.index)
        for mode, value in zip(modes, df["switch_us"], strict=True):
            if pd.notna(value):
                switches.append((str(mode) if pd.notna(mode) else "", float(value)))


def lifecycle_costs(lifecycle: pd.DataFrame | None) -> LifecycleCosts:
    """Parse lifecycle.parquet into ``LifecycleCosts``. None means no costs (all zero).

    Accepted layouts (both may be mixed in one table):

    * long: columns ``kind`` in {compile, cache, dispatch, switch}, ``value``, ``unit`` and
      ``candidate`` (compile, cache) or ``policy`` (dispatch). Units: compile s|ms, cache bytes|KiB|MiB,
      dispatch and switch ns|us|ms|s. A missing ``unit`` means s, bytes, ns, us respectively.
    * wide: columns ``candidate``, ``compile_s``, ``cache_bytes``; optional per-row ``policy`` with
      ``dispatch_ns`` or ``dispatch_us``; optional ``switch_us`` (the median of non-null values is used).
    """
    if lifecycle is None:
        return LifecycleCosts()
    if not isinstance(lifecycle, pd.DataFrame):
        raise ValueError(f"lifecycle must be a pandas DataFrame or None, got {type(lifecycle).__name__}")
    compile_s: dict[str, float] = {}
    cache_bytes: dict[str, float] = {}
    dispatch_us: dict[str, float] = {}
    switches: list[tuple[str, float]] = []  # (mode or "", µs)
    df = lifecycle.reset_index(drop=True)  # rows are addressed by label below
    if "status" in df.columns:
        df = df[df["status"].isna() | (df["status"].astype(str) == "ok")]
    parse = _parse_long if "kind" in df.columns and "value" in df.columns else _parse_wide
    parse(df, compile_s, cache_bytes, dispatch_us, switches)
    switch_us = max(0.0, float(np.median([v for _, v in switches]))) if switches else 0.0
    by_mode = {
        mode: max(0.0, float(np.median([v for m, v in switches if m == mode])))
        for mode in {m for m, _ in switches if m}
    }
    plans, by_shape = _plan_us(df) if parse is _parse_long else ({}, {})
    return LifecycleCosts(
        compile_s,
        cache_bytes,
        dispatch_us,
        switch_us,
        by_mode,
        measured=True,
        plan_us=plans,
        plan_us_by_shape=by_shape,
    )
