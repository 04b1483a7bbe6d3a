"""A short run of each checkpoint-reader fuzz target under pytest (hypothesis drives it).

``tests/fuzz/fuzz_checkpoints.py`` explains the targets and the oracle; run it
directly (or through ``.ci/sanitize.sh``) for a long session.
"""

from __future__ import annotations

import pytest
from helpers.extras import needs

needs("hypothesis", "test")
import fuzz_checkpoints as fc  # noqa: E402


@pytest.mark.parametrize("target", fc.TARGETS)
def test_the_seeds_read_cleanly(target):
    for seed in fc.seeds(target):
        assert fc.run_one(target, seed) == "ok"


@pytest.mark.parametrize("target", fc.TARGETS)
def test_mutated_inputs_read_or_fail_cleanly(target):
    assert fc.hypothesis_run(target, budget=0, max_examples=60) >= 60


def test_the_oracle_rejects_an_escaping_error(monkeypatch):
    """The harness can fail: a reader raising RecursionError is reported."""

    def recurse(*args, **kwargs):
        raise RecursionError("deep")

    monkeypatch.setattr(fc, "load_state_dict", recurse)
    with pytest.raises(fc.Failure, match="RecursionError escaped the reader"):
        fc.run_one("pickle", fc.seeds("pickle")[0])


def test_the_oracle_rejects_a_message_without_the_file(monkeypatch):
    def anonymous(*args, **kwargs):
        raise ValueError("something is wrong")

    monkeypatch.setattr(fc, "load_state_dict", anonymous)
    with pytest.raises(fc.Failure, match=r"does not name x\.bin"):
        fc.run_one("pickle", fc.seeds("pickle")[0])


@pytest.mark.parametrize("timer_signal", [True, False], ids=["setitimer", "timer-thread"])
def test_the_oracle_rejects_a_slow_case(monkeypatch, timer_signal):
    """A case over the time bound fails, with SIGALRM (POSIX) and with the timer thread (Windows)."""
    import functools
    import signal
    import time

    from helpers.time_bound import time_bound

    if timer_signal and not hasattr(signal, "setitimer"):
        pytest.skip("no setitimer here (Windows)")

    def slow(*args, **kwargs):
        end = time.monotonic() + 10  # bounded: without the bound the case reads as "ok" after this
        while time.monotonic() < end:
            pass
        return {}

    monkeypatch.setattr(fc, "CASE_SECONDS", 0.2)
    monkeypatch.setattr(fc, "time_bound", functools.partial(time_bound, use_timer_signal=timer_signal))
    monkeypatch.setattr(fc, "load_state_dict", slow)
    start = time.monotonic()
    with pytest.raises(fc.Failure, match=r"a case took more than 0\.2 s"):
        fc.run_one("pickle", fc.seeds("pickle")[0])
    assert time.monotonic() - start < 5
