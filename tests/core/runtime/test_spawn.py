"""Spawned worker processes (Windows' and macOS's default start method, and
multiprocessing's "spawn" everywhere): each imports bertembed afresh, loads a
checkpoint and computes right results with its own OpenMP threads."""

from __future__ import annotations

import json
import multiprocessing

import numpy as np
import pytest
from helpers.reference import reference, tolerance
from helpers.weights import write_safetensors

import bertembed

V, P, H = 200, 64, 32


def _tables():
    rng = np.random.default_rng(7)
    tok, pos, seg = (rng.standard_normal((n, H)).astype(np.float32) for n in (V, P, 2))
    return tok, pos, seg, rng.uniform(0.5, 2, H).astype(np.float32), rng.standard_normal(H).astype(np.float32)


def _worker(args: tuple[str, int]) -> tuple[str, np.ndarray]:
    path, seed = args
    layer = bertembed.BertEmbeddings.from_pretrained(path)
    rng = np.random.default_rng(seed)
    ids, sids = rng.integers(0, V, (4, P)), rng.integers(0, 2, (4, P))
    return multiprocessing.current_process().name, layer(ids, sids, num_threads=2)


@pytest.mark.skipif("spawn" not in multiprocessing.get_all_start_methods(), reason="no spawn start method")
def test_spawned_workers_load_and_compute(tmp_path):
    tok, pos, seg, w, b = _tables()
    config = {"model_type": "bert", "layer_norm_eps": 1e-12, "hidden_size": H, "vocab_size": V}
    (tmp_path / "config.json").write_text(json.dumps({**config, "max_position_embeddings": P, "type_vocab_size": 2}))
    write_safetensors(
        tmp_path / "model.safetensors",
        {
            "embeddings.word_embeddings.weight": ("F32", tok),
            "embeddings.position_embeddings.weight": ("F32", pos),
            "embeddings.token_type_embeddings.weight": ("F32", seg),
            "embeddings.LayerNorm.weight": ("F32", w),
            "embeddings.LayerNorm.bias": ("F32", b),
        },
    )
    bertembed.bert_embeddings([[1, 2]], None, tok, pos, seg, num_threads=2)  # threads in the parent first
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.map(_worker, [(str(tmp_path), seed) for seed in range(4)], chunksize=1)
    assert len({name for name, _ in results}) >= 1
    for seed, (_, got) in enumerate(results):
        rng = np.random.default_rng(seed)
        ids, sids = rng.integers(0, V, (4, P)), rng.integers(0, 2, (4, P))
        want = reference(ids, sids, tok, pos, seg, ln_weight=w, ln_bias=b, dtype=np.float32)
        np.testing.assert_allclose(got, want, **tolerance(np.float32))
