"""Embed a corpus of token id files with Dask distributed and bertembed.

A ``LocalCluster`` of worker *processes* is started (and closed) here. The
embedding layer is loaded once from a checkpoint with
``BertEmbeddings.from_pretrained``: its tables are a read-only memory map of
``model.safetensors``, so the layer pickles as its path (a few hundred bytes,
checked below) and every worker maps the same file again; all processes
share one copy of the tables in the page cache.

Each corpus shard is a pair of ``.npy`` files (token ids and segment ids,
shape (rows, S)); each worker task embeds one shard and writes
``<shard>.emb.npy``.

Dask starts workers with ``OMP_NUM_THREADS=1``; the tasks pass
``num_threads`` explicitly so that the workers together use every core once
(``cpu_count // workers`` OpenMP threads each) instead of oversubscribing.

Run it::

    python examples/dask_embed.py                        # synthetic model and corpus
    python examples/dask_embed.py --model path/to/bert-base-uncased --shards 64 --rows 512

Needs ``dask[distributed]``; the synthetic checkpoint needs ``safetensors``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bertembed import BertEmbeddings

#: A loaded checkpoint must pickle to less than this; more means the tables
#: themselves would be shipped to every worker.
MAX_PICKLE_BYTES = 4096

Shard = tuple[Path, Path]


def make_checkpoint(
    directory: str | os.PathLike[str],
    *,
    vocab_size: int = 4096,
    max_positions: int = 128,
    type_vocab_size: int = 2,
    hidden_size: int = 64,
    seed: int = 0,
) -> Path:
    """Write a small random BERT checkpoint (config.json + model.safetensors).

    Parameters
    ----------
    directory : path-like
        Created if missing.
    vocab_size, max_positions, type_vocab_size, hidden_size : int
        Table shapes.
    seed : int
        Seed of the random tables.

    Returns
    -------
    pathlib.Path
        The model directory, ready for ``BertEmbeddings.from_pretrained``.
    """
    from safetensors.numpy import save_file

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    h = hidden_size
    tensors = {
        "embeddings.word_embeddings.weight": rng.standard_normal((vocab_size, h)),
        "embeddings.position_embeddings.weight": rng.standard_normal((max_positions, h)),
        "embeddings.token_type_embeddings.weight": rng.standard_normal((type_vocab_size, h)),
        "embeddings.LayerNorm.weight": 1.0 + 0.1 * rng.standard_normal(h),
        "embeddings.LayerNorm.bias": 0.1 * rng.standard_normal(h),
    }
    save_file({k: v.astype(np.float32) for k, v in tensors.items()}, path / "model.safetensors")
    config = {
        "model_type": "bert",
        "vocab_size": vocab_size,
        "max_position_embeddings": max_positions,
        "type_vocab_size": type_vocab_size,
        "hidden_size": hidden_size,
        "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute",
    }
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return path


def make_corpus(
    directory: str | os.PathLike[str],
    *,
    shards: int = 8,
    rows: int = 256,
    seq_len: int = 128,
    vocab_size: int = 4096,
    seed: int = 0,
) -> list[Shard]:
    """Write a synthetic corpus: ``shards`` pairs of int32 id files, (rows, seq_len) each.

    Every row looks like a BERT sentence pair: [CLS] (id 2) first, segment 0
    up to a random split point, segment 1 after it.

    Returns
    -------
    list of (pathlib.Path, pathlib.Path)
        ``(token_ids_file, segment_ids_file)`` per shard.
    """
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    corpus = []
    for k in range(shards):
        ids = rng.integers(5, vocab_size, size=(rows, seq_len), dtype=np.int32)
        ids[:, 0] = 2  # [CLS]
        split = rng.integers(1, seq_len, size=(rows, 1))
        segs = (np.arange(seq_len)[None, :] >= split).astype(np.int32)
        ids_path, seg_path = path / f"shard-{k:05d}.ids.npy", path / f"shard-{k:05d}.seg.npy"
        np.save(ids_path, ids)
        np.save(seg_path, segs)
        corpus.append((ids_path, seg_path))
    return corpus


def output_path(out_dir: str | os.PathLike[str], shard: Shard) -> Path:
    """Where the embeddings of ``shard`` go: ``<out_dir>/<shard>.emb.npy``."""
    name = shard[0].name.removesuffix(".ids.npy").removesuffix(".npy")
    return Path(out_dir) / f"{name}.emb.npy"


def embed_shard(
    layer: BertEmbeddings,
    ids_path: str | os.PathLike[str],
    seg_path: str | os.PathLike[str],
    out_path: str | os.PathLike[str],
    num_threads: int | None = None,
) -> dict[str, Any]:
    """Embed one shard and write it (atomically: a temporary file, then a rename).

    Runs in a worker process, or in this one for the single-process baseline.

    Returns
    -------
    dict
        ``path``, ``rows``, ``tokens``, ``seconds``, ``pid`` of the work done.
    """
    start = time.perf_counter()
    ids = np.load(ids_path, mmap_mode="r")
    segs = np.load(seg_path, mmap_mode="r")
    result = layer(ids, segs, num_threads=num_threads)
    out = Path(out_path)
    tmp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    with open(tmp, "wb") as fh:
        np.save(fh, result)
    os.replace(tmp, out)
    return {
        "path": str(out),
        "rows": int(ids.shape[0]),
        "tokens": int(ids.size),
        "seconds": time.perf_counter() - start,
        "pid": os.getpid(),
    }


def embed_local(
    layer: BertEmbeddings, corpus: Sequence[Shard], out_dir: str | os.PathLike[str]
) -> list[dict[str, Any]]:
    """The single-process baseline: every shard in this process, in order."""
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    return [embed_shard(layer, ids, seg, output_path(out_dir, (ids, seg))) for ids, seg in corpus]


def embed_distributed(
    model: str | os.PathLike[str],
    corpus: Sequence[Shard],
    out_dir: str | os.PathLike[str],
    *,
    workers: int = 2,
) -> dict[str, Any]:
    """Embed ``corpus`` on a ``LocalCluster`` of ``workers`` processes.

    The cluster is started and closed here. The layer is scattered once
    (broadcast to every worker); as a loaded checkpoint it travels as its path.

    Returns
    -------
    dict
        A summary: shards, rows, tokens, hidden_size, dtype, seconds (from
        scatter to the last result), cluster_seconds (starting the cluster),
        tokens_per_second, pickle_bytes, workers, worker_pids,
        threads_per_task, outputs.

    Raises
    ------
    RuntimeError
        The layer pickles to more than ``MAX_PICKLE_BYTES`` (its tables would
        be copied to every worker).
    """
    from dask.distributed import Client, LocalCluster

    layer = BertEmbeddings.from_pretrained(model)
    pickle_bytes = len(pickle.dumps(layer))
    if pickle_bytes > MAX_PICKLE_BYTES:
        raise RuntimeError(
            f"the layer pickles to {pickle_bytes} bytes: its tables would be shipped to "
            "every worker (load it with BertEmbeddings.from_pretrained)"
        )
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    threads = max(1, (os.cpu_count() or 1) // workers)
    t0 = time.perf_counter()
    with (
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        if __name__ != "__main__":
            # Imported as a module (by a test, say): the workers must be able
            # to import it by name too. (Run as a script, its functions travel
            # by value.)
            client.upload_file(__file__)
        started = time.perf_counter()
        [remote_layer] = client.scatter([layer], broadcast=True)
        futures = [
            client.submit(
                embed_shard,
                remote_layer,
                ids,
                seg,
                output_path(out_dir, (ids, seg)),
                threads,
                pure=False,
            )
            for ids, seg in corpus
        ]
        done = client.gather(futures)
        seconds = time.perf_counter() - started
    tokens = sum(d["tokens"] for d in done)
    return {
        "shards": len(done),
        "rows": sum(d["rows"] for d in done),
        "tokens": tokens,
        "hidden_size": layer.hidden_size,
        "dtype": str(layer.dtype),
        "seconds": seconds,
        "cluster_seconds": started - t0,
        "tokens_per_second": tokens / seconds if seconds > 0 else float("inf"),
        "pickle_bytes": pickle_bytes,
        "workers": workers,
        "worker_pids": sorted({d["pid"] for d in done}),
        "threads_per_task": threads,
        "outputs": [d["path"] for d in done],
    }


def run(
    model: str | os.PathLike[str] | None = None,
    *,
    shards: int = 8,
    rows: int = 256,
    seq_len: int = 128,
    workers: int = 2,
    work_dir: str | os.PathLike[str] | None = None,
    seed: int = 0,
) -> dict[str, Any]:
    """Make a corpus, embed it on a local Dask cluster, return the summary.

    Parameters
    ----------
    model : path-like, optional
        A BERT checkpoint directory; None writes a small synthetic one into
        ``work_dir``.
    shards, rows, seq_len : int
        Corpus size: ``shards`` files of ``rows`` sequences of ``seq_len`` ids.
    workers : int
        Worker processes of the ``LocalCluster``.
    work_dir : path-like, optional
        Where the model (if synthetic), the corpus (``corpus/``) and the
        results (``embeddings/``) go; None uses a new temporary directory,
        which is kept (its path is in the summary).
    seed : int
        Seed of the synthetic model and corpus.

    Returns
    -------
    dict
        :func:`embed_distributed`'s summary, plus ``model``, ``corpus_dir``
        and ``out_dir``.
    """
    base = Path(work_dir) if work_dir is not None else Path(tempfile.mkdtemp(prefix="bertembed-"))
    model_path = Path(model) if model is not None else make_checkpoint(base / "model", seed=seed)
    layer = BertEmbeddings.from_pretrained(model_path)
    if seq_len > layer.max_positions:
        raise ValueError(f"seq_len {seq_len} > the model's {layer.max_positions} positions")
    corpus = make_corpus(
        base / "corpus",
        shards=shards,
        rows=rows,
        seq_len=seq_len,
        vocab_size=layer.vocab_size,
        seed=seed,
    )
    summary = embed_distributed(model_path, corpus, base / "embeddings", workers=workers)
    summary.update(model=str(model_path), corpus_dir=str(base / "corpus"), out_dir=str(base / "embeddings"))
    return summary


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of the example; prints the summary as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="checkpoint directory (default: a synthetic one)")
    parser.add_argument("--shards", type=int, default=8, help="files in the corpus (default 8)")
    parser.add_argument("--rows", type=int, default=256, help="sequences per file (default 256)")
    parser.add_argument("--seq-len", type=int, default=128, help="ids per sequence (default 128)")
    parser.add_argument("--workers", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--work-dir", help="where corpus and results go (default: a temp dir)")
    args = parser.parse_args(argv)
    summary = run(
        args.model,
        shards=args.shards,
        rows=args.rows,
        seq_len=args.seq_len,
        workers=args.workers,
        work_dir=args.work_dir,
    )
    outputs = summary.pop("outputs")
    print(json.dumps(summary, indent=2))
    print(f"{len(outputs)} files in {summary['out_dir']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
