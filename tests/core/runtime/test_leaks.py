"""No memory grows with the number of calls: successes and every error path.

Resident memory is read from ``/proc/self/statm`` after a warm-up (caches,
the allocator's arenas and lazily created objects settle there) and after
``malloc_trim`` (glibc), so that free heap memory left by earlier tests does
not absorb a leak. A leak of ~100 bytes per call shows up as ~10 MB over
100,000 calls, well above the tolerance; ``test_the_rss_check_detects_a_small_leak``
shows that. Some MB of free space inside Python's own arenas can still hide
a smaller leak of Python objects, so tracemalloc then checks Python-level
allocations (NumPy reports array buffers to it too): one surviving block per
ten calls fails it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import tracemalloc

import numpy as np
import pytest
from helpers.sanitizer import not_under_asan

import bertembed

# Under AddressSanitizer (.ci/sanitize.sh) freed memory sits in a quarantine,
# so RSS grows by design, and addresses are not reused, which makes
# tracemalloc report growth even for a NumPy-only ``str(dtype)`` loop. The
# sanitizer run checks memory safety; these tests check leaks in normal builds.
pytestmark = not_under_asan

CALLS = 100_000
WARMUP = 5_000
RSS_TOLERANCE = 3 * 2**20  # bytes
HAVE_STATM = os.path.exists("/proc/self/statm") and hasattr(os, "sysconf")
needs_statm = pytest.mark.skipif(not HAVE_STATM, reason="needs /proc/self/statm (Linux)")


def _trim() -> None:
    """Give free heap memory back to the OS (glibc only; a no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim(0)
    except (OSError, AttributeError):
        pass


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _rss_growth(step, calls: int, warmup: int = WARMUP) -> int:
    """RSS after ``calls`` more calls of ``step(i)`` minus RSS after the warm-up."""
    for i in range(warmup):
        step(i)
    gc.collect()
    _trim()
    before = _rss()
    for i in range(calls):
        step(i)
    gc.collect()
    return _rss() - before


def _tables():
    rng = np.random.default_rng(0)
    tok = rng.standard_normal((50, 8))
    pos = rng.standard_normal((16, 8))
    seg = rng.standard_normal((2, 8))
    return tok, pos, seg


TOK, POS, SEG = _tables()
W, B = np.linspace(0.5, 1.5, 8), np.linspace(-0.1, 0.1, 8)
LAYER = bertembed.BertEmbeddings(TOK, POS, SEG)
LN_LAYER = bertembed.BertEmbeddings(
    TOK.astype(np.float32), POS.astype(np.float32), SEG.astype(np.float32), ln_weight=W, ln_bias=B
)
IDS = np.random.default_rng(1).integers(0, 50, (2, 5))
SIDS = np.array([[0, 0, 1, 1, 1], [0, 1, 1, 1, 1]])
OUT32 = np.empty((2, 5, 8), np.float32)


def _ok_step(i: int) -> None:
    """One successful call; cycles through the main code paths.

    Every 50th call runs a parallel region (num_threads=2): on a loaded
    machine starting one costs far more than the call itself.
    """
    if i % 50 == 49:
        bertembed.bert_embeddings(
            IDS, None, TOK.astype(np.float32), POS, None, ln_weight=W, ln_bias=B, dtype=np.float32, num_threads=2
        )
        return
    k = i % 5
    if k == 0:
        bertembed.bert_embeddings(IDS, SIDS, TOK, POS, SEG)
    elif k == 1:
        LAYER(IDS, SIDS)
    elif k == 2:
        LN_LAYER(IDS.astype(np.int32), SIDS.astype(np.uint8), out=OUT32)
    elif k == 3:
        LAYER(IDS[0].tolist(), position_ids=[4, 3, 2, 1, 0])
    else:
        LAYER(np.zeros((0, 5), np.int64))


BAD_IDS = IDS.copy()
BAD_IDS[1, 2] = 50
BAD_OUT = np.empty((2, 5, 7))


def _error_step(i: int) -> None:
    """One call that must raise; cycles through IndexError, ValueError, TypeError."""
    k = i % 6
    cases = {
        0: (IndexError, lambda: LAYER(BAD_IDS)),
        1: (IndexError, lambda: bertembed.bert_embeddings(IDS, SIDS + 1, TOK, POS, SEG)),
        2: (ValueError, lambda: LAYER(IDS, SIDS[:, :4])),
        3: (ValueError, lambda: LAYER(IDS, out=BAD_OUT)),
        4: (TypeError, lambda: LAYER(IDS.astype(np.float64))),
        5: (TypeError, lambda: bertembed.bert_embeddings(IDS, None, TOK.astype(np.int64), POS, None)),
    }
    exc, call = cases[k]
    try:
        call()
    except exc:
        return
    raise AssertionError(f"case {k} did not raise {exc.__name__}")


@needs_statm
def test_successful_calls_keep_rss_constant():
    growth = _rss_growth(_ok_step, CALLS)
    assert growth < RSS_TOLERANCE, f"RSS grew by {growth / 2**20:.2f} MiB over {CALLS} calls"


@needs_statm
def test_failing_calls_keep_rss_constant():
    growth = _rss_growth(_error_step, CALLS)
    assert growth < RSS_TOLERANCE, f"RSS grew by {growth / 2**20:.2f} MiB over {CALLS} errors"


@needs_statm
def test_the_rss_check_detects_a_small_leak():
    """Control: keeping one 512-byte ``bytes`` per call is caught the same way.

    (Large enough that memory freed by earlier tests cannot absorb it.)
    """
    kept = []

    def leaky(i):
        kept.append(i.to_bytes(512, "little"))

    growth = _rss_growth(leaky, CALLS, warmup=0)
    assert growth > RSS_TOLERANCE, f"a {len(kept)}-object leak grew RSS by only {growth} bytes"


@pytest.mark.parametrize("step", [_ok_step, _error_step], ids=["ok", "errors"])
def test_no_python_allocations_survive(step):
    """tracemalloc: nothing allocated by 6,000 calls is still alive afterwards."""
    calls = 6_000
    for i in range(600):
        step(i)
    gc.collect()
    tracemalloc.start()
    try:
        for i in range(600):  # let per-call caches fill with tracing on
            step(i)
        gc.collect()
        first = tracemalloc.take_snapshot()
        for i in range(calls):
            step(i)
        gc.collect()
        second = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    filters = [tracemalloc.Filter(False, tracemalloc.__file__)]
    diff = second.filter_traces(filters).compare_to(first.filter_traces(filters), "lineno")
    grown = sum(d.size_diff for d in diff if d.size_diff > 0)
    count = sum(d.count_diff for d in diff if d.count_diff > 0)
    top = [str(d) for d in diff[:5]]
    # A leak of one small object per call would be >= 6,000 blocks and >= 190 KB.
    assert count < calls // 10 and grown < 64 * 1024, top
