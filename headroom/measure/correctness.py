"""What every correctness gate shares: the attention gate (headroom.families.attention.correctness)
and a family's (headroom.families.check) read their tolerances, seed their checks and judge them
here, and apply `on_correctness_failure` to the result.

A check passes when it ran, nothing is NaN or unwritten, rel_err <= tolerance and
max_abs_err <= abs_tolerance (per dtype, config `correctness.tolerances`). Status 'unsupported' (the
candidate cannot run the shape: not a wrong answer) excludes the candidate from timing whatever
`on_correctness_failure` says; 'failed' (a wrong answer, NaNs, unwritten elements) and 'error' (any
other compile or launch failure) are failures.

`admitted()` is how later stages drop failing and unsupported candidates.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import blake3
import pandas as pd


class CorrectnessFailure(RuntimeError):
    """Raised under `on_correctness_failure: fail` when any candidate failed a check."""


def tolerances(section: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """{dtype: (rel, abs)} from the config's `correctness.tolerances` mapping."""
    raw = section.get("tolerances") if isinstance(section, Mapping) else None
    if not isinstance(raw, Mapping) or not raw:
        raise ValueError("config key 'correctness.tolerances' must map dtypes to {rel, abs}")
    out = {}
    for dtype, tol in raw.items():
        if not isinstance(tol, Mapping) or set(tol) != {"rel", "abs"}:
            raise ValueError(f"config key 'correctness.tolerances.{dtype}' must be {{rel, abs}}, got {tol!r}")
        rel, abs_ = tol["rel"], tol["abs"]
        for name, value in (("rel", rel), ("abs", abs_)):
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(
                    f"config key 'correctness.tolerances.{dtype}.{name}' must be > 0, got {value!r}"
                )
        out[str(dtype)] = (float(rel), float(abs_))
    return out


def input_seed(seed: int, candidate: str, shape_key: str) -> int:
    """A distinct, reproducible seed for each (candidate, shape_key) check."""
    # BLAKE3, the project's one hash: stable across processes and Python versions (hash() is not).
    digest = blake3.blake3(f"{seed}|{candidate}|{shape_key}".encode()).digest(length=8)
    return int.from_bytes(digest, "little") & (2**63 - 1)


def problems(
    rel: float, max_abs: float, nan_count: int, unwritten: int, tol: tuple[float, float]
) -> list[str]:
    problems = []
    if nan_count:
        problems.append(f"{nan_count} NaN elements")
    if unwritten:
        problems.append(f"{unwritten} unwritten elements")
    if not rel <= tol[0]:
        problems.append(f"rel_err {rel:.3e} > {tol[0]:.1e}")
    if not max_abs <= tol[1]:
        problems.append(f"max_abs_err {max_abs:.3e} > {tol[1]:.1e}")
    return problems


def _unsupported_mask(correctness: pd.DataFrame) -> pd.Series:
    if "status" not in correctness.columns:
        return pd.Series(False, index=correctness.index)
    return correctness["status"].astype(str) == "unsupported"


def failing(correctness: pd.DataFrame) -> pd.DataFrame:
    """One row per candidate with a failed check (a wrong answer, NaNs, unwritten elements, a
    launch error; not 'unsupported'): candidate, failed_checks, checks, first_reason."""
    return _summary(correctness, ~correctness["passed"].astype(bool) & ~_unsupported_mask(correctness))


def unsupported(correctness: pd.DataFrame) -> pd.DataFrame:
    """One row per candidate that cannot run some shape: candidate, failed_checks, checks, first_reason."""
    return _summary(correctness, _unsupported_mask(correctness))


def _summary(correctness: pd.DataFrame, mask: pd.Series) -> pd.DataFrame:
    rows = []
    for candidate, group in correctness.groupby("candidate", sort=False):
        bad = group[mask.loc[group.index]]
        if len(bad):
            first = bad.iloc[0]
            rows.append(
                {
                    "candidate": candidate,
                    "failed_checks": len(bad),
                    "checks": len(group),
                    "first_reason": f"{first['shape_key']}: {first['reason']}",
                }
            )
    return pd.DataFrame(rows, columns=["candidate", "failed_checks", "checks", "first_reason"])


def gate(correctness: pd.DataFrame, policy: str, log: logging.Logger) -> pd.DataFrame:
    """Apply `on_correctness_failure`: 'fail' raises CorrectnessFailure naming every failing
    candidate; 'exclude' logs each one loudly and lets the stage go on. Returns failing().
    Unsupported candidates are excluded under either policy, with a warning naming the reason."""
    if policy not in ("fail", "exclude"):
        raise ValueError(f"config key 'on_correctness_failure' must be 'fail' or 'exclude', got {policy!r}")
    for r in unsupported(correctness).itertuples():
        log.warning(
            "EXCLUDED from timing, unsupported on %d/%d shapes: %s (%s)",
            r.failed_checks,
            r.checks,
            r.candidate,
            r.first_reason,
        )
    bad = failing(correctness)
    if bad.empty:
        log.info(
            "correctness: no check failed (%d checks, %d unsupported)",
            len(correctness),
            int(_unsupported_mask(correctness).sum()),
        )
        return bad
    lines = [
        f"{r.candidate} ({r.failed_checks}/{r.checks} checks failed; {r.first_reason})"
        for r in bad.itertuples()
    ]
    if policy == "fail":
        raise CorrectnessFailure(
            f"{len(bad)} candidate(s) failed correctness: "
            + "; ".join(lines)
            + ". Fix them, or set on_correctness_failure: exclude to drop them and go on"
        )
    for line in lines:
        log.error("EXCLUDED from every later stage: %s", line)
    return bad


def admitted(candidates: pd.DataFrame, correctness: pd.DataFrame) -> pd.DataFrame:
    """The candidates whose every correctness check passed, in their original order (failed and
    unsupported ones are dropped).

    A candidate with no correctness rows was never checked: that is a stale correctness
    artifact, and it raises ValueError rather than being admitted or silently dropped."""
    if "candidate" not in candidates.columns or "candidate" not in correctness.columns:
        raise ValueError("admitted() needs a 'candidate' column in candidates and correctness")
    checked = set(correctness["candidate"])
    unchecked = [c for c in candidates["candidate"] if c not in checked]
    if unchecked:
        raise ValueError(
            f"candidates {unchecked} have no correctness rows: correctness.parquet "
            "is stale for this candidate set; rerun the correctness rule"
        )
    failed = set(correctness.loc[~correctness["passed"].astype(bool), "candidate"])
    return candidates[~candidates["candidate"].isin(failed)].reset_index(drop=True)
