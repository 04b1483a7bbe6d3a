"""Reuse of large result buffers: only released buffers, within the cap."""

import gc
import os
import subprocess
import sys

import numpy as np
from helpers.reference import reference

from bertembed import bert_embeddings
from bertembed._core import pool as _pool
from bertembed._core.pool import MIN_BYTES, ResultPool

F8 = np.dtype(np.float64)
SHAPE = (4, MIN_BYTES // (4 * 8) + 1)  # just over MIN_BYTES of float64


def test_small_results_bypass_the_pool():
    pool = ResultPool(64 << 20)
    a = pool.empty((10, 10), F8)
    del a
    gc.collect()
    assert pool.free_bytes == 0


def test_released_buffer_is_reused_held_one_is_not():
    pool = ResultPool(64 << 20)
    a = pool.empty(SHAPE, F8)
    a[...] = 1.0
    address = a.__array_interface__["data"][0]
    b = pool.empty(SHAPE, F8)  # a is still held: b must be new memory
    assert not np.shares_memory(a, b)
    view = a[1:]  # a view keeps the buffer alive too
    del a
    gc.collect()
    c = pool.empty(SHAPE, F8)
    assert not np.shares_memory(c, view)
    assert (view == 1.0).all()
    del view, b, c
    gc.collect()
    one = SHAPE[0] * SHAPE[1] * 8
    assert pool.free_bytes == 3 * one  # a's (once its view died), b's and c's
    d = pool.empty(SHAPE, F8)
    assert pool.free_bytes == 2 * one  # d took one of them back out
    assert d.__array_interface__["data"][0] in {address, *(x.ctypes.data for x in pool._free), d.ctypes.data}
    del d
    gc.collect()
    assert pool.free_bytes == 3 * one


def test_cap_bounds_what_is_kept():
    nbytes = SHAPE[0] * SHAPE[1] * 8
    pool = ResultPool(int(1.5 * nbytes))
    arrays = [pool.empty(SHAPE, F8) for _ in range(3)]
    del arrays
    gc.collect()
    assert pool.free_bytes <= 1.5 * nbytes
    pool.clear()
    assert pool.free_bytes == 0


def test_cap_zero_disables_reuse():
    pool = ResultPool(0)
    a = pool.empty(SHAPE, F8)
    del a
    gc.collect()
    assert pool.free_bytes == 0


def test_results_from_reused_buffers_are_right(rng):
    h = 64
    s = MIN_BYTES // (2 * h * 8) + 8
    tok, pos, seg = rng.standard_normal((50, h)), rng.standard_normal((s, h)), rng.standard_normal((2, h))
    for _ in range(4):
        ids, sids = rng.integers(0, 50, (2, s)), rng.integers(0, 2, (2, s))
        got = bert_embeddings(ids, sids, tok, pos, seg)
        assert got.flags.c_contiguous and got.flags.writeable and got.flags.aligned
        np.testing.assert_array_equal(got, reference(ids, sids, tok, pos, seg))
        del got
        gc.collect()
    assert _pool.pool.free_bytes > 0  # the last result went back


def test_environment_variable_sets_the_cap():
    code = "from bertembed._core import pool; print(pool.pool.cap)"
    for value, cap in (("0", 0), ("8", 8 << 20)):
        env = dict(os.environ, BERTEMBED_RESULT_CACHE_MB=value)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert int(out.stdout) == cap
