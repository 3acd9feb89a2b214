"""A family's invocations: the serving engine's steps (headroom.trace.step_table) through
`family.shapes(step)`, one row per call, with the step's index, kind and time attached by the
framework (never by the family)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from headroom.families.contract import FamilyError, Step, call, check_shape, label

#: The columns every family's invocations carry ahead of its features.
COLUMNS = ("invocation", "family", "step", "step_kind", "time_s", "shape_key", "shape")


def steps_of(table: pd.DataFrame) -> list[Step]:
    """The steps table's rows as Step values."""
    return [
        Step(
            index=int(r.step),
            time_s=float(r.time_s),
            kind=str(r.kind),
            decode_kv_lens=tuple(int(x) for x in r.decode_kv_lens),
            prefill_chunks=tuple((int(q), int(kv)) for q, kv in r.prefill_chunks),
            tokens=int(r.tokens),
        )
        for r in table.itertuples(index=False)
    ]


def shape_key(family: Any, shape: dict) -> str:
    """A shape's key: its features in declared order, then its other keys sorted, `name=value|...`
    (values as JSON, strings bare)."""
    names = list(family.features) + sorted(k for k in shape if k not in family.features)
    return "|".join(
        f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in ((k, shape[k]) for k in names)
    )


def expand(family: Any, steps: list[Step]) -> pd.DataFrame:
    """Every call of the family in the steps (COLUMNS + one column per feature), in step order."""
    rows = []
    for step in steps:
        found = call(family, "shapes", step)
        if not isinstance(found, list | tuple):
            raise FamilyError(
                f"{label(family)}: shapes(step {step.index}) must return a list of dicts, got {found!r:.200}"
            )
        for shape in found:
            shape = check_shape(family, shape, f"shapes(step {step.index}, {step.kind})")
            key = shape_key(family, shape)
            rows.append((step.index, step.kind, step.time_s, key, json.dumps(shape, sort_keys=True), shape))
    if not rows:
        raise FamilyError(f"{label(family)}: shapes() returned no call in any of {len(steps)} steps")
    df = pd.DataFrame(
        {
            "invocation": range(len(rows)),
            "family": family.name,
            "step": [r[0] for r in rows],
            "step_kind": [r[1] for r in rows],
            "time_s": [r[2] for r in rows],
            "shape_key": [r[3] for r in rows],
            "shape": [r[4] for r in rows],
        }
    )
    for fname in family.features:
        df[fname] = [r[5][fname] for r in rows]
    return df


def distinct_shapes(invocations: pd.DataFrame) -> pd.DataFrame:
    """One row per shape_key (its first call), with `calls` = how many invocations have it."""
    calls = invocations.groupby("shape_key", sort=False).size().rename("calls")
    first = invocations.drop_duplicates("shape_key").set_index("shape_key")
    return first.join(calls).reset_index()
