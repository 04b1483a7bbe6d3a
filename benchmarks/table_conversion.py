"""What converting a big token table costs: time and peak memory, vs ``np.copy``.

Writes (once) a checkpoint shaped like XLM-R's embeddings: a 250,002 x 768
float32 token table (732 MiB), 514 positions, 1 token type, LayerNorm, in
``model.safetensors`` with an ``xlm-roberta`` config. Then, each in its own
fresh process and in rotation for ``--rounds`` rounds:

- ``copy``: ``np.copy`` of the mapped token table (the yardstick);
- ``int8``, ``bfloat16``, ``float16``: ``BertEmbeddings(..., table_dtype=X)``
  built from the mapped tables, i.e. the kernel's conversion streamed from the
  memory-mapped checkpoint (what ``from_pretrained(..., table_dtype=X)`` and
  ``bertembed convert`` run);
- with ``--numpy``, ``numpy-int8`` and ``numpy-bfloat16``: the plain-NumPy
  conversion of earlier versions (tests/table_conversion.py), for comparison.

Before timing, each process maps the checkpoint and reads the whole token
table once through that same mapping, so the file's pages are resident and
counted in the baseline (ml_dtypes, when installed, is imported before the
clock starts too: a one-off cost of the process, not of the conversion).
Time is wall time (median); CPU time (user + system, all threads) is shown
too, as it is less disturbed by a busy machine. Peak extra memory is the rise of the peak resident
set size (``VmHWM``) over that baseline, i.e. everything the call allocated
(Linux only). The goals: time <= 2x ``copy``'s, peak extra memory <= the
result's bytes + 64 MiB.

Usage::

    python benchmarks/table_conversion.py [--dir DIR] [--rounds 3] [--numpy] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

V, P, H = 250_002, 514, 768
PREFIX = "roberta.embeddings."
MODES = ("copy", "int8", "bfloat16", "float16")
NUMPY_MODES = ("numpy-int8", "numpy-bfloat16")
MIB = 1 << 20
SLACK = 64 * MIB
TIME_BOUND = 2.0


def write_checkpoint(directory: Path) -> Path:
    """The XLM-R-shaped checkpoint (reused when already there)."""
    from bertembed._saved import write_safetensors

    weights = directory / "model.safetensors"
    if weights.exists() and (directory / "config.json").exists():
        return directory
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    tok = rng.standard_normal((V, H), dtype=np.float32)
    tok *= 0.05
    tensors = [
        (PREFIX + "word_embeddings.weight", "F32", tok),
        (PREFIX + "position_embeddings.weight", "F32", rng.standard_normal((P, H), dtype=np.float32) * 0.05),
        (PREFIX + "token_type_embeddings.weight", "F32", rng.standard_normal((1, H), dtype=np.float32) * 0.05),
        (PREFIX + "LayerNorm.weight", "F32", np.ones(H, np.float32)),
        (PREFIX + "LayerNorm.bias", "F32", np.zeros(H, np.float32)),
    ]
    write_safetensors(weights, tensors, {"format": "pt"})
    config = {"model_type": "xlm-roberta", "hidden_size": H, "vocab_size": V, "max_position_embeddings": P,
              "type_vocab_size": 1, "pad_token_id": 1, "layer_norm_eps": 1e-5}
    (directory / "config.json").write_text(json.dumps(config))
    return directory


def _status() -> tuple[int, int]:
    """(VmRSS, VmHWM) in bytes."""
    found = {}
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                found[key] = int(value.split()[0]) * 1024
    return found["VmRSS"], found["VmHWM"]


def child(mode: str, directory: str) -> None:
    """One measurement, in this (fresh) process; prints a JSON line."""
    from bertembed import BertEmbeddings

    try:  # imported before the clock starts: a one-off cost (about 0.2 s), not the conversion's
        import ml_dtypes  # noqa: F401
    except ImportError:
        pass
    mapped = BertEmbeddings.from_pretrained(directory)
    t = mapped._tables
    tok = t.tok.data
    float(tok.sum(dtype=np.float64))  # every page of the table resident, through this mapping
    args = (t.pos.data, t.seg.data)
    kw = {"ln_weight": t.ln[2], "ln_bias": t.ln[3], "ln_eps": t.eps}
    if mode.startswith("numpy-"):
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
        from table_conversion import convert

        def run():
            return convert(tok, "float32", mode.removeprefix("numpy-"))
    elif mode == "copy":
        def run():
            return np.copy(tok)
    else:
        def run():
            return BertEmbeddings(tok, *args, **kw, table_dtype=mode)

    rss, hwm = _status()
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    start = time.perf_counter()
    result = run()
    seconds = time.perf_counter() - start
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    user, system = cpu1.ru_utime - cpu0.ru_utime, cpu1.ru_stime - cpu0.ru_stime
    _, peak = _status()
    if isinstance(result, BertEmbeddings):
        result_bytes = result._tables.tok.nbytes
    elif isinstance(result, tuple):
        result_bytes = sum(x.nbytes for x in result if x is not None)
    else:
        result_bytes = result.nbytes
    print(json.dumps({"mode": mode, "seconds": seconds, "user": user, "system": system,
                      "extra": peak - max(rss, hwm), "result_bytes": result_bytes, "baseline_ok": hwm <= rss + MIB}))


def measure(mode: str, directory: Path) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", mode, str(directory)], capture_output=True,
                          text=True, timeout=1800, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{mode}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="where the checkpoint is (or is written); default a temporary one")
    parser.add_argument("--rounds", type=int, default=3, help="processes per mode (median time, largest peak)")
    parser.add_argument("--numpy", action="store_true", help="also the plain-NumPy conversion (slow, GiBs)")
    parser.add_argument("--json", type=Path, help="write every measurement here")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "DIR"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(*args.child)
        return 0
    if not sys.platform.startswith("linux"):
        print("needs Linux (/proc/self/status)", file=sys.stderr)
        return 1
    modes = MODES + (NUMPY_MODES if args.numpy else ())
    load_before = f"{os.getloadavg()[0]:.1f}"
    with tempfile.TemporaryDirectory() as tmp:
        directory = write_checkpoint(args.dir or Path(tmp) / "xlmr-embeddings")
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for r in range(args.rounds):
            for mode in modes[r % len(modes):] + modes[:r % len(modes)]:  # rotated
                runs[mode].append(measure(mode, directory))
                print(f"round {r + 1}: {mode:15s} {runs[mode][-1]['seconds']:.3f} s", file=sys.stderr)
    copy_s = statistics.median(x["seconds"] for x in runs["copy"])
    from bertembed import max_threads

    print(f"\ntable {V} x {H} float32 ({V * H * 4 / MIB:.0f} MiB), mapped; {max_threads()} threads; "
          f"{args.rounds} processes per mode")
    copy_cpu = statistics.median(x["user"] + x["system"] for x in runs["copy"])
    print(f"load average before: {load_before}, after: {os.getloadavg()[0]:.1f}")
    print(f"{'mode':15s} {'median s':>9s} {'/ copy':>7s} {'cpu s':>7s} {'/ copy':>7s} {'peak extra MiB':>15s} "
          f"{'result MiB':>11s} {'bound MiB':>10s}  goals")
    summary = {}
    for mode in modes:
        xs = runs[mode]
        sec = statistics.median(x["seconds"] for x in xs)
        cpu = statistics.median(x["user"] + x["system"] for x in xs)
        extra = max(x["extra"] for x in xs)
        result = xs[0]["result_bytes"]
        bound = result + SLACK
        ratio = sec / copy_s
        met = "" if mode == "copy" or mode.startswith("numpy") else (
            f"time {'met' if ratio <= TIME_BOUND else 'MISSED'}, memory {'met' if extra <= bound else 'MISSED'}")
        if not all(x["baseline_ok"] for x in xs):
            met += " (baseline peak above RSS: memory figure unreliable)"
        print(f"{mode:15s} {sec:9.3f} {ratio:7.2f} {cpu:7.3f} {cpu / copy_cpu:7.2f} {extra / MIB:15.1f} "
              f"{result / MIB:11.1f} {bound / MIB:10.1f}  {met}")
        summary[mode] = {"median_seconds": sec, "ratio_to_copy": ratio, "median_cpu_seconds": cpu,
                         "peak_extra_bytes": extra,
                         "result_bytes": result, "runs": xs}
    if args.json:
        args.json.write_text(json.dumps({"threads": max_threads(), "rounds": args.rounds, "modes": summary},
                                        indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
