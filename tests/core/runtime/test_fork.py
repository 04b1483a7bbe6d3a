"""Fork safety: a forked child computes correct results and never hangs.

GNU libgomp keeps one worker pool per calling thread. After ``fork()`` the
child has only the forking thread, but that thread's pool still lists the
parent's workers, so its next parallel region waits for them forever.
With libgomp, ``bertembed._core.runtime`` releases the forking thread's pool before
every fork (``os.register_at_fork``). LLVM's libomp restarts itself in the
child on its own, and releasing its pool before a fork crashes it, so with
libomp the handler does nothing. These tests fork after a real parallel
region (``num_threads=2``), from the main thread and from others, run
parallel regions after the fork in the child and in the parent, and kill the
child if it does not answer in time.

``test_child_hangs_without_the_fix`` is the control (libgomp): the same
script with the release disabled must hang, which shows the other tests can
fail.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import select
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from helpers.reference import reference

import bertembed
from bertembed._core import _kernel
from bertembed._core import runtime as _fork
from bertembed._core.runtime import openmp_runtime

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")

#: Seconds a child may take before it is considered hung (it needs ~0.1 s).
CHILD_TIMEOUT = 20.0

B, S, H, V, P = 8, 256, 64, 1000, 512


def _inputs():
    rng = np.random.default_rng(1234)
    tok = rng.standard_normal((V, H))
    pos = rng.standard_normal((P, H))
    seg = rng.standard_normal((2, H))
    ids = rng.integers(0, V, (B, S))
    sids = rng.integers(0, 2, (B, S))
    return ids, sids, tok, pos, seg


IDS, SIDS, TOK, POS, SEG = _inputs()
EXPECTED = reference(IDS, SIDS, TOK, POS, SEG)


def _compute(num_threads: int = 2) -> np.ndarray:
    return bertembed.bert_embeddings(IDS, SIDS, TOK, POS, SEG, num_threads=num_threads)


def _parallel_region_in_parent() -> None:
    """Run a real parallel region in the calling thread and check its result."""
    np.testing.assert_allclose(_compute(2), EXPECTED, rtol=1e-12, atol=1e-12)


def _read_with_deadline(fd: int, deadline: float) -> bytes | None:
    """Everything the child writes to ``fd`` until EOF, or None at the deadline."""
    chunks = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return None
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def _in_child(body, timeout: float, what: str) -> bytes:
    """Fork; the child runs ``body()`` and sends the bytes it returns back.

    Fails the test (after killing the child) if the child does not finish
    within ``timeout`` seconds or exits abnormally.
    """
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: never return into pytest
        code = 1
        try:
            os.close(rfd)
            payload = body()
            with os.fdopen(wfd, "wb") as f:
                f.write(payload)
            code = 0
        except BaseException:
            code = 2
        finally:
            os._exit(code)
    os.close(wfd)
    try:
        data = _read_with_deadline(rfd, time.monotonic() + timeout)
    finally:
        os.close(rfd)
    if data is None:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        pytest.fail(f"{what} did not finish within {timeout} s (hung)")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"child failed, status {status}"
    return data


def _fork_and_compute() -> np.ndarray:
    """Fork; the child computes with num_threads=2 and sends the result back."""
    return pickle.loads(_in_child(lambda: pickle.dumps(_compute(2)), CHILD_TIMEOUT, "forked child"))


def test_fork_after_parallel_region():
    _parallel_region_in_parent()
    child = _fork_and_compute()
    np.testing.assert_allclose(child, EXPECTED, rtol=1e-12, atol=1e-12)
    # The parent's pool was released before the fork; it must work again.
    _parallel_region_in_parent()


def test_fork_twice_and_from_a_child_of_a_child():
    """Repeated forks, and a child that itself runs a parallel region and forks."""
    _parallel_region_in_parent()
    for _ in range(2):
        np.testing.assert_allclose(_fork_and_compute(), EXPECTED, rtol=1e-12, atol=1e-12)

    def child() -> bytes:
        _parallel_region_in_parent()
        grandchild = _fork_and_compute()
        np.testing.assert_allclose(grandchild, EXPECTED, rtol=1e-12, atol=1e-12)
        return b"ok"

    data = _in_child(child, 2 * CHILD_TIMEOUT, "child that forked a grandchild")
    assert data == b"ok"


def test_fork_from_a_thread_that_ran_a_parallel_region():
    """The at-fork hook runs in the forking thread, whose pool is the one that
    matters; both parent threads and the child run parallel regions afterwards."""
    result: dict[str, object] = {}

    def worker():
        try:
            _parallel_region_in_parent()
            result["child"] = _fork_and_compute()
            _parallel_region_in_parent()  # the forking thread, after the fork
        except BaseException as exc:
            result["error"] = exc

    _parallel_region_in_parent()  # the main thread has a pool too
    t = threading.Thread(target=worker)
    t.start()
    t.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    np.testing.assert_allclose(result["child"], EXPECTED, rtol=1e-12, atol=1e-12)
    _parallel_region_in_parent()  # the main thread, after another thread forked


def test_fork_handler_matches_the_runtime():
    """The pool is released before a fork with libgomp and any runtime it cannot
    tell (released if the runtime can), left alone with libomp and without OpenMP."""
    runtime = openmp_runtime()
    assert _fork.releases_before_fork() == (runtime not in ("libomp", "none")), runtime


@pytest.mark.skipif(not bertembed.openmp_enabled(), reason="built without OpenMP")
def test_unknown_runtime_that_cannot_release_falls_back_to_serial(monkeypatch):
    """A runtime bertembed cannot tell, whose pool cannot be released: the child
    computes with the serial kernel (right results, no hang), the parent keeps
    its threads."""
    monkeypatch.setattr(_fork, "openmp_runtime", lambda: "unknown")
    monkeypatch.setattr(_kernel, "release_threads", lambda: -1)
    assert _fork.releases_before_fork()
    _parallel_region_in_parent()

    def child() -> bytes:
        got = _compute(2)
        return pickle.dumps((_fork.serial_only(), got))

    serial, got = pickle.loads(_in_child(child, CHILD_TIMEOUT, "child of an unknown runtime"))
    assert serial
    np.testing.assert_allclose(got, EXPECTED, rtol=1e-12, atol=1e-12)
    assert not _fork.serial_only()
    _parallel_region_in_parent()


def _pool_task(seed: int) -> tuple[int, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, V, (B, S))
    return seed, bertembed.bert_embeddings(ids, SIDS, TOK, POS, SEG, num_threads=2)


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="no fork start method")
def test_multiprocessing_fork_pool():
    _parallel_region_in_parent()
    ctx = multiprocessing.get_context("fork")
    pool = ctx.Pool(2)
    try:
        pending = pool.map_async(_pool_task, range(6))
        try:
            results = pending.get(timeout=CHILD_TIMEOUT)
        except multiprocessing.TimeoutError:
            pytest.fail(f"fork Pool workers did not answer within {CHILD_TIMEOUT} s (hung)")
        pool.close()
    finally:
        pool.terminate()
        pool.join()
    assert [seed for seed, _ in results] == list(range(6))
    for seed, got in results:
        ids = np.random.default_rng(seed).integers(0, V, (B, S))
        np.testing.assert_allclose(got, reference(ids, SIDS, TOK, POS, SEG), rtol=1e-12, atol=1e-12)
    _parallel_region_in_parent()


# The control: one script, run with and without the pool release.
_SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time
    import numpy as np
    import bertembed
    from bertembed._core import _kernel

    if sys.argv[1] == "disable-fix":
        # _fork._before_fork looks up _kernel.release_threads at call time:
        # pretend the release happened (0) without releasing anything.
        _kernel.release_threads = lambda: 0
    rng = np.random.default_rng(0)
    tok = rng.standard_normal((1000, 64))
    pos = rng.standard_normal((512, 64))
    ids = rng.integers(0, 1000, (8, 256))
    expected = bertembed.bert_embeddings(ids, None, tok, pos, None, num_threads=2)
    pid = os.fork()
    if pid == 0:
        got = bertembed.bert_embeddings(ids, None, tok, pos, None, num_threads=2)
        os._exit(0 if np.array_equal(got, expected) else 3)
    deadline = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            print("EXIT", os.waitstatus_to_exitcode(status))
            break
        time.sleep(0.02)
    else:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        print("HANG")
    """
)


def _run_script(mode: str, wait: float) -> str:
    env = dict(os.environ)
    src = str(Path(bertembed.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    env.pop("OMP_NUM_THREADS", None)
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, mode, str(wait)],
        env=env,
        capture_output=True,
        text=True,
        timeout=wait + 60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.skipif(not bertembed.openmp_enabled(), reason="built without OpenMP")
def test_child_works_with_the_fix_in_a_fresh_process():
    assert _run_script("normal", CHILD_TIMEOUT) == "EXIT 0"


@pytest.mark.skipif(not bertembed.openmp_enabled(), reason="built without OpenMP")
@pytest.mark.skipif(openmp_runtime() != "libgomp", reason="the hang is specific to GNU libgomp")
def test_child_hangs_without_the_fix():
    """Without the release the child deadlocks: the fork tests above are meaningful."""
    # A healthy child answers in ~0.1 s; 5 s of silence is a hang.
    assert _run_script("disable-fix", 5.0) == "HANG"
