"""Behaviour under Python threads: correct results, GIL released, bounded OS threads.

Thread counts are read from ``/proc/self/task`` (Linux only). N Python
threads calling with ``num_threads=T`` run at most ``N * (T - 1)`` OpenMP
workers at once, whatever the runtime. What happens to the workers when a
calling thread exits depends on the runtime: GNU libgomp keeps one pool per
*calling* thread and frees it when that thread exits; LLVM's libomp returns
the workers to one pool of the process, where the next callers reuse them.
The tests check the bound for every runtime and each runtime's own lifetime.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.extras import why
from helpers.gil import longest_stall
from helpers.reference import reference

import bertembed
from bertembed._core.runtime import openmp_runtime

N_CALLERS = 8
HAVE_PROC_TASKS = os.path.isdir("/proc/self/task")
needs_proc = pytest.mark.skipif(not HAVE_PROC_TASKS, reason="needs /proc/self/task (Linux)")


def _os_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def _settle(limit: int) -> int:
    """The OS thread count once exiting threads have gone (at most ``limit``).

    ``Thread.join`` returns slightly before the OS thread disappears, so poll
    for a while; a generous deadline is only a guard against waiting forever.
    """
    deadline = time.monotonic() + 10.0
    n = _os_threads()
    while n > limit and time.monotonic() < deadline:
        time.sleep(0.01)
        n = _os_threads()
    return n


def _stable_count() -> int:
    """The OS thread count once it has stopped changing (threads of an
    earlier test may still be on their way out)."""
    deadline = time.monotonic() + 5.0
    last = [_os_threads()]
    while time.monotonic() < deadline:
        time.sleep(0.02)
        last.append(_os_threads())
        if len(last) >= 3 and last[-1] == last[-2] == last[-3]:
            break
    return last[-1]


def _run_threads(target, n: int) -> None:
    """Start ``n`` threads on ``target(i)``, join them, re-raise the first error."""
    errors: list[BaseException] = []

    def wrap(i):
        try:
            target(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=wrap, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


# --------------------------------------------------------------- correctness


def test_concurrent_calls_are_correct():
    """8 threads at once, each with its own inputs, through the function and one shared layer."""
    rng = np.random.default_rng(7)
    H = 48
    tok = rng.standard_normal((500, H))
    pos = rng.standard_normal((128, H))
    seg = rng.standard_normal((2, H))
    w = rng.standard_normal(H)
    b = rng.standard_normal(H)
    plain = bertembed.BertEmbeddings(tok, pos, seg)
    normed = bertembed.BertEmbeddings(
        tok.astype(np.float32),
        pos.astype(np.float32),
        seg.astype(np.float32),
        ln_weight=w,
        ln_bias=b,
        ln_eps=1e-5,
    )
    start = threading.Barrier(N_CALLERS)
    rounds = 12

    def caller(i):
        r = np.random.default_rng(100 + i)
        start.wait()
        for k in range(rounds):
            B, S = int(r.integers(1, 9)), int(r.integers(1, 129))
            ids = r.integers(0, 500, (B, S))
            sids = r.integers(0, 2, (B, S))
            nt = (None, 1, 2)[(i + k) % 3]
            which = (i + k) % 3
            if which == 0:
                got = bertembed.bert_embeddings(ids, sids, tok, pos, seg, num_threads=nt)
                np.testing.assert_allclose(got, reference(ids, sids, tok, pos, seg), rtol=1e-12, atol=1e-12)
            elif which == 1:
                got = plain(ids, sids, num_threads=nt)
                np.testing.assert_allclose(got, reference(ids, sids, tok, pos, seg), rtol=1e-12, atol=1e-12)
            else:
                out = np.empty((B, S, H), np.float32)
                got = normed(ids, sids, out=out, num_threads=nt)
                assert got is out
                ref = reference(
                    ids,
                    sids,
                    tok.astype(np.float32),
                    pos.astype(np.float32),
                    seg.astype(np.float32),
                    ln_weight=w,
                    ln_bias=b,
                    ln_eps=1e-5,
                    dtype=np.float32,
                )
                np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)

    _run_threads(caller, N_CALLERS)


def test_concurrent_errors_do_not_disturb_other_callers():
    """Threads raising IndexError while others compute: every good result still right."""
    rng = np.random.default_rng(3)
    tok = rng.standard_normal((64, 16))
    pos = rng.standard_normal((32, 16))
    layer = bertembed.BertEmbeddings(tok, pos)
    start = threading.Barrier(N_CALLERS)

    def caller(i):
        r = np.random.default_rng(i)
        start.wait()
        for _ in range(50):
            ids = r.integers(0, 64, (4, 32))
            if i % 2:
                ids[1, 3] = 64 + i
                with pytest.raises(IndexError, match=rf"token_ids\[1, 3\] = {64 + i} is out of range"):
                    layer(ids)
            else:
                np.testing.assert_allclose(
                    layer(ids, num_threads=2), reference(ids, None, tok, pos, None), rtol=1e-12, atol=1e-12
                )

    _run_threads(caller, N_CALLERS)


# --------------------------------------------------------------- GIL release


@pytest.mark.skipif(
    not getattr(sys, "_is_gil_enabled", lambda: True)(), reason="free-threaded build: there is no GIL to release"
)
def test_kernel_releases_the_gil():
    rng = np.random.default_rng(0)
    H = 256
    layer = bertembed.BertEmbeddings(
        rng.standard_normal((30522, H)),
        rng.standard_normal((512, H)),
        rng.standard_normal((2, H)),
        ln_weight=np.ones(H),
        ln_bias=np.zeros(H),
    )
    ids = rng.integers(0, 30522, (16, 512))
    out = np.empty((16, 512, H))

    def kernel():
        for _ in range(3):  # ~0.1 s of single-threaded kernel time
            layer(ids, out=out, num_threads=1)

    kernel()  # warm-up: page in the tables and `out`
    fractions = []
    for _ in range(5):
        duration, stall = longest_stall(kernel)
        fractions.append(stall / duration)
    # Control: a C loop that holds the GIL, of similar length.
    n = 1_000_000
    while True:
        t = time.perf_counter()
        sum(range(n))
        if time.perf_counter() - t > duration / 2 or n > 10**9:
            break
        n *= 2
    control = [(lambda d, s: s / d)(*longest_stall(lambda: sum(range(n)))) for _ in range(2)]
    assert max(control) > 0.5, f"the stall detector failed to see a GIL holder: {control}"
    assert min(fractions) < 0.5, f"another Python thread stalled for most of each kernel call: {fractions}"


# --------------------------------------------------------------- OS threads


def _count_while_alive(n: int, work, kept: int = 0) -> tuple[int, int, int]:
    """(before, while all n threads are alive after ``work``, after they exited).

    ``kept``: how many more threads than before may stay once they have
    exited (workers a runtime keeps for later callers).
    """
    before = _stable_count()
    done = threading.Barrier(n + 1)
    release = threading.Barrier(n + 1)

    def caller(i):
        try:
            work(i)
        finally:
            done.wait()
            release.wait()

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    done.wait()
    during = _os_threads()
    release.wait()
    for t in threads:
        t.join()
    return before, during, _settle(before + kept)


def _big_inputs():
    rng = np.random.default_rng(5)
    tok = rng.standard_normal((1000, 128))
    pos = rng.standard_normal((512, 128))
    batch = 8  # 262,144 elements: big enough for every thread of a parallel region to get rows
    ids = rng.integers(0, 1000, (batch, 256))
    return ids, tok, pos


@needs_proc
def test_single_threaded_calls_create_no_os_threads():
    ids, tok, pos = _big_inputs()
    expected = reference(ids, None, tok, pos, None)

    def work(i):
        for _ in range(5):
            got = bertembed.bert_embeddings(ids, None, tok, pos, None, num_threads=1)
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)

    before, during, after = _count_while_alive(N_CALLERS, work)
    # The callers themselves, and no OpenMP worker (a couple of spare for
    # noise either way: a thread of an earlier test may still be exiting).
    assert N_CALLERS - 2 <= during - before <= N_CALLERS + 2, (before, during)
    assert after <= before, (before, after)


@needs_proc
def test_small_automatic_calls_create_no_os_threads():
    rng = np.random.default_rng(6)
    tok, pos = rng.standard_normal((100, 32)), rng.standard_normal((64, 32))
    ids = rng.integers(0, 100, (2, 64))  # 4096 elements: one thread automatically

    def work(i):
        for _ in range(5):
            bertembed.bert_embeddings(ids, None, tok, pos, None)

    before, during, after = _count_while_alive(N_CALLERS, work)
    assert N_CALLERS - 2 <= during - before <= N_CALLERS + 2, (before, during)
    assert after <= before


@needs_proc
@pytest.mark.skipif(not bertembed.openmp_enabled(), reason="built without OpenMP")
@pytest.mark.parametrize("nt", [2, 3])
def test_worker_threads_are_bounded_per_caller(nt):
    ids, tok, pos = _big_inputs()
    expected = reference(ids, None, tok, pos, None)

    def work(i):
        for _ in range(10):  # repeated calls reuse the thread's pool
            got = bertembed.bert_embeddings(ids, None, tok, pos, None, num_threads=nt)
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)

    workers = N_CALLERS * (nt - 1)
    if openmp_runtime() == "libomp":
        # The callers' workers go back to the process's pool when they exit
        # and stay there; the next callers take them from it, so a second
        # round of callers never makes the process hold more.
        before, during, after = _count_while_alive(N_CALLERS, work, kept=workers)
        assert N_CALLERS <= during - before <= N_CALLERS + workers, (before, during)
        assert after <= before + workers, (before, after)
        _, again_during, again_after = _count_while_alive(N_CALLERS, work, kept=workers)
        assert again_during <= before + N_CALLERS + workers, (before, again_during)
        assert again_after <= before + workers, (before, again_after)
    else:
        # libgomp: each caller has its own pool, freed when the caller exits.
        before, during, after = _count_while_alive(N_CALLERS, work)
        assert N_CALLERS <= during - before <= N_CALLERS + workers, (before, during)
        assert after <= before, (before, after)


@needs_proc
@pytest.mark.skipif(not bertembed.openmp_enabled(), reason="built without OpenMP")
def test_automatic_threads_under_concurrency_are_bounded():
    """num_threads=None from N threads at once: never more than N x (T - 1) workers."""
    ids, tok, pos = _big_inputs()
    expected = reference(ids, None, tok, pos, None)
    limit = bertembed.max_threads()
    start = threading.Barrier(N_CALLERS)

    def work(i):
        start.wait()
        for _ in range(10):
            got = bertembed.bert_embeddings(ids, None, tok, pos, None)
            np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)

    before, during, after = _count_while_alive(N_CALLERS, work)
    assert N_CALLERS - 2 <= during - before <= N_CALLERS * limit, (before, during, limit)
    assert after <= before


# --------------------------------------------------------------- threadpoolctl


try:
    import threadpoolctl
except ImportError:  # pragma: no cover - part of the test extra
    threadpoolctl = None
needs_tpc = pytest.mark.skipif(threadpoolctl is None, reason=why("threadpoolctl", "test"))


def _runtime() -> str:
    libs = [i for i in threadpoolctl.threadpool_info() if i["internal_api"] == "openmp"]
    return libs[0]["prefix"] if libs else ""


@needs_tpc
@pytest.mark.skipif(not bertembed.openmp_enabled(), reason="built without OpenMP")
@pytest.mark.parametrize("user_api", [None, "openmp"])
def test_threadpool_limits_in_the_calling_thread(user_api):
    unrestricted = bertembed.max_threads()
    with threadpoolctl.threadpool_limits(limits=1, user_api=user_api):
        assert bertembed.max_threads() == 1
    assert bertembed.max_threads() == unrestricted


def _run_fresh(script: str, *args: str, **env_vars: str) -> str:
    """Run ``script`` in a fresh interpreter that imports this bertembed; its stdout."""
    # The OpenMP defaults of a fresh process, whatever this one inherited.
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OMP_", "GOMP_", "KMP_"))}
    env.update(env_vars)
    src = str(Path(bertembed.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    proc = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


_LIMITS_SCRIPT = """
import os, sys, threading
import numpy as np, threadpoolctl, bertembed
from bertembed._core import _kernel

def count():
    return len(os.listdir("/proc/self/task"))

rng = np.random.default_rng(5)
tok, pos = rng.standard_normal((1000, 128)), rng.standard_normal((512, 128))
ids = rng.integers(0, 1000, (8, 256))
expected = tok[ids] + pos[:256]
# The automatic choice at one thread per value: all allowed threads for this call.
_kernel.auto_threads_settings(1)
seen = {}

def work():
    # Several calls, each of which could start workers.
    for _ in range(6):
        if sys.argv[1] == "limited":
            with threadpoolctl.threadpool_limits(limits=1, user_api="openmp"):
                seen["max"] = bertembed.max_threads()
                got = bertembed.bert_embeddings(ids, None, tok, pos, None)
        else:
            seen["max"] = bertembed.max_threads()
            got = bertembed.bert_embeddings(ids, None, tok, pos, None)
        assert np.array_equal(got, expected)
    seen["during"] = count()

before = count()
t = threading.Thread(target=work)
t.start()
t.join()
print(seen["max"], seen["during"] - before)
"""


@needs_proc
@needs_tpc
@pytest.mark.skipif(not bertembed.openmp_enabled(), reason="built without OpenMP")
@pytest.mark.skipif(bertembed.max_threads() < 2, reason="needs an OpenMP maximum >= 2")
@pytest.mark.parametrize("limited", [True, False])
def test_threadpool_limits_keep_automatic_calls_serial(limited):
    """A new thread under threadpool_limits(1) starts no OpenMP worker; without it, it does.

    In a fresh process, which has no OpenMP worker yet whatever the runtime
    (libomp would otherwise hand the thread workers that earlier callers
    left in its pool, and start none).
    """
    most, started = map(int, _run_fresh(_LIMITS_SCRIPT, "limited" if limited else "free").split())
    if limited:
        assert most == 1
        assert started == 1, "a worker thread was started despite limits=1"
    else:
        assert most >= 2
        assert started == most, "expected max_threads() - 1 workers + the caller"


@needs_tpc
@pytest.mark.skipif(not bertembed.openmp_enabled(), reason="built without OpenMP")
def test_threadpool_limits_are_per_thread_with_libgomp():
    """Documents a libgomp property: limits set in one thread do not reach others.

    threadpoolctl calls ``omp_set_num_threads``, which sets the *calling*
    thread's ICV. A server must apply the limit in each request thread (or
    use OMP_NUM_THREADS / num_threads=) to cap every thread.
    """
    if _runtime() != "libgomp":
        pytest.skip("per-thread ICV behaviour checked for libgomp only")
    unrestricted = bertembed.max_threads()
    seen = {}
    with threadpoolctl.threadpool_limits(limits=1):
        t = threading.Thread(target=lambda: seen.setdefault("other", bertembed.max_threads()))
        t.start()
        t.join()
        assert bertembed.max_threads() == 1
    assert seen["other"] == unrestricted


_OMP_SCRIPT = """
import os, numpy as np, bertembed
rng = np.random.default_rng(0)
tok, pos = rng.standard_normal((1000, 128)), rng.standard_normal((512, 128))
ids = rng.integers(0, 1000, (4, 256))
before = len(os.listdir('/proc/self/task'))
bertembed.bert_embeddings(ids, None, tok, pos, None)
print(bertembed.max_threads(), len(os.listdir('/proc/self/task')) - before)
"""


@needs_proc
@pytest.mark.skipif(not bertembed.openmp_enabled(), reason="built without OpenMP")
def test_omp_num_threads_1_keeps_automatic_calls_serial():
    assert _run_fresh(_OMP_SCRIPT, OMP_NUM_THREADS="1").split() == ["1", "0"]


# ------------------------------------------------ rows shared among threads


@pytest.mark.parametrize("threads", [2, 3, 4])
def test_shared_rows_cover_every_row_once(threads):
    """A parallel call's rows are taken in chunks from a shared counter: every
    row count (below, at and above a chunk boundary, fewer rows than threads)
    writes every row of ``out`` (filled with NaN first) with its reference value."""
    rng = np.random.default_rng(threads)
    tok = rng.standard_normal((50, 24))
    pos = rng.standard_normal((1100, 24))
    for rows in (1, 2, 3, 7, 8, 9, 63, 64, 65, 127, 129, 513, 1031):
        ids = rng.integers(0, 50, (1, rows))
        out = np.full((1, rows, 24), np.nan)
        bertembed.bert_embeddings(ids, None, tok, pos, None, out=out, num_threads=threads)
        np.testing.assert_allclose(out, reference(ids, None, tok, pos, None), rtol=1e-12, atol=1e-12)
