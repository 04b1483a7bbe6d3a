"""What RoBERTa's position rule adds to a call.

Two layers share BERT-base-shaped float32 tables with LayerNorm: one numbers
positions 0..S-1 (BERT), the other by the padding rule (RoBERTa, XLM-R,
MPNet: computed from the ids at every call). Both are called on the same
batches (without pads, so that both read S consecutive position rows),
interleaved, in one process; the table gives medians and the added cost.
Issue 10 asks for less than 5%.

Usage::

    python benchmarks/positions.py [--repeats N] [--threads T]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from bertembed import BertEmbeddings

V, P, H = 30522, 514, 768
SHAPES = ((1, 128), (32, 512))


def sample(fn, min_seconds: float = 0.05) -> float:
    """Seconds per call: calls looped until a sample lasts `min_seconds`."""
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        elapsed = time.perf_counter() - start
        if elapsed >= min_seconds:
            return elapsed / n
        n *= 2


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--threads", type=int, default=None, help="num_threads (default: automatic)")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    tok, pos, seg = (rng.standard_normal((n, H), dtype=np.float32) for n in (V, P, 1))
    ln = {"ln_weight": np.ones(H, np.float32), "ln_bias": np.zeros(H, np.float32), "ln_eps": 1e-5}
    bert = BertEmbeddings(tok, pos, seg, **ln)
    roberta = BertEmbeddings(tok, pos, seg, position_rule="padding", padding_idx=1, **ln)
    print(f"{'shape':14s} {'absolute':>10s} {'padding':>10s} {'added':>8s}")
    for b, s in SHAPES:
        # No pads: both layers then read S consecutive rows of the position
        # table (0..S-1 and 2..S+1), so the difference is the cost of
        # numbering positions from the ids, not a different memory access.
        ids = rng.integers(2, V, (b, s))
        layers = {"absolute": bert, "padding": roberta}
        runs: dict[str, list[float]] = {name: [] for name in layers}
        for r in range(args.repeats):
            for name in sorted(layers, reverse=bool(r % 2)):
                layer = layers[name]
                runs[name].append(sample(lambda layer=layer, ids=ids: layer(ids, num_threads=args.threads)))
        a, p = (statistics.median(runs[k]) for k in ("absolute", "padding"))
        print(f"B={b:<3d} S={s:<6d} {a * 1e6:9.1f}us {p * 1e6:9.1f}us {100 * (p / a - 1):+7.1f}%")


if __name__ == "__main__":
    main()
