"""A time bound on a block of code, on every OS (the fuzz targets' and the hostile corpus's per-case limit).

The bound is on wall time (``clock="wall"``: the hostile corpus, whose FIFO
cases block in a system call) or on the process's CPU time (``clock="cpu"``:
the fuzz targets, whose cases are bytes in regular files, so that a hang is
a loop; a loaded or paused machine, e.g. a niced campaign beside other work
or one stopped with SIGSTOP, then never fails a case that merely waited).

With ``signal.setitimer`` (POSIX) the bound is an interval timer
(``ITIMER_REAL`` or ``ITIMER_PROF``) whose handler raises: the real-time one
also ends a system call that blocks (opening a FIFO). Without it (Windows) a
watching thread interrupts the main thread (``_thread.interrupt_main`` with a
SIGINT handler of this block that raises): the error comes as soon as the
main thread runs Python code again, so a case stuck inside one C call is
reported when that call returns. Off the main thread (no signal handlers
there) the block's time is checked when it ends.
"""

from __future__ import annotations

import _thread
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


def _pending_signals_run() -> None:
    """Entering a Python function runs the signal handlers that are due."""


def _signal_bound_possible() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def time_bound(
    seconds: float,
    error: Callable[[], BaseException],
    *,
    use_timer_signal: bool | None = None,
    clock: str = "wall",
) -> Iterator[None]:
    """Raise ``error()`` in the block if it runs longer than `seconds`.

    `clock` is ``"wall"`` or ``"cpu"`` (the process's user + system time).
    `use_timer_signal` chooses the mechanism (default: ``setitimer`` where
    ``signal`` has it); False takes the watching thread, as on Windows.

    Examples
    --------
    >>> with time_bound(5, lambda: TimeoutError("slow")):
    ...     pass
    >>> try:
    ...     with time_bound(0.05, lambda: TimeoutError("slow"), use_timer_signal=False):
    ...         while True:
    ...             pass
    ... except TimeoutError as exc:
    ...     print(exc)
    slow
    """
    if clock not in ("wall", "cpu"):
        raise ValueError(f"clock must be 'wall' or 'cpu', not {clock!r}")
    cpu = clock == "cpu"
    now = time.process_time if cpu else time.monotonic
    signame, timer_kind = ("SIGPROF", "ITIMER_PROF") if cpu else ("SIGALRM", "ITIMER_REAL")
    if use_timer_signal is None:
        use_timer_signal = hasattr(signal, "setitimer") and hasattr(signal, signame)
    state = {"active": True, "timed_out": use_timer_signal}
    lock = threading.Lock()

    def expire(signum: int, frame: Any) -> None:
        if not state["timed_out"]:  # a real Ctrl+C (the watching thread's path)
            raise KeyboardInterrupt
        if state["active"]:
            raise error()
        # else: the timer went off as the block ended; nothing to do

    start = now()
    if not _signal_bound_possible():
        try:
            yield
        finally:
            state["active"] = False
        if now() - start > seconds:
            raise error()
        return
    if use_timer_signal:
        signum, which = getattr(signal, signame), getattr(signal, timer_kind)
        previous = signal.signal(signum, expire)
        signal.setitimer(which, seconds)
        try:
            yield
        finally:
            state["active"] = False
            signal.setitimer(which, 0)
            signal.signal(signum, previous)
        return

    def interrupt() -> None:
        with lock:
            if state["active"]:
                state["timed_out"] = True
                _thread.interrupt_main()

    done = threading.Event()

    def watch() -> None:  # (either clock: look every tenth of the bound, at most every 0.1 s)
        while not done.wait(min(0.1, seconds / 10)):
            if now() - start > seconds:
                interrupt()
                return

    previous = signal.signal(signal.SIGINT, expire)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        with lock:
            state["active"] = False
        done.set()
        watcher.join()
        _pending_signals_run()  # (an interrupt issued just before the block ended meets `expire`, not `previous`)
        signal.signal(signal.SIGINT, previous)
