"""One-thread call time of builds, each forced to each instruction set it has.

For comparing the build the Windows wheels get with the Linux one here: the
MSVC-shaped build (``CFLAGS="-DBE_MSVC_SHAPE=1 -ffp-contract=off"``: no
vector extensions, no AVX-512 body, ``_mm_prefetch``; see
``.ci/msvc-shaped.sh``) against a plain GCC build, at every ``BERTEMBED_ISA``
cap. Each (tree, ISA) pair runs in fresh processes (``run_in_tree``), the
pairs taking turns (``in_rounds``); in each, the harness's
``time_interleaved`` times the float32 + LayerNorm case (BERT-base tables)
at one thread. Printed: the ISA the kernel took, the median of the
processes' medians, and each pair's time over the first pair's::

    python benchmarks/isa_builds.py --tree gcc=src --tree msvc=/tmp/msvc-tree/src
    python benchmarks/isa_builds.py --quick        # this tree, one round: a smoke test

A ``--tree`` is a directory holding a ``bertembed`` package with its
compiled kernel (``python setup.py build_ext --inplace`` in a copy of the
checkout, with the CFLAGS of the build to time). An ISA the build or the CPU
lacks is capped down by the kernel (the printed ISA says which ran).
"""

from __future__ import annotations

import argparse
import statistics

#: One process of one tree at one ISA cap (set in its environment).
_CHILD = """
import sys
from bertembed._bench import cases, data, subject
from bertembed._core import _kernel
case = cases.make_case("float32", True, int(sys.argv[1]), int(sys.argv[2]))
call = subject.bertembed_call(case, data.make_inputs(case, 0, {}), 1)
stats = timing.time_interleaved({"call": call}, int(sys.argv[3]))
emit({"isa": str(_kernel.build_info()["isa"]), "median_s": stats["call"]["median_s"]})
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", default=[], metavar="NAME=SRC", help="default: this one")
    parser.add_argument("--isa", default="avx512,avx2,baseline", help="BERTEMBED_ISA caps, comma-separated")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3, help="processes per pair, taking turns (default 3)")
    parser.add_argument("--repeats", type=int, default=15, help="samples per process (default 15)")
    parser.add_argument("--quick", action="store_true", help="one round of 3 samples: a smoke test")
    args = parser.parse_args()

    from shared.trees import run_in_tree

    from bertembed._bench import spawn

    trees = dict(t.split("=", 1) for t in args.tree) or {"this": spawn.package_root()}
    isas = [i.strip() for i in args.isa.split(",") if i.strip()]
    rounds, repeats = (1, 3) if args.quick else (args.rounds, args.repeats)
    pairs = [f"{tree}@{isa}" for tree in trees for isa in isas]
    medians: dict[str, list[float]] = {p: [] for p in pairs}
    took: dict[str, set[str]] = {p: set() for p in pairs}
    for _, pair in spawn.in_rounds(pairs, rounds):
        tree, isa = pair.split("@")
        got = run_in_tree(
            _CHILD,
            trees[tree],
            [str(args.batch), str(args.seq), str(repeats)],
            env={"BERTEMBED_ISA": isa, "OMP_NUM_THREADS": "1"},
        )
        medians[pair].append(got["median_s"])
        took[pair].add(got["isa"])
    print(f"float32 + LayerNorm, B={args.batch} S={args.seq} H=768, 1 thread; {rounds} process(es) per pair")
    print(f"{'build@cap':<24} {'ISA run':<12} {'median ms':>10} {'/ first':>8}")
    first = statistics.median(medians[pairs[0]])
    for pair in pairs:
        m = statistics.median(medians[pair])
        print(f"{pair:<24} {','.join(sorted(took[pair])):<12} {m * 1e3:10.3f} {m / first:8.2f}")


if __name__ == "__main__":
    main()
