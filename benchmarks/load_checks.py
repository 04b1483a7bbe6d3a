"""Time ``BertEmbeddings.from_pretrained`` under two source trees: the cost of the loader's checks.

Each contender runs in its own fresh processes (``PYTHONPATH=<tree>``), taking
turns, so that both see the same page cache and machine load. A process
imports bertembed (not timed), loads the checkpoint once to warm the page
cache and the imports, then times `--calls` loads; the figure per contender
is the median over all its timed loads, with the spread of the per-process
medians.

Usage::

    # a copy of another revision's sources, with this build's compiled kernel:
    git archive main src | tar -x -C /tmp/main-tree && cp src/bertembed/_kernel*.so /tmp/main-tree/src/bertembed/
    python benchmarks/load_checks.py --tree main=/tmp/main-tree/src --tree branch=src MODEL_DIR [MODEL_DIR ...]

    # a synthetic XLM-R-sized checkpoint (250,002 x 768 float32 token table, 734 MiB):
    python benchmarks/load_checks.py --make-xlmr /tmp/xlmr-250k
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

WORKER = r"""
import json, sys, time
import bertembed
path, calls = sys.argv[1], int(sys.argv[2])
bertembed.BertEmbeddings.from_pretrained(path)  # warm: imports, page cache
times = []
for _ in range(calls):
    t = time.perf_counter()
    layer = bertembed.BertEmbeddings.from_pretrained(path)
    times.append(time.perf_counter() - t)
    del layer
print(json.dumps({"file": bertembed.__file__, "times": times}))
"""


def make_xlmr(directory: Path, vocab: int = 250_002, hidden: int = 768, positions: int = 514) -> None:
    """A synthetic XLM-RoBERTa-shaped checkpoint (random float32 tables) and its config.json."""
    import numpy as np

    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    shapes = {
        "roberta.embeddings.word_embeddings.weight": (vocab, hidden),
        "roberta.embeddings.position_embeddings.weight": (positions, hidden),
        "roberta.embeddings.token_type_embeddings.weight": (1, hidden),
        "roberta.embeddings.LayerNorm.weight": (hidden,),
        "roberta.embeddings.LayerNorm.bias": (hidden,),
    }
    header, at = {}, 0
    for name, shape in shapes.items():
        n = 4 * int(np.prod(shape))
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [at, at + n]}
        at += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(directory / "model.safetensors", "wb") as fh:
        fh.write(len(text).to_bytes(8, "little") + text)
        for shape in shapes.values():
            rows = shape[0] if len(shape) == 2 else 1
            for start in range(0, rows, 16384):  # in chunks: never the whole table in memory
                k = min(16384, rows - start)
                chunk = rng.standard_normal((k, *shape[1:]) if len(shape) == 2 else shape).astype(np.float32)
                fh.write(chunk.tobytes())
    config = {"model_type": "xlm-roberta", "hidden_size": hidden, "vocab_size": vocab,
              "max_position_embeddings": positions, "type_vocab_size": 1, "pad_token_id": 1,
              "layer_norm_eps": 1e-5}
    (directory / "config.json").write_text(json.dumps(config))
    print(f"wrote {directory} ({(directory / 'model.safetensors').stat().st_size / 2**20:.0f} MiB)")


def run(tree: str, path: str, calls: int) -> dict:
    env = {**os.environ, "PYTHONPATH": tree}
    out = subprocess.run([sys.executable, "-c", WORKER, path, str(calls)], env=env, check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="*", help="model directories (or weights files)")
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=SRC",
                        help="a contender: its name and the directory that holds its bertembed package")
    parser.add_argument("--processes", type=int, default=10, help="fresh processes per contender (default 10)")
    parser.add_argument("--calls", type=int, default=20, help="timed loads per process (default 20)")
    parser.add_argument("--make-xlmr", type=Path, metavar="DIR", help="write the synthetic XLM-R checkpoint")
    args = parser.parse_args()
    if args.make_xlmr:
        make_xlmr(args.make_xlmr)
        if not args.models:
            return
    trees = dict(t.split("=", 1) for t in args.tree)
    if not trees or not args.models:
        parser.error("give at least one --tree NAME=SRC and one model")
    for model in args.models:
        per: dict[str, list[float]] = {name: [] for name in trees}
        medians: dict[str, list[float]] = {name: [] for name in trees}
        for _ in range(args.processes):
            for name, tree in trees.items():  # take turns
                result = run(str(Path(tree).resolve()), model, args.calls)
                assert result["file"].startswith(str(Path(tree).resolve())), result["file"]
                per[name].extend(result["times"])
                medians[name].append(statistics.median(result["times"]))
        print(f"\n{model}  ({args.processes} processes x {args.calls} loads per contender)")
        base = None
        for name in trees:
            med = statistics.median(per[name]) * 1e3
            lo, hi = min(medians[name]) * 1e3, max(medians[name]) * 1e3
            line = f"  {name:<12} median {med:8.3f} ms  (process medians {lo:.3f} .. {hi:.3f} ms)"
            if base is None:
                base = med
            else:
                line += f"  {med - base:+.3f} ms, {100 * (med - base) / base:+.1f}% vs {next(iter(trees))}"
            print(line)


if __name__ == "__main__":
    main()
