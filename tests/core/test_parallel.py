"""headroom.core.parallel: calls side by side in forked processes give what one process gives, in
order, and the calls are inherited, not pickled (a lambda over a local table runs)."""

from __future__ import annotations

import os

import numpy as np

from headroom.core import parallel


def test_forked_results_are_the_serial_results_in_order():
    table = np.arange(1000.0)  # a local the workers read through the closure, never pickled
    calls = [(lambda k, t=table: (float(t[k::7].sum()), os.getpid()), (k,)) for k in range(7)]
    forked = parallel.forked_map(calls, workers=3)
    serial = parallel.forked_map(calls, workers=1)
    assert [v for v, _ in forked] == [v for v, _ in serial] == [float(table[k::7].sum()) for k in range(7)]
    assert {pid for _, pid in serial} == {os.getpid()}
    assert os.getpid() not in {pid for _, pid in forked}
    assert parallel._FORKED == []  # nothing of the calls is kept after the pool


def test_never_more_workers_than_calls_and_none_for_no_calls():
    assert parallel.forked_map([], workers=4) == []
    assert parallel.forked_map([(os.getpid, ())], workers=8) == [os.getpid()]  # one call: no pool
    assert parallel.workers_here() >= 1
