"""How long another Python thread is held up while a function runs: does the function release the GIL?"""

from __future__ import annotations

import threading
import time


def longest_stall(fn) -> tuple[float, float]:
    """Run ``fn`` while another Python thread spins; return (duration, longest stall).

    The spinning thread needs the GIL for every iteration. The longest
    stretch inside ``fn``'s run during which it made no progress is close to
    the whole duration when ``fn`` holds the GIL, and short when it releases it.
    """
    stop = threading.Event()
    running = threading.Event()
    stalls: list[tuple[float, float]] = []

    def spinner():
        clock = time.perf_counter
        last = clock()
        running.set()
        while not stop.is_set():
            now = clock()
            if now - last > 0.001:
                stalls.append((last, now))
            last = now

    t = threading.Thread(target=spinner)
    t.start()
    running.wait()
    time.sleep(0.02)
    t0 = time.perf_counter()
    fn()
    t1 = time.perf_counter()
    stop.set()
    t.join()
    longest = max((min(b, t1) - max(a, t0) for a, b in stalls if b > t0 and a < t1), default=0.0)
    return t1 - t0, longest
