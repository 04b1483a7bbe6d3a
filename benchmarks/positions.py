"""What RoBERTa's position rule adds to a call.

Two layers share BERT-base-shaped float32 tables with LayerNorm (the
harness's random tables, 514 position rows): one numbers positions 0..S-1
(BERT), the other by the padding rule (RoBERTa, XLM-R, MPNet: computed from
the ids at every call). Both are called on the same batches (without pads,
so that both read S consecutive position rows), timed interleaved by the
harness's ``time_interleaved`` in one process (bertembed against itself);
the table gives medians and the added cost. Issue 10 asks for less than 5%.

Usage::

    python benchmarks/positions.py [--repeats N | --quick] [--threads T]
"""

from __future__ import annotations

import argparse

import numpy as np

from bertembed import BertEmbeddings
from bertembed._bench import data, timing

SHAPES = ((1, 128), (32, 512))
#: Position rows of RoBERTa-style checkpoints (two are skipped by the padding rule).
POSITIONS = 514
#: The padding id of the padding rule; the ids timed never use it (or the id below it).
PAD = 1
#: Shortest timed sample.
SAMPLE_S = 0.05


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--quick", action="store_true", help="3 repeats of short samples: a smoke test")
    parser.add_argument("--threads", type=int, default=None, help="num_threads (default: automatic)")
    args = parser.parse_args()
    repeats, sample_s = (3, 0.005) if args.quick else (args.repeats, SAMPLE_S)
    cache: dict = {}
    layers: dict[str, BertEmbeddings] = {}
    print(f"{'shape':14s} {'absolute':>10s} {'padding':>10s} {'added':>8s}")
    for b, s in SHAPES:
        case = data.Case(f"positions-B{b}-S{s}", "float32", True, b, s, P=POSITIONS)
        inputs = data.make_inputs(case, 0, cache)  # the tables are the same for both shapes
        if not layers:
            ln = {"ln_weight": inputs.ln_weight, "ln_bias": inputs.ln_bias, "ln_eps": 1e-5}
            tables = (inputs.tok, inputs.pos, inputs.seg)
            layers["absolute"] = BertEmbeddings(*tables, **ln)
            layers["padding"] = BertEmbeddings(*tables, position_rule="padding", padding_idx=PAD, **ln)
        # No pads: both layers then read S consecutive rows of the position
        # table (0..S-1 and 2..S+1), so the difference is the cost of
        # numbering positions from the ids, not a different memory access.
        ids = np.where(inputs.ids <= PAD, inputs.ids + PAD + 1, inputs.ids)
        calls = {n: (lambda layer=layer, ids=ids: layer(ids, num_threads=args.threads)) for n, layer in layers.items()}
        stats = timing.time_interleaved(calls, repeats, min_sample_s=sample_s)
        a, p = stats["absolute"]["median_s"], stats["padding"]["median_s"]
        print(f"B={b:<3d} S={s:<6d} {a * 1e6:9.1f}us {p * 1e6:9.1f}us {100 * (p / a - 1):+7.1f}%")


if __name__ == "__main__":
    main()
