"""Two Python threads calling bertembed at once against one after the other.

The kernel releases the GIL, so two single-threaded calls running in two
Python threads should take about as long as one call (on a machine with two
free cores), not twice as long. The two ways (the harness's case
``f32-ln-B16-S512``, ``num_threads=1`` each call) are timed interleaved by
the harness's ``time_interleaved`` in one process; prints the median wall
times and their ratio.

    python benchmarks/concurrency.py [--repeats N | --quick]
"""

from __future__ import annotations

import argparse
import threading

from bertembed._bench import cases, data, subject, timing

#: float32 + LayerNorm, B=16 S=512: a call of a few milliseconds.
CASE = cases.make_case("float32", True, 16, 512)


def measure(repeats: int = 9, calls: int = 10) -> dict[str, float]:
    """Median wall time of 2 x ``calls`` calls, sequential and in two threads.

    Parameters
    ----------
    repeats : int
        Samples of each way, interleaved.
    calls : int
        Calls per thread per sample (``num_threads=1`` each).

    Returns
    -------
    dict
        ``sequential_s``, ``concurrent_s`` and their ratio ``concurrent / sequential``.
    """
    inputs = data.make_inputs(CASE)
    layer = subject.bertembed_call(CASE, inputs, 1).layer

    def work() -> None:
        for _ in range(calls):
            layer(inputs.ids, inputs.segment_ids, num_threads=1)

    def sequential() -> None:
        work()
        work()

    def concurrent() -> None:
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    stats = timing.time_interleaved({"sequential": sequential, "concurrent": concurrent}, repeats, min_sample_s=0.0)
    s, c = stats["sequential"]["median_s"], stats["concurrent"]["median_s"]
    return {"sequential_s": s, "concurrent_s": c, "ratio": c / s}


def main() -> int:
    """Print the measurement."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--quick", action="store_true", help="3 repeats of 2 calls: a smoke test")
    args = parser.parse_args()
    repeats, calls = (3, 2) if args.quick else (args.repeats, 10)
    r = measure(repeats, calls)
    print(
        f"2 x {calls} calls (float32 + LayerNorm, B=16 S=512 H=768, num_threads=1 each): "
        f"one after the other {r['sequential_s'] * 1e3:.1f} ms, in two threads at once "
        f"{r['concurrent_s'] * 1e3:.1f} ms: ratio {r['ratio']:.2f} (1.0 = no overlap, 0.5 = perfect)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
