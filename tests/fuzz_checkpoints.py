"""Fuzz targets for the checkpoint readers, one per reader, seeded from valid files.

Usage::

    python tests/fuzz_checkpoints.py TARGET -max_total_time=60           # atheris (libFuzzer)
    python tests/fuzz_checkpoints.py TARGET -max_total_time=60 corpus/   # with a corpus dir
    python tests/fuzz_checkpoints.py TARGET crash-<hash>                 # replay one input

TARGET is one of ``safetensors`` (a safetensors file: header length, JSON
header, data), ``index`` (the ``*.index.json`` of a sharded checkpoint, next
to a valid shard), ``zip`` (a ``torch.save`` zip archive: its directory,
local headers and members), ``pickle`` (the ``data.pkl`` given to the
allow-list unpickler) and ``config`` (a model directory's ``config.json``,
next to valid weights). libFuzzer starts from the valid seeds of
:func:`seeds` (written to the corpus directory when it is empty).

Without atheris (or with FUZZ_EMBED_HYPOTHESIS=1, or when GCC's ASan runtime
is preloaded, which leaves libFuzzer without coverage) hypothesis draws a
seed and a list of mutations (bit flips, interesting integers written over
length and offset fields, inserted and deleted ranges, deep brackets, long
digit strings, truncation) for ``-max_total_time`` seconds.
``tests/test_fuzz_checkpoints_quick.py`` runs a few hundred cases of each
under pytest. A run ends by printing how many cases it ran and their
outcomes.

The oracle: reading the input (and every float tensor of it) either
succeeds or raises one of the reader's documented errors (``ValueError``,
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
import signal
import struct
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from weights_helpers import encode, state_dict, storage, tensor

try:  # atheris instruments the Python code it imports for coverage feedback
    import atheris
except ImportError:  # pragma: no cover - the hypothesis fallback
    atheris = None

if (atheris is not None and __name__ == "__main__"
        and os.environ.get("FUZZ_EMBED_HYPOTHESIS") != "1"):
    with atheris.instrument_imports(include=["bertembed"]):
        import bertembed
        from bertembed._weights import SafetensorsFile, ShardedWeights, TorchZipFile, open_weights
        from bertembed._weights.torch_pickle import load_state_dict
else:
    import bertembed
    from bertembed._weights import SafetensorsFile, ShardedWeights, TorchZipFile, open_weights
    from bertembed._weights.torch_pickle import load_state_dict

TARGETS = ("safetensors", "index", "zip", "pickle", "config")
#: Seconds one case may take.
CASE_SECONDS = 10
OUTCOMES: collections.Counter[str] = collections.Counter()

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


def zip_bytes(tables=TABLES, compress_pickle: bool = False) -> bytes:
    pkl, storages = pickle_bytes(tables)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("archive/data.pkl", pkl, zipfile.ZIP_DEFLATED if compress_pickle else zipfile.ZIP_STORED)
        zf.writestr("archive/byteorder", b"little")
        for key, data in storages.items():
            zf.writestr(f"archive/data/{key}", data)
        zf.writestr("archive/version", b"3\n")
    return out.getvalue()


def seeds(target: str) -> list[bytes]:
    """Valid inputs for `target`."""
    if target == "safetensors":
        return [safetensors_bytes(), safetensors_bytes(metadata={"format": "pt"}),
                safetensors_bytes(pad=1), safetensors_bytes({"w": np.ones((0, 3), np.float32)})]
    if target == "index":
        names = list(TABLES)
        return [
            json.dumps({"metadata": {"total_size": 200},
                        "weight_map": dict.fromkeys(names, "s1.safetensors")}).encode(),
            json.dumps({"weight_map": {names[0]: "s1.safetensors", names[1]: "s2.safetensors"}}).encode(),
        ]
    if target == "zip":
        return [zip_bytes(), zip_bytes(compress_pickle=True)]
    if target == "pickle":
        return [pickle_bytes()[0]]
    if target == "config":
        return [json.dumps(c).encode() for c in (
            {"model_type": "bert", "hidden_size": H, "layer_norm_eps": 1e-12, "type_vocab_size": 2},
            {"model_type": "roberta", "hidden_size": H, "pad_token_id": 1, "layer_norm_eps": 1e-5},
            {"model_type": "deberta-v2", "hidden_size": H, "position_biased_input": True, "type_vocab_size": 2},
        )]
    raise ValueError(f"unknown target {target!r} (one of {', '.join(TARGETS)})")


# ------------------------------------------------------------------ running one input


class Failure(AssertionError):
    """The oracle's verdict: the input made a reader misbehave."""


def _read_all(source) -> None:
    for name in source.keys():
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


def _alarm(signum, frame):
    raise Failure(f"a case took more than {CASE_SECONDS} s")


def run_one(target: str, data: bytes) -> str:
    """Read `data` as `target`; returns the outcome ("ok" or the error type), raises Failure."""
    ws = _workspace()
    where = {"safetensors": "fuzz.safetensors", "index": "fuzz.index.json", "zip": "fuzz.bin",
             "pickle": "x.bin", "config": "config.json"}[target]
    path = ws.dir / where
    if target != "pickle":
        path.write_bytes(data)
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
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
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    OUTCOMES[outcome] += 1
    return outcome


# ------------------------------------------------------------------ mutations


INTERESTING = (0, 1, 7, 8, 0x7F, 0x80, 0xFF, 0x100, 0x7FFF, 0xFFFF, 0x04034B50, 2**31 - 1, 2**31, 2**32 - 1,
               2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1)
SPLICES = (b"[" * 200, b"{\"a\":" * 100, b"9" * 5000, b"-", b"1e400", b"NaN", b"\"", b"\\", b"\x00", b"\xff\xfe",
           b"(" * 50, b"\x85" * 200, b"PK\x03\x04", b"PK\x05\x06", b"ustar", b"\x80\x02", b"[0, 18446744073709551616]")


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
                buf[at:at + width] = value.to_bytes(width, "little")
            elif kind == 2:  # insert a splice
                buf[at:at] = SPLICES[self.int(0, len(SPLICES) - 1)]
            elif kind == 3:  # delete a range
                del buf[at:at + self.int(1, 64)]
            elif kind == 4:  # truncate
                del buf[at:]
            elif kind == 5 and buf:  # duplicate a range
                end = min(len(buf), at + self.int(1, 256))
                buf[at:at] = buf[at:end]
            elif kind == 6:  # replace a decimal number in the text
                digits = str(INTERESTING[self.int(0, len(INTERESTING) - 1)]).encode()
                buf[at:at + self.int(1, 4)] = digits
            elif kind == 7 and buf:  # set a byte
                buf[at] = self.int(0, 255)
        return bytes(buf)


# ------------------------------------------------------------------ drivers


def _max_total_time(argv: list[str], default: float = 60.0) -> float:
    for a in argv:
        if a.startswith("-max_total_time="):
            return float(a.split("=", 1)[1])
    return default


def hypothesis_run(target: str, budget: float, max_examples: int = 50) -> int:
    """Hypothesis draws a seed and mutations for `budget` seconds; returns the number of cases run."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    pool = seeds(target)

    def batch(examples: int) -> None:
        @settings(max_examples=examples, deadline=None, database=None, derandomize=False,
                  suppress_health_check=list(HealthCheck))
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


def _gcc_asan_preloaded() -> bool:
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return False
    return "libasan.so" in maps and "clang" not in maps


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[1] not in TARGETS:
        sys.exit(f"usage: {argv[0]} {{{','.join(TARGETS)}}} [-max_total_time=N] [corpus/ | crash-file]")
    target, rest = argv[1], [argv[0], *argv[2:]]
    use_hypothesis = atheris is None or os.environ.get("FUZZ_EMBED_HYPOTHESIS") == "1"
    if not use_hypothesis and _gcc_asan_preloaded():
        print("fuzz_checkpoints: GCC ASan runtime preloaded, atheris would get no coverage; "
              "using the hypothesis driver", file=sys.stderr)
        use_hypothesis = True
    if use_hypothesis:
        budget = _max_total_time(rest)
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
    atexit.register(print_stats, target, None, sys.stderr)  # (atheris.Fuzz() ends the process)
    atheris.Setup(rest, lambda data: run_one(target, data))
    atheris.Fuzz()


if __name__ == "__main__":
    main(sys.argv)
