"""The per-case time bound: wall time (the hostile corpus) or CPU time (the fuzz targets)."""

from __future__ import annotations

import signal
import time

import pytest
from helpers.time_bound import time_bound

MECHANISMS = [
    pytest.param(True, id="setitimer", marks=pytest.mark.skipif(not hasattr(signal, "setitimer"), reason="Windows")),
    pytest.param(False, id="timer-thread"),
]


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.parametrize("timer_signal", MECHANISMS)
@pytest.mark.parametrize("clock", ["wall", "cpu"])
def test_a_block_that_computes_past_the_bound_is_stopped(timer_signal, clock):
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="slow"):
        with time_bound(0.2, lambda: TimeoutError("slow"), use_timer_signal=timer_signal, clock=clock):
            _spin(10)  # (bounded: without the bound the block ends after this)
    assert time.monotonic() - start < 5


@pytest.mark.parametrize("timer_signal", MECHANISMS)
def test_waiting_is_not_charged_to_a_cpu_bound(timer_signal):
    # What a paused (SIGSTOP) or starved process sees: time passes, no CPU is used.
    with time_bound(0.2, lambda: TimeoutError("slow"), use_timer_signal=timer_signal, clock="cpu"):
        time.sleep(0.6)


@pytest.mark.parametrize("timer_signal", MECHANISMS)
def test_waiting_is_charged_to_a_wall_bound(timer_signal):
    with pytest.raises(TimeoutError, match="slow"):
        with time_bound(0.2, lambda: TimeoutError("slow"), use_timer_signal=timer_signal, clock="wall"):
            for _ in range(60):
                time.sleep(0.05)  # (Python code between sleeps: the timer thread's interrupt lands there)


def test_an_unknown_clock_is_refused():
    with pytest.raises(ValueError, match="clock must be 'wall' or 'cpu', not 'monotonic'"):
        with time_bound(1, lambda: TimeoutError("slow"), clock="monotonic"):
            pass


def test_a_cpu_bound_off_the_main_thread_is_checked_at_the_end():
    import threading

    caught: list[BaseException] = []

    def body() -> None:
        try:
            with time_bound(0.05, lambda: TimeoutError("slow"), clock="cpu"):
                _spin(0.3)
        except TimeoutError as exc:
            caught.append(exc)

    t = threading.Thread(target=body)
    t.start()
    t.join()
    assert len(caught) == 1
