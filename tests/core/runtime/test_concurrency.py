"""Concurrency stress: many threads at once on one shared layer and on everything else.

Every thread, started together behind a barrier, loops over five kinds of
work until a deadline, each result checked against the NumPy reference:

- ``function``: :func:`bertembed.bert_embeddings` on shared float64 tables
  (with and without LayerNorm);
- ``shared layer``: one :class:`bertembed.BertEmbeddings` used by every
  thread (plain calls, ``out=`` buffers, explicit ``position_ids``);
- ``new layer``: a layer created in the thread from the shared tables;
- ``from_pretrained``: a layer loaded in the thread from one checkpoint;
- ``bad ids``: an out-of-range id on the shared layer, which must raise
  IndexError while the others compute.

OpenMP thread counts vary per call (automatic, 1, 2), so OpenMP teams run
inside concurrent Python threads. Some results are large enough to come from
the result-buffer pool; each thread keeps its previous result and checks that
no other thread's call has written into it since.

``BERTEMBED_STRESS_SECONDS`` (default 3) sets the duration and
``BERTEMBED_STRESS_THREADS`` (default 8) the number of threads; the
free-threaded CI step runs it for a minute with 16 threads
(``.ci/freethreaded.sh``). The counts per kind are printed (``pytest -s``).
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import threading
import time
from collections import Counter

import numpy as np
import pytest
from helpers.reference import reference, result_tolerance
from helpers.weights import write_safetensors

import bertembed
from bertembed import BertEmbeddings

SECONDS = float(os.environ.get("BERTEMBED_STRESS_SECONDS", "3"))
THREADS = int(os.environ.get("BERTEMBED_STRESS_THREADS", "8"))
KINDS = ("function", "shared layer", "new layer", "from_pretrained", "bad ids")
V, P, T, H = 1000, 512, 2, 64
EPS = 1e-12
NAMES = {
    "tok": "embeddings.word_embeddings.weight",
    "pos": "embeddings.position_embeddings.weight",
    "seg": "embeddings.token_type_embeddings.weight",
    "w": "embeddings.LayerNorm.weight",
    "b": "embeddings.LayerNorm.bias",
}


class InFlight:
    """How many bertembed calls run at the same moment (the most seen)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.most = 0

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """Tables (float64, plus a float32 copy), the shared layer, a checkpoint of the float32 tables."""
    rng = np.random.default_rng(2024)
    t64 = {
        "tok": rng.standard_normal((V, H)),
        "pos": rng.standard_normal((P, H)),
        "seg": rng.standard_normal((T, H)),
        "w": 1.0 + 0.1 * rng.standard_normal(H),
        "b": 0.1 * rng.standard_normal(H),
    }
    t32 = {k: v.astype(np.float32) for k, v in t64.items()}
    for table in (*t64.values(), *t32.values()):
        table.flags.writeable = False  # shared: no thread may change them
    ckpt = tmp_path_factory.mktemp("checkpoint")
    write_safetensors(ckpt / "model.safetensors", {NAMES[k]: ("F32", v) for k, v in t32.items()})
    (ckpt / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": H, "layer_norm_eps": EPS}))
    layer = BertEmbeddings(t64["tok"], t64["pos"], t64["seg"], ln_weight=t64["w"], ln_bias=t64["b"], ln_eps=EPS)
    return t64, t32, layer, ckpt


def _inputs(r: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Ids of a random shape; one call in eight is large (a pooled result buffer)."""
    if r.integers(8) == 0:
        B, S = 8, int(r.integers(256, P + 1))
    else:
        B, S = int(r.integers(1, 9)), int(r.integers(1, 129))
    return r.integers(0, V, (B, S)), r.integers(0, T, (B, S))


def _work(
    i: int, shared, deadline: list[float], start: threading.Barrier, flight: InFlight, counts: Counter, errors: list
) -> None:
    t64, t32, layer, ckpt = shared
    r = np.random.default_rng(1000 + i)
    ln64 = {"ln_weight": t64["w"], "ln_bias": t64["b"], "ln_eps": EPS}
    ln32 = {"ln_weight": t32["w"], "ln_bias": t32["b"], "ln_eps": EPS}
    held: tuple[np.ndarray, np.ndarray] | None = None  # (result still held, its copy)
    start.wait()
    k = 0
    while k < len(KINDS) or time.perf_counter() < deadline[0]:
        kind = KINDS[(i + k) % len(KINDS)]
        k += 1
        ids, sids = _inputs(r)
        nt = (None, 1, 2)[int(r.integers(3))]
        try:
            if kind == "function":
                ln = ln64 if r.integers(2) else {}
                with flight:
                    got = bertembed.bert_embeddings(ids, sids, t64["tok"], t64["pos"], t64["seg"], **ln, num_threads=nt)
                want = reference(ids, sids, t64["tok"], t64["pos"], t64["seg"], **ln)
            elif kind == "shared layer":
                how = int(r.integers(3))
                pids = r.integers(0, P, ids.shape) if how == 2 else None
                out = np.empty((*ids.shape, H)) if how == 1 else None
                with flight:
                    got = layer(ids, sids, position_ids=pids, out=out, num_threads=nt)
                assert out is None or got is out
                want = reference(ids, sids, t64["tok"], t64["pos"], t64["seg"], position_ids=pids, **ln64)
            elif kind == "new layer":
                tables = t64 if r.integers(2) else t32
                with flight:
                    own = BertEmbeddings(
                        tables["tok"],
                        tables["pos"],
                        tables["seg"],
                        ln_weight=tables["w"],
                        ln_bias=tables["b"],
                        ln_eps=EPS,
                    )
                    got = own(ids, sids, num_threads=nt)
                want = reference(
                    ids,
                    sids,
                    tables["tok"],
                    tables["pos"],
                    tables["seg"],
                    ln_weight=tables["w"],
                    ln_bias=tables["b"],
                    ln_eps=EPS,
                    dtype=got.dtype,
                )
            elif kind == "from_pretrained":
                with flight:
                    loaded = BertEmbeddings.from_pretrained(ckpt)
                    got = loaded(ids, sids, num_threads=nt)
                want = reference(ids, sids, t32["tok"], t32["pos"], t32["seg"], dtype=np.float32, **ln32)
            else:
                bad = ids.copy()
                bad[-1, -1] = V
                with pytest.raises(IndexError, match=rf"out of range for .* with {V} rows"), flight:
                    layer(bad, sids, num_threads=nt)
                counts[kind] += 1
                continue
            assert got.shape == (*ids.shape, H)
            np.testing.assert_allclose(got, want, **result_tolerance(got.dtype))
            if held is not None:  # no later call (of any thread) wrote into it
                np.testing.assert_array_equal(held[0], held[1])
            held = (got, got.copy())
            counts[kind] += 1
        except BaseException as exc:
            errors.append((i, kind, repr(exc)[:2000]))
            return


def test_many_threads_one_layer_every_result_checked(shared):
    deadline = [0.0]
    start = threading.Barrier(THREADS, action=lambda: deadline.__setitem__(0, time.perf_counter() + SECONDS))
    flight = InFlight()
    counts = [Counter() for _ in range(THREADS)]
    errors: list = []
    threads = [
        threading.Thread(target=_work, args=(i, shared, deadline, start, flight, counts[i], errors))
        for i in range(THREADS)
    ]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - began
    total = sum(counts, Counter())
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    gil = sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True
    print(
        f"\nstress: {THREADS} threads, {took:.1f} s (asked {SECONDS:g} s); "
        + ", ".join(f"{kind} {total[kind]}" for kind in KINDS)
        + f"; errors {len(errors)}; at most {flight.most} calls at once; "
        + f"free-threaded build {free_threaded}, GIL enabled {gil}"
    )
    assert not errors, errors[:3]
    assert all(total[kind] >= THREADS for kind in KINDS), total
    # The threads did overlap: calls were in the extension at the same time.
    assert flight.most >= 2
