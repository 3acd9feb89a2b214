"""Independent calls side by side in forked processes: what the decision's power curves and the
report's sections share. A forked worker inherits the calls (never pickled: study tables and
setups stay in the parent's memory, shared copy-on-write) and sends back only its result; one
worker, or a platform without fork, runs them in order in this process, with the same results.
``forked_started`` starts them and lets this process go on with other work meanwhile (the decision
stage computes its figures while the power curves run); ``forked_map`` waits for them at once."""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

#: The calls forked workers read (inherited, never pickled), by pool: set only while a pool runs.
_FORKED: dict[int, list[tuple[Callable, tuple]]] = {}
_POOLS = itertools.count()


def workers_here() -> int:
    """The cores this process may run on (its CPU affinity: a Slurm job's allocation, all cores of a
    workstation)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _call(pool: int, index: int) -> Any:
    from threadpoolctl import threadpool_limits

    fn, args = _FORKED[pool][index]
    with threadpool_limits(1):  # the pool already uses every core it was given
        return fn(*args)


@contextlib.contextmanager
def forked_started(
    calls: Sequence[tuple[Callable, tuple]], workers: int | None = None
) -> Iterator[Callable[[], list]]:
    """The calls of :func:`forked_map` started now in ``workers`` forked processes (forked at once, so
    they see this process as it is now), while this process goes on inside the block; yields a
    function that waits for their results and returns them in order. One worker or no fork: the
    calls run in this process when the results are first asked for. Leaving the block on an error
    cancels the calls not yet started and waits for the running ones."""
    workers = min(workers or workers_here(), len(calls))
    if workers <= 1 or "fork" not in multiprocessing.get_all_start_methods():
        done: list[list] = []

        def serial() -> list:
            if not done:
                done.append([fn(*args) for fn, args in calls])
            return done[0]

        yield serial
        return
    key = next(_POOLS)
    _FORKED[key] = list(calls)
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    try:
        futures = [pool.submit(_call, key, i) for i in range(len(calls))]  # the first forks them all
        yield lambda: [f.result() for f in futures]
    except BaseException:
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    else:
        pool.shutdown(wait=True)
    finally:
        _FORKED.pop(key, None)


def forked_map(calls: Sequence[tuple[Callable, tuple]], workers: int | None = None) -> list:
    """``[fn(*args) for fn, args in calls]``, in that order, computed in ``workers`` forked processes
    (default: the cores this process may use; never more than the calls)."""
    with forked_started(calls, workers) as results:
        return results()
