"""Fuzz targets for the checkpoint readers, one per reader, seeded from valid files.

Usage (from the repository root; ``tests/`` on ``PYTHONPATH`` for the
``helpers`` package)::

    PYTHONPATH=tests python tests/fuzz/fuzz_checkpoints.py TARGET -max_total_time=60          # atheris
    PYTHONPATH=tests python tests/fuzz/fuzz_checkpoints.py TARGET -max_total_time=60 corpus/  # with a corpus
    PYTHONPATH=tests python tests/fuzz/fuzz_checkpoints.py TARGET crash-<hash>                # replay one input

TARGET is one of ``safetensors`` (a safetensors file: header length, JSON
header, data), ``index`` (the ``*.index.json`` of a sharded checkpoint, next
to a valid shard), ``zip`` (a ``torch.save`` zip archive: its directory,
local headers and members), ``pickle`` (the ``data.pkl`` given to the
allow-list unpickler) and ``config`` (a model directory's ``config.json``,
next to valid weights). libFuzzer starts from the valid seeds of
:func:`seeds` and the inputs of :func:`edge_seeds` (valid or not, each
reaching a branch the valid seeds miss: other dtypes, byte orders, zip64
records, odd tensor forms, other model families...), written to the corpus
directory when it is empty, or from the corpus kept in the repository
(``tests/fuzz/corpus/<target>/``, replayed by
``tests/fuzz/test_fuzz_corpus.py``; ``tests/fuzz/campaign.py`` runs long
campaigns and grows it).

Without atheris (or with FUZZ_EMBED_HYPOTHESIS=1, or when GCC's ASan runtime
is preloaded, which leaves libFuzzer without coverage) hypothesis draws a
seed and a list of mutations (bit flips, interesting integers written over
length and offset fields, inserted and deleted ranges, deep brackets, long
digit strings, truncation) for ``-max_total_time`` seconds.
``tests/fuzz/test_fuzz_checkpoints_quick.py`` runs a few hundred cases of each
under pytest. A run ends by printing how many cases it ran and their
outcomes.

The oracle: reading the input (every name it lists is ``in`` it, a name it
does not list is a ``KeyError`` naming the file, and every float tensor of it
reads) either succeeds or raises one of the reader's documented errors (``ValueError``,
``KeyError`` for a tensor a shard or prefix lacks, ``TypeError`` for a
non-float dtype, ``FileNotFoundError`` / ``IsADirectoryError`` for a shard
that is missing or a directory) whose message names the file; anything
else (RecursionError, MemoryError, OverflowError, a crash, a case slower
than 10 s) is a failure. For safetensors, whatever the reader accepts must
also be recognised as safetensors by ``open_weights``.
"""

from __future__ import annotations

import atexit
import collections
import io
import json
import os
import struct
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np
from helpers.fuzzing import OutcomeLog, gcc_asan_preloaded, instrumented_bertembed, max_total_time
from helpers.time_bound import time_bound

try:  # atheris instruments the Python code it imports for coverage feedback
    import atheris
except ImportError:  # pragma: no cover - the hypothesis fallback
    atheris = None

if atheris is not None and __name__ == "__main__" and os.environ.get("FUZZ_EMBED_HYPOTHESIS") != "1":
    with instrumented_bertembed(atheris):
        import bertembed
        from bertembed._checkpoints.readers import SafetensorsFile, ShardedWeights, TorchZipFile, open_weights
        from bertembed._checkpoints.readers.torch_pickle import load_state_dict
else:
    import bertembed
    from bertembed._checkpoints.readers import SafetensorsFile, ShardedWeights, TorchZipFile, open_weights
    from bertembed._checkpoints.readers.torch_pickle import load_state_dict

from helpers.weights import ORDERED_DICT, Call, G, PersId, encode, state_dict, storage, tensor  # (imports bertembed)

TARGETS = ("safetensors", "index", "zip", "pickle", "config")
#: CPU seconds one case may take (a paused or loaded machine does not count).
CASE_SECONDS = 10
OUTCOMES: collections.Counter[str] = collections.Counter()
_OUTCOME_LOG = OutcomeLog(OUTCOMES)

H = 4
TABLES = {
    "embeddings.word_embeddings.weight": np.arange(6 * H, dtype=np.float32).reshape(6, H),
    "embeddings.position_embeddings.weight": np.ones((5, H), np.float32),
    "embeddings.token_type_embeddings.weight": np.zeros((2, H), np.float16),
    "embeddings.LayerNorm.weight": np.ones(H, np.float32),
    "embeddings.LayerNorm.bias": np.zeros(H, np.float32),
}
_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}
_STORAGES = {np.dtype(np.float32): "FloatStorage", np.dtype(np.float16): "HalfStorage"}


# ------------------------------------------------------------------ seeds


def safetensors_bytes(tables=TABLES, metadata: dict | None = None, pad: int = 8) -> bytes:
    header, chunks, at = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, arr in tables.items():
        raw = arr.tobytes()
        header[name] = {"dtype": _DTYPES[arr.dtype], "shape": list(arr.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % pad)
    return struct.pack("<Q", len(text)) + text + b"".join(chunks)


def pickle_bytes(tables=TABLES) -> tuple[bytes, dict[str, bytes]]:
    items, storages = {}, {}
    for i, (name, arr) in enumerate(tables.items()):
        items[name] = tensor(storage(str(i), arr.size, _STORAGES[arr.dtype]), arr.shape)
        storages[str(i)] = arr.tobytes()
    items["embeddings.position_ids"] = tensor(storage("ids", 5, "LongStorage"), (1, 5), (0, 1))
    storages["ids"] = np.arange(5, dtype=np.int64).tobytes()
    return encode(state_dict(items)), storages


def zip_bytes(
    tables=TABLES,
    compress_pickle: bool = False,
    *,
    pkl: bytes | None = None,
    storages: dict[str, bytes] | None = None,
    byteorder: bytes | None = b"little",
    compress_byteorder: bool = False,
) -> bytes:
    if pkl is None:
        pkl, storages = pickle_bytes(tables)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("archive/data.pkl", pkl, zipfile.ZIP_DEFLATED if compress_pickle else zipfile.ZIP_STORED)
        if byteorder is not None:
            zf.writestr("archive/byteorder", byteorder, zipfile.ZIP_DEFLATED if compress_byteorder else None)
        for key, data in (storages or {}).items():
            zf.writestr(f"archive/data/{key}", data)
        zf.writestr("archive/version", b"3\n")
    return out.getvalue()


def _zip64(data: bytes, count: int | None = None) -> bytes:
    """A zip archive's end records rewritten as zip64 ones (the entry count read from the zip64 record)."""
    at = data.rfind(b"PK\x05\x06")
    _, _, _, n, _, cd_size, cd_at, _ = struct.unpack_from("<4s4H2LH", data, at)
    n = n if count is None else count
    z64 = struct.pack("<4sQ2H2L4Q", b"PK\x06\x06", 44, 45, 45, 0, 0, n, n, cd_size, cd_at)
    locator = struct.pack("<4sLQL", b"PK\x06\x07", 0, at, 1)
    end = struct.pack("<4s4H2LH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, cd_size, cd_at, 0)
    return data[:at] + z64 + locator + end


def _header_only(text: bytes) -> bytes:
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text


def _odd_tensors() -> tuple[bytes, dict[str, bytes]]:
    """A state dict of the forms torch writes besides plain tensors, on the storages of :func:`pickle_bytes`."""
    s0 = storage("0", 24)
    items = {
        "t": tensor(s0, (H, 6), (1, H)),  # a transposed view
        "row": tensor(s0, (H,), (1,), offset=20),
        "empty": tensor(s0, (0, H)),
        "param": Call(G("torch._utils", "_rebuild_parameter"), (tensor(s0, (6, H)), False, Call(ORDERED_DICT, ()))),
        "v1": Call(G("torch._utils", "_rebuild_tensor"), (s0, 0, (6, H), (H, 1))),
        "bf16": tensor(storage("1", 40, "BFloat16Storage"), (5, 8)),
        "ids": tensor(storage("ids", 5, "LongStorage"), (1, 5), (0, 1)),
        "step": 7,
    }
    _, storages = pickle_bytes()
    return encode(state_dict(items)), {k: storages[k] for k in ("0", "1", "ids")}


def edge_seeds(target: str) -> list[bytes]:
    """Inputs (valid or not) that reach branches the valid seeds do not: kept in the corpus as ``edge-<n>``."""
    if target == "safetensors":
        f64 = np.arange(6, dtype=np.float64)
        header = {
            "f64": {"dtype": "F64", "shape": [2, 3], "data_offsets": [0, 48]},
            "bf16": {"dtype": "BF16", "shape": [4], "data_offsets": [48, 56]},
            "i64": {"dtype": "I64", "shape": [1], "data_offsets": [56, 64]},
            "odd": {"dtype": "X9", "shape": [3], "data_offsets": [64, 67]},
        }
        data = f64.tobytes() + np.arange(4, dtype=np.uint16).tobytes() + bytes(8) + b"xyz"
        return [
            _header_only(json.dumps(header).encode()) + data,
            _header_only(b"[]"),
            _header_only(json.dumps({"w": {"dtype": "F32", "shape": [1] * 33, "data_offsets": [0, 4]}}).encode())
            + bytes(4),
            _header_only(json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}).encode()),
        ]
    if target == "index":
        name = next(iter(TABLES))
        return [
            json.dumps({"weight_map": {"missing.weight": "s1.safetensors"}}).encode(),
            json.dumps({"weight_map": {name: "."}}).encode(),
            json.dumps({"weight_map": {name: "fuzz.index.json"}}).encode(),
            json.dumps({"weight_map": {name: "a" * 300 + ".safetensors"}}).encode(),
            json.dumps({"weight_map": {name: "../s1.safetensors"}}).encode(),
            json.dumps({"weight_map": [name]}).encode(),
            json.dumps({"weight_map": {name: "legacy.bin", "b": "short.bin", "c": "other.json"}}).encode(),
            json.dumps({"weight_map": {name: "archive.bin"}}).encode(),
            json.dumps({"weight_map": {name: "short.bin"}}).encode(),
            json.dumps({"weight_map": {name: "other.json"}}).encode(),
            json.dumps({"metadata": {"n": [[]] * 70}, "weight_map": {name: "s1.safetensors"}}).encode(),
        ]
    if target == "zip":
        pkl, storages = pickle_bytes()
        big = {
            k: np.frombuffer(v, np.float32 if k != "ids" else np.int64).byteswap().tobytes()
            for k, v in storages.items()
        }
        big["2"] = np.frombuffer(storages["2"], np.float16).byteswap().tobytes()
        odd_pkl, odd_storages = _odd_tensors()
        return [
            zip_bytes(pkl=pkl, storages=big, byteorder=b"big"),
            zip_bytes(pkl=pkl, storages=storages, byteorder=None),
            zip_bytes(pkl=pkl, storages=storages, compress_byteorder=True),
            zip_bytes(pkl=odd_pkl, storages=odd_storages),
            _zip64(zip_bytes()),
            _zip64(zip_bytes(), count=2**40),
            zip_bytes(pkl=pkl, storages=storages, byteorder=b"middle"),
            zip_bytes(pkl=encode(state_dict({"w": tensor(storage("0", 24), (6, H), (0, 1))})), storages=storages),
        ]
    if target == "pickle":
        s0 = storage("0", 24)
        odd_pkl, _ = _odd_tensors()
        return [
            odd_pkl,
            encode(state_dict({"outer": {"w": tensor(s0, (6, H))}})),
            encode(state_dict({7: tensor(s0, (6, H))})),
            encode(state_dict({"w": tensor(PersId(("storage", G("torch", "FloatStorage"), 0, "cpu", 24)), (6, H))})),
            encode(state_dict({"w": Call(G("torch._utils", "_rebuild_parameter"), (1, False, None))})),
            encode(state_dict({"w": tensor(s0, (0, 2**40))})),
            b"\x80\x02}X\x01\x00\x00\x00aL" + b"9" * 5000 + b"L\ns.",
            encode(state_dict({"w": tensor(PersId(("storage", "FloatStorage", "0", "cpu", 24)), (6, H))})),
            encode(state_dict({"w": tensor(storage("k" * 1001, 24), (6, H))})),
        ]
    if target == "config":
        return [
            json.dumps(c).encode()
            for c in (
                {"model_type": "roberta", "hidden_size": H, "pad_token_id": 3},  # one position left: refused
                {"model_type": "mpnet", "hidden_size": H, "pad_token_id": 0},
                {"model_type": "esm", "hidden_size": H, "pad_token_id": 1, "emb_layer_norm_before": False},
                {"model_type": "esm", "hidden_size": H, "position_embedding_type": "rotary", "pad_token_id": 1},
                {"model_type": "nystromformer", "hidden_size": H},
                {"model_type": "distilbert", "dim": H},
                {"model_type": "electra", "hidden_size": 8, "embedding_size": H},
                {"model_type": "roformer", "hidden_size": H, "embedding_size": None},
                {"model_type": "squeezebert", "hidden_size": H, "embedding_size": H},
                {"model_type": "big_bird", "hidden_size": H, "rescale_embeddings": False},
                {"model_type": "ernie", "hidden_size": H, "use_task_id": True},
                {"model_type": "deberta", "hidden_size": H, "position_biased_input": False, "type_vocab_size": 0},
                {"model_type": "megatron-bert", "hidden_size": H},
                {"model_type": "modernbert", "hidden_size": H, "norm_bias": True},
                {"model_type": "bert", "hidden_size": H, "position_embedding_type": "relative_key"},
                {"model_type": "bert", "hidden_size": H, "layer_norm_eps": 10**400},
                [1, 2],
                {"model_type": "bertembed"},  # a layer written by save_pretrained
                {
                    "model_type": "bertembed",
                    "hidden_size": H,
                    "vocab_size": 6,
                    "max_position_embeddings": 5,
                    "type_vocab_size": 2,
                    "task_type_vocab_size": 0,
                    "position_rule": "padding",
                    "position_offset": 0,
                    "padding_idx": 1,
                },
                {"model_type": "bert", "hidden_size": H, "id2label": [[]] * 70},  # many brackets, not deep
            )
        ]
    raise ValueError(f"unknown target {target!r} (one of {', '.join(TARGETS)})")


def seeds(target: str) -> list[bytes]:
    """Valid inputs for `target`."""
    if target == "safetensors":
        return [
            safetensors_bytes(),
            safetensors_bytes(metadata={"format": "pt"}),
            safetensors_bytes(pad=1),
            safetensors_bytes({"w": np.ones((0, 3), np.float32)}),
        ]
    if target == "index":
        names = list(TABLES)
        return [
            json.dumps(
                {"metadata": {"total_size": 200}, "weight_map": dict.fromkeys(names, "s1.safetensors")}
            ).encode(),
            json.dumps({"weight_map": {names[0]: "s1.safetensors", names[1]: "s2.safetensors"}}).encode(),
        ]
    if target == "zip":
        return [zip_bytes(), zip_bytes(compress_pickle=True)]
    if target == "pickle":
        return [pickle_bytes()[0]]
    if target == "config":
        return [
            json.dumps(c).encode()
            for c in (
                {"model_type": "bert", "hidden_size": H, "layer_norm_eps": 1e-12, "type_vocab_size": 2},
                {"model_type": "roberta", "hidden_size": H, "pad_token_id": 1, "layer_norm_eps": 1e-5},
                {"model_type": "deberta-v2", "hidden_size": H, "position_biased_input": True, "type_vocab_size": 2},
            )
        ]
    raise ValueError(f"unknown target {target!r} (one of {', '.join(TARGETS)})")


# ------------------------------------------------------------------ running one input


class Failure(AssertionError):
    """The oracle's verdict: the input made a reader misbehave."""


def _read_all(source) -> None:
    names = source.keys()
    if not all(name in source for name in names) or "\0(not a tensor name)" in source:
        raise Failure("keys() and `in` disagree")
    try:
        source.info("\0(not a tensor name)")
    except KeyError as exc:
        if str(source.path) not in str(exc):
            raise Failure(f"the KeyError for a missing tensor does not name the file: {exc}") from None
    else:
        raise Failure("info() of a missing tensor did not raise KeyError")
    for name in names:
        try:
            source.info(name)
            source.array(name)
        except TypeError as exc:  # a tensor that is not float
            if "has dtype" not in str(exc):
                raise


def _allowed(target: str) -> tuple[type[BaseException], ...]:
    if target == "pickle":
        return (ValueError,)
    if target == "safetensors":
        return (ValueError,)
    return (ValueError, KeyError, FileNotFoundError, IsADirectoryError)


class Workspace:
    """A temporary model directory, reused across cases."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="fuzz-checkpoints-"))
        (self.dir / "s1.safetensors").write_bytes(safetensors_bytes())
        (self.dir / "s2.safetensors").write_bytes(safetensors_bytes())
        (self.dir / "model.safetensors").write_bytes(safetensors_bytes())
        # files an index may name that are not safetensors shards
        (self.dir / "legacy.bin").write_bytes(pickle_bytes()[0])  # torch < 1.6: a bare pickle
        (self.dir / "short.bin").write_bytes(b"abc")
        (self.dir / "other.json").write_bytes(b'{"weight_map": {}}')
        (self.dir / "archive.bin").write_bytes(zip_bytes())
        atexit.register(self.clean)

    def clean(self) -> None:
        for p in self.dir.iterdir():
            p.unlink()
        self.dir.rmdir()


_WORKSPACE: Workspace | None = None


def _workspace() -> Workspace:
    global _WORKSPACE
    if _WORKSPACE is None:
        _WORKSPACE = Workspace()
    return _WORKSPACE


def _too_slow() -> Failure:
    return Failure(f"a case took more than {CASE_SECONDS} s of CPU time")


def run_one(target: str, data: bytes) -> str:
    """Read `data` as `target`; returns the outcome ("ok" or the error type), raises Failure."""
    ws = _workspace()
    where = {
        "safetensors": "fuzz.safetensors",
        "index": "fuzz.index.json",
        "zip": "fuzz.bin",
        "pickle": "x.bin",
        "config": "config.json",
    }[target]
    path = ws.dir / where
    if target != "pickle":
        path.write_bytes(data)
    with time_bound(CASE_SECONDS, _too_slow, clock="cpu"):
        try:
            if target == "safetensors":
                _read_all(SafetensorsFile(path))
                if not isinstance(open_weights(path), SafetensorsFile):
                    raise Failure("a file SafetensorsFile reads is not recognised as safetensors by open_weights")
            elif target == "index":
                _read_all(ShardedWeights(path))
            elif target == "zip":
                _read_all(TorchZipFile(path))
            elif target == "pickle":
                sizes = {k: len(v) for k, v in pickle_bytes()[1].items()}
                load_state_dict(data, "x.bin", sizes.get)
            else:
                layer = bertembed.BertEmbeddings.from_pretrained(ws.dir)
                layer(np.array([[0, 1, 2]]))
            outcome = "ok"
        except Failure:
            raise
        except _allowed(target) as exc:
            message = str(exc)
            if where not in message:
                raise Failure(f"{type(exc).__name__} does not name {where}: {message[:500]}") from exc
            if len(message) > 2000 or "int_max_str_digits" in message:
                raise Failure(f"an unbounded or unhelpful message: {message[:500]}") from exc
            outcome = type(exc).__name__
        except BaseException as exc:
            raise Failure(f"{type(exc).__name__} escaped the reader: {str(exc)[:500]}") from exc
    OUTCOMES[outcome] += 1
    _OUTCOME_LOG.tick()
    return outcome


# ------------------------------------------------------------------ mutations


INTERESTING = (
    0,
    1,
    7,
    8,
    0x7F,
    0x80,
    0xFF,
    0x100,
    0x7FFF,
    0xFFFF,
    0x04034B50,
    2**31 - 1,
    2**31,
    2**32 - 1,
    2**32,
    2**62,
    2**63 - 1,
    2**63,
    2**64 - 1,
)
SPLICES = (
    b"[" * 200,
    b'{"a":' * 100,
    b"9" * 5000,
    b"-",
    b"1e400",
    b"NaN",
    b'"',
    b"\\",
    b"\x00",
    b"\xff\xfe",
    b"(" * 50,
    b"\x85" * 200,
    b"PK\x03\x04",
    b"PK\x05\x06",
    b"ustar",
    b"\x80\x02",
    b"[0, 18446744073709551616]",
)


class Mutator:
    """Mutations of a seed, decided by a source of choices (`int(lo, hi)`)."""

    def __init__(self, draw_int) -> None:
        self.int = draw_int

    def mutate(self, data: bytes) -> bytes:
        buf = bytearray(data)
        for _ in range(self.int(0, 4)):
            kind = self.int(0, 7)
            at = self.int(0, max(len(buf) - 1, 0))
            if kind == 0 and buf:  # flip a bit
                buf[at] ^= 1 << self.int(0, 7)
            elif kind == 1:  # an interesting little-endian integer over 1, 2, 4 or 8 bytes
                width = (1, 2, 4, 8)[self.int(0, 3)]
                value = INTERESTING[self.int(0, len(INTERESTING) - 1)] % (1 << (8 * width))
                buf[at : at + width] = value.to_bytes(width, "little")
            elif kind == 2:  # insert a splice
                buf[at:at] = SPLICES[self.int(0, len(SPLICES) - 1)]
            elif kind == 3:  # delete a range
                del buf[at : at + self.int(1, 64)]
            elif kind == 4:  # truncate
                del buf[at:]
            elif kind == 5 and buf:  # duplicate a range
                end = min(len(buf), at + self.int(1, 256))
                buf[at:at] = buf[at:end]
            elif kind == 6:  # replace a decimal number in the text
                digits = str(INTERESTING[self.int(0, len(INTERESTING) - 1)]).encode()
                buf[at : at + self.int(1, 4)] = digits
            elif kind == 7 and buf:  # set a byte
                buf[at] = self.int(0, 255)
        return bytes(buf)


# ------------------------------------------------------------------ drivers


def hypothesis_run(target: str, budget: float, max_examples: int = 50) -> int:
    """Hypothesis draws a seed and mutations for `budget` seconds; returns the number of cases run."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    pool = seeds(target)

    def batch(examples: int) -> None:
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            derandomize=False,
            suppress_health_check=list(HealthCheck),
        )
        @given(st.data())
        def fuzz(data):
            seed = pool[data.draw(st.integers(0, len(pool) - 1))]
            mutator = Mutator(lambda lo, hi: data.draw(st.integers(lo, hi)))
            run_one(target, mutator.mutate(seed))

        fuzz()

    before = sum(OUTCOMES.values())
    start = time.monotonic()
    end = start + budget
    batch(max_examples if budget <= 0 else min(10, max_examples))
    while (now := time.monotonic()) < end:
        # batches sized to the time left, so the run ends close to its budget
        per_case = (now - start) / max(sum(OUTCOMES.values()) - before, 1)
        batch(max(1, min(max_examples, int((end - now) / per_case))))
    return sum(OUTCOMES.values()) - before


def print_stats(target: str, seconds: float | None = None, file=None) -> None:
    total = sum(OUTCOMES.values())
    out = file or sys.stdout
    took = f" in {seconds:.0f} s" if seconds is not None else ""
    print(f"fuzz_checkpoints {target}: {total} cases{took}", file=out)
    for name, k in OUTCOMES.most_common():
        print(f"  {name:<20} {k:>8}  {100.0 * k / max(total, 1):5.1f}%", file=out)


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        sys.exit(f"usage: {argv[0]} {{{','.join(TARGETS)}}} [-max_total_time=N] [corpus/ | crash-file]")
    target, rest = argv[1], [argv[0], *argv[2:]]
    use_hypothesis = atheris is None or os.environ.get("FUZZ_EMBED_HYPOTHESIS") == "1"
    if not use_hypothesis and gcc_asan_preloaded():
        print(
            "fuzz_checkpoints: GCC ASan runtime preloaded, atheris would get no coverage; using the hypothesis driver",
            file=sys.stderr,
        )
        use_hypothesis = True
    if use_hypothesis:
        budget = max_total_time(rest)
        start = time.monotonic()
        hypothesis_run(target, budget)
        print(f"fuzz_checkpoints {target} (hypothesis fallback): no failure")
        print_stats(target, time.monotonic() - start)
        return
    dirs = [a for a in rest[1:] if not a.startswith("-") and os.path.isdir(a)]
    for d in dirs:  # seed an empty corpus
        if not os.listdir(d):
            for i, seed in enumerate(seeds(target)):
                Path(d, f"seed-{i}").write_bytes(seed)
            for i, seed in enumerate(edge_seeds(target)):
                Path(d, f"edge-{i}").write_bytes(seed)
    atexit.register(print_stats, target, None, sys.stderr)  # (atheris.Fuzz() ends the process)
    atheris.Setup(rest, lambda data: run_one(target, data))
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
