"""Independent calls side by side in forked processes: what the decision's power curves and the
report's sections share. A forked worker inherits the calls (never pickled: study tables and
setups stay in the parent's memory, shared copy-on-write) and sends back only its result; one
worker, or a platform without fork, runs them in order in this process, with the same results."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

#: The calls a forked worker reads (inherited, never pickled): set only while a pool runs.
_FORKED: list[tuple[Callable, tuple]] = []


def workers_here() -> int:
    """The cores this process may run on (its CPU affinity: a Slurm job's allocation, all cores of a
    workstation)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _call(index: int) -> Any:
    from threadpoolctl import threadpool_limits

    fn, args = _FORKED[index]
    with threadpool_limits(1):  # the pool already uses every core it was given
        return fn(*args)


def forked_map(calls: Sequence[tuple[Callable, tuple]], workers: int | None = None) -> list:
    """``[fn(*args) for fn, args in calls]``, in that order, computed in ``workers`` forked processes
    (default: the cores this process may use; never more than the calls)."""
    global _FORKED
    workers = min(workers or workers_here(), len(calls))
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        return [fn(*args) for fn, args in calls]
    _FORKED = list(calls)
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
            return list(pool.map(_call, range(len(calls))))
    finally:
        _FORKED = []
