"""The automatic thread choice: values per thread, within the share of the cap
that the calls in flight (of this process and its forked children) leave.

The rule is tested through ``_kernel.auto_threads`` (the count a call would
get, deterministic); real calls are tested for what they must always do
(results, bounds, counters), never for their speed.
"""

import os
import time

import numpy as np
import pytest
from helpers.reference import tolerance, twin

import bertembed
from bertembed import BertEmbeddings
from bertembed._core import _kernel

needs_openmp = pytest.mark.skipif(not bertembed.openmp_enabled(), reason="a serial build has one thread")
PER_THREAD = _kernel.ELEMENTS_PER_THREAD


def test_small_calls_use_one_thread():
    assert _kernel.auto_threads(2 * PER_THREAD - 1) == 1
    assert _kernel.auto_threads(1) == 1


@needs_openmp
def test_one_thread_per_share_of_the_values_up_to_the_cap():
    cap = bertembed.max_threads()
    for k in range(1, 2 * cap + 2):
        assert _kernel.auto_threads(k * PER_THREAD) == min(k, cap)


@needs_openmp
def test_calls_in_flight_share_the_cap():
    cap, big = bertembed.max_threads(), 1 << 40
    assert _kernel.auto_threads(big) == cap
    assert _kernel.auto_threads(big, busy=1) == max(1, cap // 2)
    assert _kernel.auto_threads(big, busy=cap) == 1


@needs_openmp
def test_the_values_per_thread_and_the_process_setting_are_honoured():
    before = _kernel.auto_threads_settings(elements_per_thread=1000)
    try:
        assert _kernel.auto_threads(1999) == 1
        assert _kernel.auto_threads(2000) == min(2, bertembed.max_threads())
    finally:
        _kernel.auto_threads_settings(before)
    bertembed.set_num_threads(1)
    try:
        assert _kernel.auto_threads(1 << 40) == 1  # the process-wide count comes first
    finally:
        bertembed.set_num_threads(None)


@needs_openmp
def test_real_automatic_calls_are_right_and_bounded():
    rng = np.random.default_rng(3)
    tok, pos, seg = rng.standard_normal((300, 256)), rng.standard_normal((128, 256)), rng.standard_normal((2, 256))
    layer = BertEmbeddings(tok, pos, seg)
    ids, sids = rng.integers(0, 300, (8, 128)), rng.integers(0, 2, (8, 128))
    want = twin(ids, tok, pos=pos, seg=seg, segment_ids=sids)
    for _ in range(20):
        np.testing.assert_allclose(layer(ids, sids), want, **tolerance(np.float64))
        assert 1 <= _kernel.last_auto_threads() <= bertembed.max_threads()
    assert _kernel.in_flight() == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_the_calls_of_forked_workers_are_counted_in_each_other():
    """A call running in a forked child is in flight for the parent too (and so
    for its siblings): W pre-forked workers share the cap."""
    rng = np.random.default_rng(0)
    layer = BertEmbeddings(rng.standard_normal((1000, 256)), rng.standard_normal((512, 256)))
    ids = rng.integers(0, 1000, (64, 512))  # 8M float64 values: milliseconds per call
    started, stop = os.pipe(), os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child: calls until told to stop
        os.set_blocking(stop[0], False)
        os.write(started[1], b"go")
        while True:
            layer(ids, num_threads=1)
            try:
                if os.read(stop[0], 1):
                    break
            except BlockingIOError:
                pass
        os._exit(0)
    os.read(started[0], 2)
    seen = 0
    deadline = time.monotonic() + 10
    while seen == 0 and time.monotonic() < deadline:
        seen = _kernel.in_flight()
    os.write(stop[1], b"x")
    os.waitpid(pid, 0)
    for fd in started + stop:
        os.close(fd)
    assert seen == 1
    assert _kernel.in_flight() == 0  # the child's last call ended before it exited
