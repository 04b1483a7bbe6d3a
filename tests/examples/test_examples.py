"""The examples in examples/ run and give the same results as a single process."""

from __future__ import annotations

import importlib.util
import os
import pickle
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from helpers.paths import ROOT
from helpers.reference import reference, tolerance

import bertembed
from bertembed import BertEmbeddings

EXAMPLES = ROOT / "examples"
SRC = Path(bertembed.__file__).resolve().parent.parent


def load_example(name: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """Import ``examples/<name>.py`` as module ``name`` (registered in sys.modules)."""
    path = EXAMPLES / f"{name}.py"
    if not path.is_file():
        pytest.skip(f"{path} is not in this checkout")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def dask_embed(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    pytest.importorskip("distributed")
    pytest.importorskip("safetensors")
    # Worker processes are spawned: they must import this bertembed too.
    paths = [str(SRC), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    # distributed writes its workers' thread caps (OMP_NUM_THREADS=1 and the
    # like) into this process's environment; later tests must not inherit them.
    saved = dict(os.environ)
    yield load_example("dask_embed", monkeypatch)
    os.environ.clear()
    os.environ.update(saved)


def test_dask_embed_matches_single_process(dask_embed: ModuleType, tmp_path: Path) -> None:
    from safetensors.numpy import load_file

    model = dask_embed.make_checkpoint(tmp_path / "model", vocab_size=500, max_positions=32, hidden_size=16)
    corpus = dask_embed.make_corpus(tmp_path / "corpus", shards=6, rows=40, seq_len=32, vocab_size=500)
    summary = dask_embed.embed_distributed(model, corpus, tmp_path / "dask", workers=2)

    assert summary["shards"] == 6 and summary["rows"] == 240
    assert summary["tokens"] == 240 * 32 and summary["workers"] == 2
    assert 0 < summary["pickle_bytes"] < 1024  # the path travels, not the tables
    assert os.getpid() not in summary["worker_pids"]
    assert len(summary["outputs"]) == 6

    layer = BertEmbeddings.from_pretrained(model)
    local = dask_embed.embed_local(layer, corpus, tmp_path / "local")
    for remote_path, local_row in zip(summary["outputs"], local, strict=True):
        remote, single = np.load(remote_path), np.load(local_row["path"])
        assert remote.shape == (40, 32, 16) and remote.dtype == np.float32
        np.testing.assert_array_equal(remote, single)

    t = load_file(str(model / "model.safetensors"))
    ids, segs = (np.load(p) for p in corpus[0])
    assert ids[:, 0].tolist() == [2] * 40 and set(np.unique(segs)) <= {0, 1}
    ref = reference(
        ids,
        segs,
        t["embeddings.word_embeddings.weight"],
        t["embeddings.position_embeddings.weight"],
        t["embeddings.token_type_embeddings.weight"],
        ln_weight=t["embeddings.LayerNorm.weight"],
        ln_bias=t["embeddings.LayerNorm.bias"],
        dtype=np.float32,
    )
    np.testing.assert_allclose(np.load(summary["outputs"][0]), ref, **tolerance(np.float32))


def test_dask_embed_loaded_layer_pickles_as_its_path(dask_embed: ModuleType, tmp_path: Path) -> None:
    model = dask_embed.make_checkpoint(tmp_path / "m", vocab_size=5000, hidden_size=64)
    layer = BertEmbeddings.from_pretrained(model)
    data = pickle.dumps(layer)
    assert len(data) < dask_embed.MAX_PICKLE_BYTES < 5000 * 64 * 4
    again = pickle.loads(data)
    ids = np.arange(24).reshape(2, 12)
    np.testing.assert_array_equal(again(ids), layer(ids))


def test_dask_embed_run_with_a_synthetic_model(dask_embed: ModuleType, tmp_path: Path) -> None:
    summary = dask_embed.run(shards=3, rows=8, seq_len=16, workers=2, work_dir=tmp_path)
    assert summary["shards"] == 3 and summary["rows"] == 24
    assert Path(summary["model"], "model.safetensors").is_file()
    outputs = sorted(Path(summary["out_dir"]).glob("*.emb.npy"))
    assert [p.name for p in outputs] == [f"shard-{k:05d}.emb.npy" for k in range(3)]
    assert all(np.load(p).shape == (8, 16, 64) for p in outputs)
    with pytest.raises(ValueError, match="seq_len 200"):
        dask_embed.run(shards=1, rows=1, seq_len=200, work_dir=tmp_path / "long")
