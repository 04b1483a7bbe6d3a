"""Replay fuzz inputs through their targets' oracles: the kept corpus, a campaign's, or single files.

Usage (from the repository root; ``tests/`` on ``PYTHONPATH`` for the
``helpers`` package, ``tests/fuzz/`` is the script's own folder)::

    PYTHONPATH=tests python tests/fuzz/replay.py                   # every target, tests/fuzz/corpus/<target>/
    PYTHONPATH=tests python tests/fuzz/replay.py zip config        # some targets
    PYTHONPATH=tests python tests/fuzz/replay.py zip --corpus DIR  # DIR/zip/ (a campaign's: DIR/zip/corpus/)
    PYTHONPATH=tests python -m coverage run --branch --source=bertembed tests/fuzz/replay.py  # what it reaches

Each input goes through the same oracle as in the fuzzers (``run_one`` of
``fuzz_checkpoints.py``, ``run_case`` of ``fuzz_embed.py``); the script
prints the outcomes per target and exits with status 1 if any input fails,
naming it. The ``embed`` inputs are libFuzzer bytes decoded by atheris'
``FuzzedDataProvider``: without atheris that target is skipped.
``tests/fuzz/test_fuzz_corpus.py`` runs this under pytest.
"""

from __future__ import annotations

import collections
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
READERS = ("config", "safetensors", "index", "zip", "pickle")
TARGETS = ("embed", *READERS)


def inputs(target: str, corpus: Path = CORPUS) -> list[Path]:
    """The files of `target`'s corpus under `corpus` (``corpus/target/``, or a campaign's ``corpus/target/corpus/``)."""
    where = corpus / target
    if (where / "corpus").is_dir():
        where = where / "corpus"
    if not where.is_dir():
        return []
    return sorted(p for p in where.iterdir() if p.is_file())


def embed_available() -> bool:
    try:
        import atheris  # noqa: F401
    except ImportError:
        return False
    return True


def run_input(target: str, data: bytes) -> str:
    """The outcome of one input ("ok" or an error type); raises what the oracle raises."""
    if target == "embed":
        import atheris
        import fuzz_embed

        with np.errstate(all="ignore"):
            return fuzz_embed.run_case(fuzz_embed.AtherisDraw(atheris.FuzzedDataProvider(data)))
    import fuzz_checkpoints

    return fuzz_checkpoints.run_one(target, data)


def replay(target: str, files: list[Path]) -> tuple[collections.Counter[str], list[str]]:
    """Outcomes of `files` as `target`, and one line per input the oracle rejected."""
    outcomes: collections.Counter[str] = collections.Counter()
    failures = []
    for path in files:
        try:
            outcomes[run_input(target, path.read_bytes())] += 1
        except Exception as exc:  # the oracle's verdict (Failure, AssertionError) or anything that escaped it
            failures.append(f"{path}: {type(exc).__name__}: {str(exc)[:500]}")
    return outcomes, failures


def main(argv: list[str]) -> int:
    corpus = CORPUS
    if "--corpus" in argv:
        at = argv.index("--corpus")
        corpus = Path(argv[at + 1])
        argv = argv[:at] + argv[at + 2 :]
    targets = argv or list(TARGETS)
    bad = 0
    for target in targets:
        if target not in TARGETS:
            sys.exit(f"unknown target {target!r} (one of {', '.join(TARGETS)})")
        if target == "embed" and not embed_available():
            print("embed: skipped (atheris is not installed)")
            continue
        files = inputs(target, corpus)
        outcomes, failures = replay(target, files)
        print(f"{target}: {len(files)} inputs, " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()))
        for line in failures:
            print(f"  FAILED {line}")
        bad += len(failures)
    return 1 if bad else 0


if __name__ == "__main__":
    os.environ.pop("FUZZ_OUTCOMES_FILE", None)
    sys.exit(main(sys.argv[1:]))
