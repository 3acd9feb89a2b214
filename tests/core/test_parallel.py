"""headroom.core.parallel: calls side by side in forked processes give what one process gives, in
order, and the calls are inherited, not pickled (a lambda over a local table runs); started ones run
while this process goes on, and an error in between leaves no pool behind."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from headroom.core import parallel


def test_forked_results_are_the_serial_results_in_order():
    table = np.arange(1000.0)  # a local the workers read through the closure, never pickled
    calls = [(lambda k, t=table: (float(t[k::7].sum()), os.getpid()), (k,)) for k in range(7)]
    forked = parallel.forked_map(calls, workers=3)
    serial = parallel.forked_map(calls, workers=1)
    assert [v for v, _ in forked] == [v for v, _ in serial] == [float(table[k::7].sum()) for k in range(7)]
    assert {pid for _, pid in serial} == {os.getpid()}
    assert os.getpid() not in {pid for _, pid in forked}
    assert parallel._FORKED == {}  # nothing of the calls is kept after the pool


def test_never_more_workers_than_calls_and_none_for_no_calls():
    assert parallel.forked_map([], workers=4) == []
    assert parallel.forked_map([(os.getpid, ())], workers=8) == [os.getpid()]  # one call: no pool
    assert parallel.workers_here() >= 1


def test_started_calls_run_while_this_process_goes_on():
    stamps = parallel.forked_started([(time.sleep, (0.5,)), (time.sleep, (0.5,))], workers=2)
    t0 = time.perf_counter()
    with stamps as results:
        during = time.perf_counter() - t0  # the block began without waiting for the calls
        time.sleep(0.5)  # this process's own work, side by side with theirs
        assert results() == [None, None]
    assert during < 0.4 and time.perf_counter() - t0 < 1.2  # not 1.5 s one after the other
    assert parallel._FORKED == {}


def test_an_error_beside_started_calls_propagates_and_leaves_no_pool():
    with pytest.raises(ValueError, match="the figures failed"):
        with parallel.forked_started([(time.sleep, (0.2,))] * 3, workers=2):
            raise ValueError("the figures failed")
    assert parallel._FORKED == {}
    serial = parallel.forked_started([(os.getpid, ())], workers=1)
    with serial as results:  # one worker: computed here, once, when first asked for
        assert results() == [os.getpid()] and results() is results()
