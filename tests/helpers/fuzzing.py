"""What the fuzz scripts (tests/fuzz/fuzz_*.py) share: their command line and runtime checks."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any


def max_total_time(argv: list[str], default: float = 60.0) -> float:
    """libFuzzer's ``-max_total_time=N`` from `argv` (seconds), or `default`."""
    for a in argv:
        if a.startswith("-max_total_time="):
            return float(a.split("=", 1)[1])
    return default


def gcc_asan_preloaded() -> bool:
    """GCC's libasan preloaded: it provides the coverage callbacks libFuzzer
    needs, so atheris runs blind (no corpus growth) and the hypothesis driver
    does better."""
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return False
    return "libasan.so" in maps and "clang" not in maps


@contextlib.contextmanager
def instrumented_bertembed(atheris: Any) -> Iterator[None]:
    """Import bertembed inside this block: atheris instruments it for coverage feedback.

    atheris instruments only what is first imported in the block; a module
    imported before (say by a test helper) stays blind, and libFuzzer then
    mutates without ever keeping an input. So bertembed must not be imported
    yet, and is refused if it is.
    """
    early = sorted(m for m in sys.modules if m == "bertembed" or m.startswith("bertembed."))
    if early:
        raise RuntimeError(
            f"bertembed was imported before atheris could instrument it ({', '.join(early[:3])}, ...): "
            "import the helpers that import it after this block"
        )
    with atheris.instrument_imports(include=["bertembed"]):
        yield


class OutcomeLog:
    """Writes a fuzz script's outcome counts to the file named by ``FUZZ_OUTCOMES_FILE``, every `every` cases.

    libFuzzer ends an interrupted run with ``_Exit`` (no ``atexit``), so a
    campaign (``tests/fuzz/campaign.py``) reads the counts from this file.
    Without the variable it does nothing.
    """

    def __init__(self, counts, every: int = 500) -> None:
        import os

        self.path = os.environ.get("FUZZ_OUTCOMES_FILE")
        self.counts = counts
        self.every = every
        self.seen = 0

    def tick(self) -> None:
        if self.path is None:
            return
        self.seen += 1
        if self.seen % self.every == 0:
            self.write()

    def write(self) -> None:
        import json
        import os

        if self.path is None:
            return
        tmp = f"{self.path}.tmp"
        with open(tmp, "w") as fh:
            json.dump(dict(self.counts), fh)
        os.replace(tmp, self.path)
