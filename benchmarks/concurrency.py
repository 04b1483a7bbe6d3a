"""Two Python threads calling bertembed at once against one after the other.

The kernel releases the GIL, so two single-threaded calls running in two
Python threads should take about as long as one call (on a machine with two
free cores), not twice as long. Prints the wall times and their ratio.

    python benchmarks/concurrency.py [--repeats N]
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

import numpy as np

from bertembed import BertEmbeddings


def _layer_and_ids() -> tuple[BertEmbeddings, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    h = 768
    layer = BertEmbeddings(
        rng.standard_normal((30522, h), dtype=np.float32),
        rng.standard_normal((512, h), dtype=np.float32),
        rng.standard_normal((2, h), dtype=np.float32),
        ln_weight=np.ones(h, np.float32),
        ln_bias=np.zeros(h, np.float32),
    )
    ids = rng.integers(0, 30522, (16, 512))
    sids = np.zeros_like(ids)
    return layer, ids, sids


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
    layer, ids, sids = _layer_and_ids()

    def work() -> None:
        for _ in range(calls):
            layer(ids, sids, num_threads=1)

    def sequential() -> None:
        work()
        work()

    def concurrent() -> None:
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    work()  # warm up
    seq, con = [], []
    for _ in range(repeats):
        for fn, out in ((sequential, seq), (concurrent, con)):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    s, c = statistics.median(seq), statistics.median(con)
    return {"sequential_s": s, "concurrent_s": c, "ratio": c / s}


def main() -> int:
    """Print the measurement."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    r = measure(args.repeats)
    print(
        f"2 x 10 calls (float32 + LayerNorm, B=16 S=512 H=768, num_threads=1 each): "
        f"one after the other {r['sequential_s'] * 1e3:.1f} ms, in two threads at once "
        f"{r['concurrent_s'] * 1e3:.1f} ms: ratio {r['ratio']:.2f} (1.0 = no overlap, 0.5 = perfect)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
