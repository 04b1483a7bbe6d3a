"""What converting a big token table costs: time and peak memory, vs ``np.copy``.

Writes (once) the harness's synthetic checkpoint shaped like XLM-R's
embeddings (``shared.checkpoint``, beside this script): a 250,002 x 768 float32 token
table (732 MiB), 514 positions, 1 token type, LayerNorm, in
``model.safetensors`` with an ``xlm-roberta`` config. Then, each in its own
fresh process (started by the harness) and in rotation for ``--rounds``
rounds:

- ``copy``: ``np.copy`` of the mapped token table (the yardstick);
- ``int8``, ``bfloat16``, ``float16``: ``BertEmbeddings(..., table_dtype=X)``
  built from the mapped tables, i.e. the kernel's conversion streamed from the
  memory-mapped checkpoint (what ``from_pretrained(..., table_dtype=X)`` and
  ``bertembed convert`` run);
- with ``--numpy``, ``numpy-int8`` and ``numpy-bfloat16``: the plain-NumPy
  conversion of earlier versions (tests/helpers/table_conversion.py), for comparison.

Before timing, each process maps the checkpoint and reads the whole token
table once through that same mapping, so the file's pages are resident and
counted in the baseline (ml_dtypes, when installed, is imported before the
clock starts too: a one-off cost of the process, not of the conversion).
The conversion runs once, timed by the harness's ``time_once``: wall time
(median over the processes) and CPU time (user + system, all threads; less
disturbed by a busy machine). Peak extra memory is the rise of the peak
resident set size (``VmHWM``) over that baseline (the harness's
``rss_peak``), i.e. everything the call allocated (Linux only). The goals:
time <= 2x ``copy``'s, peak extra memory <= the result's bytes + 64 MiB,
and for int8 time <= 1.5x ``copy``'s, one line per row kernel.

``--isa avx2,baseline`` runs each conversion once per row kernel
(``BERTEMBED_ISA``, set in its process; a kernel the CPU or the build lacks
is skipped): ``int8@avx2``, ... (``copy`` does not depend on it). The
JSON's ``goals`` has one line per conversion and kernel.

Usage::

    python benchmarks/table_conversion.py [--dir DIR] [--rounds 3] [--numpy] [--json OUT] [--vocab N] [--isa LIST]
    python benchmarks/table_conversion.py --quick      # BERT-base's table, one round: a smoke test
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

MODES = ("copy", "int8", "bfloat16", "float16")
NUMPY_MODES = ("numpy-int8", "numpy-bfloat16")
MIB = 1 << 20
SLACK = 64 * MIB
TIME_BOUND = 2.0
#: int8 conversion time / copy time, at most (for every row kernel).
INT8_BOUND = 1.5
HERE = Path(__file__).resolve().parent
#: The tests' directory: the plain-NumPy conversion's children get it on PYTHONPATH (``helpers``).
TESTS = HERE.parent / "tests"


def child(argv: list[str]) -> dict[str, Any]:
    """One measurement (``MODE DIR``), in this fresh process (``MODE`` may name a row kernel: ``int8@avx2``)."""
    from shared import memory

    from bertembed import BertEmbeddings
    from bertembed._bench import subject, timing
    from bertembed._core import _kernel

    mode, directory = argv
    mode, _, isa = mode.partition("@")
    running = str(_kernel.build_info()["isa"])
    if isa and running != isa:
        return {"mode": mode, "skipped": f"this process runs the {running} row kernel, not {isa}"}

    try:  # imported before the clock starts: a one-off cost (about 0.2 s), not the conversion's
        import ml_dtypes  # noqa: F401
    except ImportError:
        pass
    mapped = subject.layer_arrays(BertEmbeddings.from_pretrained(directory))
    tok = mapped.tok
    float(tok.sum(dtype=np.float64))  # every page of the table resident, through this mapping
    kw = {"ln_weight": mapped.ln_weight, "ln_bias": mapped.ln_bias, "ln_eps": mapped.ln_eps}
    if mode.startswith("numpy-"):
        from helpers.table_conversion import convert  # the child's PYTHONPATH has tests/

        def run() -> Any:
            return convert(tok, "float32", mode.removeprefix("numpy-"))
    elif mode == "copy":

        def run() -> Any:
            return np.copy(tok)
    else:

        def run() -> Any:
            return BertEmbeddings(tok, mapped.pos, mapped.seg, **kw, table_dtype=mode)

    once, peak = memory.rss_peak(lambda: timing.time_once(run))
    if peak is None:
        raise RuntimeError("no VmRSS/VmHWM in /proc/self/status")
    result = once.result
    if isinstance(result, BertEmbeddings):
        result_bytes = subject.layer_arrays(result).tok.nbytes
    elif isinstance(result, tuple):
        result_bytes = sum(x.nbytes for x in result if x is not None)
    else:
        result_bytes = result.nbytes
    return {
        "mode": mode,
        "isa": running,
        "seconds": once.wall_s,
        "user": once.user_s,
        "system": once.system_s,
        "extra": peak.extra_bytes,
        "result_bytes": result_bytes,
        "baseline_ok": peak.baseline_ok,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, help="where the checkpoint is (or is written); default a temporary one")
    parser.add_argument("--rounds", type=int, default=3, help="processes per mode (median time, largest peak)")
    parser.add_argument("--numpy", action="store_true", help="also the plain-NumPy conversion (slow, GiBs)")
    parser.add_argument("--json", type=Path, help="write every measurement here")
    parser.add_argument("--vocab", type=int, help="token rows of the checkpoint (default 250,002; --quick: 30,522)")
    parser.add_argument("--quick", action="store_true", help="BERT-base's 30,522 rows, one round: a smoke test")
    parser.add_argument(
        "--isa", help="comma-separated row kernels (BERTEMBED_ISA) to convert with, each in its processes"
    )
    args = parser.parse_args(argv)
    if not sys.platform.startswith("linux"):
        print("needs Linux (/proc/self/status)", file=sys.stderr)
        return 1
    from shared.checkpoint import write_checkpoint

    from bertembed import max_threads
    from bertembed._bench import cases, spawn

    modes: tuple[str, ...] = MODES + (NUMPY_MODES if args.numpy else ())
    isas = [x.strip() for x in (args.isa or "").split(",") if x.strip()]
    if isas:
        modes = ("copy", *(f"{m}@{isa}" for isa in isas for m in modes if m != "copy" and "numpy" not in m))
    rounds, vocab = (1, cases.BERT_BASE_VOCAB) if args.quick else (args.rounds, cases.BIG_VOCAB)
    vocab = args.vocab or vocab
    load_before = f"{os.getloadavg()[0]:.1f}"
    with tempfile.TemporaryDirectory() as tmp:
        directory = write_checkpoint(args.dir or Path(tmp) / "xlmr-embeddings", vocab=vocab)
        config = json.loads((directory / "config.json").read_text())
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for r, mode in spawn.in_rounds(modes, rounds):  # rotated
            isa = mode.partition("@")[2]
            env = {"BERTEMBED_ISA": isa} if isa else None
            paths = [str(HERE), *([str(TESTS)] if mode.startswith("numpy-") else [])]  # HERE: shared.memory
            got = spawn.run_function(f"{__file__}:child", [mode, str(directory)], env=env, paths=paths, timeout=1800)
            if "skipped" in got:
                print(f"round {r + 1}: {mode:18s} skipped: {got['skipped']}", file=sys.stderr)
                continue
            runs[mode].append(got)
            print(f"round {r + 1}: {mode:18s} {runs[mode][-1]['seconds']:.3f} s", file=sys.stderr)
    copy_s = statistics.median(x["seconds"] for x in runs["copy"])
    V, H = config["vocab_size"], config["hidden_size"]
    print(
        f"\ntable {V} x {H} float32 ({V * H * 4 / MIB:.0f} MiB), mapped; {max_threads()} threads; "
        f"{rounds} process(es) per mode"
    )
    copy_cpu = statistics.median(x["user"] + x["system"] for x in runs["copy"])
    print(f"load average before: {load_before}, after: {os.getloadavg()[0]:.1f}")
    if args.quick or vocab != cases.BIG_VOCAB:
        print("smoke test: not the 250,002-row table the goals are about; the verdicts below are not the goals'")
    print(
        f"{'mode':18s} {'median s':>9s} {'/ copy':>7s} {'cpu s':>7s} {'/ copy':>7s} {'peak extra MiB':>15s} "
        f"{'result MiB':>11s} {'bound MiB':>10s}  goals"
    )
    summary = {}
    goals = []
    for mode in modes:
        xs = runs[mode]
        if not xs:
            continue
        sec = statistics.median(x["seconds"] for x in xs)
        cpu = statistics.median(x["user"] + x["system"] for x in xs)
        extra = max(x["extra"] for x in xs)
        result = xs[0]["result_bytes"]
        bound = result + SLACK
        ratio = sec / copy_s
        met = (
            ""
            if mode == "copy" or mode.startswith("numpy")
            else (f"time {'met' if ratio <= TIME_BOUND else 'MISSED'}, memory {'met' if extra <= bound else 'MISSED'}")
        )
        if not all(x["baseline_ok"] for x in xs):
            met += " (baseline peak above RSS: memory figure unreliable)"
        print(
            f"{mode:18s} {sec:9.3f} {ratio:7.2f} {cpu:7.3f} {cpu / copy_cpu:7.2f} {extra / MIB:15.1f} "
            f"{result / MIB:11.1f} {bound / MIB:10.1f}  {met}"
        )
        if mode.partition("@")[0] == "int8":
            isa = xs[0]["isa"]
            goals.append(
                {
                    "key": f"int8-conversion-{INT8_BOUND:g}x-{isa}",
                    "text": f"int8 conversion of the token table, {isa} kernel: time / np.copy time",
                    "isa": isa,
                    "op": "<=",
                    "bound": INT8_BOUND,
                    "ratio": ratio,
                    "cpu_ratio": cpu / copy_cpu,
                    "met": ratio <= INT8_BOUND,
                }
            )
        summary[mode] = {
            "median_seconds": sec,
            "ratio_to_copy": ratio,
            "median_cpu_seconds": cpu,
            "peak_extra_bytes": extra,
            "result_bytes": result,
            "runs": xs,
        }
    print(f"\n{'goal':48s} {'/ copy':>7s} {'cpu / copy':>10s}  verdict")
    for g in goals:
        verdict = "(not judged: smoke test)" if args.quick else ("met" if g["met"] else "MISSED")
        print(f"{g['key'] + ' <= ' + format(g['bound'], 'g'):48s} {g['ratio']:7.2f} {g['cpu_ratio']:10.2f}  {verdict}")
    if args.json:
        out = {"threads": max_threads(), "rounds": rounds, "modes": summary, "goals": goals}
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
