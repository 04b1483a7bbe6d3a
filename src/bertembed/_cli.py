"""The ``bertembed`` command line (stdlib argparse).

Subcommands: ``demo`` (the seed's sentence pair, step by step), ``info``
(this build: version, OpenMP, threads, compiler, dtypes), ``bench`` (the
comparison harness with a progress bar, a table, JSON and a plot) and
``embed`` (a checkpoint applied to a large id file in bounded memory, or to
one sentence pair tokenised with the model's ``tokenizer.json``).

Expected failures (a missing or malformed file, a bad id, a bad argument)
print one line, ``bertembed: error: ...``, on stderr and exit non-zero;
they never print a traceback.

This module holds the parser, :func:`main`, ``demo``, ``info`` and what the
subcommands share (:class:`CLIError`, :class:`ProgressBar`); ``bench`` is in
:mod:`bertembed._cli_bench` and ``embed`` in :mod:`bertembed._cli_embed`,
whose names are reachable from here too.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

import numpy as np

from ._api import bert_embeddings
from ._version import __version__

#: Exit status of a run that failed on bad input (files, ids, arguments).
EXIT_ERROR = 1
#: Exit status of a command line argparse could not make sense of.
EXIT_USAGE = 2
#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130

#: Exceptions that mean "bad input", reported in one line instead of a traceback.
EXPECTED_ERRORS = (OSError, ValueError, TypeError, IndexError, KeyError, ImportError)

#: The result size one ``embed`` chunk aims at when ``--chunk-rows`` is not given.
AUTO_CHUNK_BYTES = 64 << 20

# The seed's sentence pair "The cat sat" / "It slept", WordPiece ids of
# bert-base-uncased, with the seed's H = 4 rows for "cat" and "slept".
DEMO_TOKENS = ["[CLS]", "the", "cat", "sat", "[SEP]", "it", "slept", "[SEP]"]
DEMO_IDS = [101, 1996, 4937, 2938, 102, 2009, 14195, 102]
DEMO_SEGMENTS = [0, 0, 0, 0, 0, 1, 1, 1]


class CLIError(Exception):
    """A failure to report as ``bertembed: error: <message>``."""

    def __init__(self, message: str, status: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.status = status


# --------------------------------------------------------------------------
# progress bar


class ProgressBar:
    """A dependency-free progress bar on a text stream (stderr by default).

    On a terminal the bar is redrawn in place (at most ten times a second);
    anywhere else (a log file, a pipe) one line is written per tenth of the
    work, so logs stay short.

    Parameters
    ----------
    total : int
        The amount of work, in ``unit``.
    label : str, optional
        Text before the bar.
    unit : str, default "steps"
        What ``total`` counts, shown after the counts.
    stream : file-like, optional
        Where to draw; default ``sys.stderr``.
    enabled : bool, default True
        False draws nothing (``--quiet``).
    width : int, default 24
        Characters of the bar itself.

    Examples
    --------
    >>> import io
    >>> buf = io.StringIO()
    >>> bar = ProgressBar(4, label="demo", unit="rows", stream=buf)
    >>> for done in range(1, 5):
    ...     bar.update(done)
    >>> bar.close()
    >>> buf.getvalue().splitlines()[-1].split()[:3]
    ['demo', '[########################]', '100%']
    """

    def __init__(
        self,
        total: int,
        label: str = "",
        *,
        unit: str = "steps",
        stream: TextIO | None = None,
        enabled: bool = True,
        width: int = 24,
    ) -> None:
        self.total = max(int(total), 0)
        self.label = label
        self.unit = unit
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled
        self.width = width
        self.done = 0
        self._start = time.perf_counter()
        self._last_draw = -math.inf
        self._last_decile = -1
        self._closed = False
        try:
            self._tty = bool(self.stream.isatty())
        except (AttributeError, ValueError):
            self._tty = False

    def update(self, done: int, total: int | None = None, label: str | None = None) -> None:
        """Set the amount of work done (absolute, not an increment)."""
        if total is not None:
            self.total = max(int(total), 0)
        if label is not None:
            self.label = label
        self.done = min(max(int(done), 0), self.total) if self.total else int(done)
        if not self.enabled:
            return
        finished = self.total > 0 and self.done >= self.total
        if self._tty:
            now = time.perf_counter()
            if finished or now - self._last_draw >= 0.1:
                self._last_draw = now
                self.stream.write("\r" + self.render() + "\x1b[K")
                self.stream.flush()
        else:
            decile = 10 * self.done // self.total if self.total else 10
            if decile > self._last_decile:
                self._last_decile = decile
                self.stream.write(self.render() + "\n")
                self.stream.flush()

    def __call__(self, done: int, total: int, label: str = "") -> None:
        """The ``progress(done, total, label)`` callback of the benchmark harness."""
        self.update(done, total, label or None)

    def render(self) -> str:
        """The bar as one line of text."""
        frac = self.done / self.total if self.total else 1.0
        filled = round(frac * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self._start
        head = f"{self.label} " if self.label else ""
        return (
            f"{head}[{bar}] {100 * frac:3.0f}%  {self.done}/{self.total} {self.unit}"
            f"  {elapsed:.1f} s"
        )

    def close(self) -> None:
        """Finish the line (terminal) so later output starts on a new one."""
        if self._closed:
            return
        self._closed = True
        if self.enabled and self._tty:
            self.stream.write("\r" + self.render() + "\x1b[K\n")
            self.stream.flush()

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --------------------------------------------------------------------------
# shared by the subcommands


def _check_out_dir(out: Path, option: str = "--out") -> None:
    """Fail early (before any work) when ``out`` cannot be written as a file."""
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise CLIError(f"{option} {out}: the directory {parent} does not exist")
    if out.is_dir():
        raise CLIError(f"{option} {out}: is a directory, expected a file name")



# --------------------------------------------------------------------------
# demo


def _demo_tables(vocab: int = 30522, hidden: int = 4) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(0)
    tok = np.round(rng.uniform(-0.5, 0.5, (vocab, hidden)), 2)
    pos = np.round(rng.uniform(-0.3, 0.3, (512, hidden)), 2)
    seg = np.round(rng.uniform(-0.2, 0.2, (2, hidden)), 2)
    tok[4937] = [0.12, -0.45, 0.78, 0.33]
    tok[14195] = [-0.31, 0.56, 0.14, -0.27]
    pos[2] = [0.05, 0.11, -0.03, 0.22]
    pos[6] = [0.18, -0.07, 0.29, 0.03]
    seg[0] = [0.08, -0.14, 0.06, 0.19]
    seg[1] = [-0.11, 0.22, -0.09, 0.15]
    return tok, pos, seg


def _vec(values: Sequence[float], fmt: str = "+.2f") -> str:
    return "[" + ", ".join(f"{v:{fmt}}" for v in values) + "]"


def cmd_demo(args: argparse.Namespace) -> int:
    """Print the seed's sentence-pair example, row by row."""
    tok, pos, seg = _demo_tables()
    ids = np.array([DEMO_IDS])
    sids = np.array([DEMO_SEGMENTS])
    E = bert_embeddings(ids, sids, tok, pos, seg)
    positions = list(range(len(DEMO_IDS)))
    print('Sentence pair: "The cat sat" / "It slept"  (H = 4)')
    print(f"  token_ids    = {DEMO_IDS}")
    print(f"  position_ids = {positions}")
    print(f"  segment_ids  = {DEMO_SEGMENTS}")
    print()
    print(f"{'token':>8} {'token_id':>8} {'position':>8} {'segment':>7}  embedding")
    for s, name in enumerate(DEMO_TOKENS):
        print(f"{name:>8} {DEMO_IDS[s]:>8} {s:>8} {DEMO_SEGMENTS[s]:>7}  {_vec(E[0, s])}")
    print()
    print("[CLS] is in segment 0; positions run 0..7 across both sentences (no reset).")
    print("Each row is token + position + segment (a sum, not a concatenation):")
    print("  cat   = [0.12,-0.45,0.78,0.33] + [0.05,0.11,-0.03,0.22] + [0.08,-0.14,0.06,0.19]")
    print(f"        = {_vec(E[0, 2], '.2f')}")
    print("  slept = [-0.31,0.56,0.14,-0.27] + [0.18,-0.07,0.29,0.03] + [-0.11,0.22,-0.09,0.15]")
    print(f"        = {_vec(E[0, 6], '.2f')}")
    return 0


# --------------------------------------------------------------------------
# info


def cmd_info(args: argparse.Namespace) -> int:
    """Print what this build is and can do (``bertembed.show_config`` as a command)."""
    from ._config import config

    facts = config()
    if args.json:
        print(json.dumps(facts, indent=2, default=str))
        return 0
    width = max(len(key) for key in facts)
    for key, value in facts.items():
        print(f"{key + ':':<{width + 1}} {value}")
    return 0


# --------------------------------------------------------------------------
# parser and entry point


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The ``bertembed`` argument parser with its four subcommands."""
    parser = argparse.ArgumentParser(
        prog="bertembed",
        description="Fast, safe BERT input embeddings (token + position + segment, "
        "optional fused LayerNorm) on the CPU.",
        epilog="Run 'bertembed COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"bertembed {__version__}")
    from ._cli_bench import cmd_bench
    from ._cli_embed import cmd_embed

    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser(
        "demo",
        help="the seed's sentence-pair example, step by step",
        description='Embed the pair "The cat sat" / "It slept" with tiny H = 4 tables and '
        "print the token, position and segment ids and each summed row.",
    )
    demo.set_defaults(func=cmd_demo)

    info = sub.add_parser(
        "info",
        help="version, OpenMP, threads, compiler and dtypes of this build",
        description="Print what this build of bertembed is and can do.",
    )
    info.add_argument("--json", action="store_true", help="print the facts as JSON")
    info.set_defaults(func=cmd_info)

    bench = sub.add_parser(
        "bench",
        help="compare bertembed with NumPy, torch and ONNX Runtime",
        description="Time bertembed and each installed peer on random BERT-base-shaped "
        "tables (fixed seed) and print the medians as a table.",
    )
    bench.add_argument(
        "--repeats", type=_positive_int, metavar="N", help="timed calls per case (default 15)"
    )
    bench.add_argument(
        "--threads", type=_positive_int, metavar="T",
        help="threads for every contender (default: all cores)",
    )
    bench.add_argument(
        "--quick", action="store_true", help="few repeats (3): a smoke test, not a measurement"
    )
    bench.add_argument(
        "--cases", metavar="SUBSTR", help="run only the cases whose name contains SUBSTR"
    )
    bench.add_argument(
        "--peers", metavar="LIST",
        help="comma-separated peers to compare with (default: every installed one)",
    )
    bench.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    bench.add_argument(
        "--plot", type=Path, metavar="FILE.png",
        help="also draw time per call against batch size (needs matplotlib)",
    )
    bench.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    bench.set_defaults(func=cmd_bench)

    embed = sub.add_parser(
        "embed",
        help="embed a token id file (or a sentence pair) with a checkpoint",
        description="Apply the embedding layer of a Hugging Face BERT checkpoint "
        "(config.json + model.safetensors) to a .npy file of token ids, chunk by chunk "
        "(memory stays bounded by --chunk-rows), or to one sentence pair tokenised with "
        "the model's tokenizer.json.",
    )
    embed.add_argument(
        "--model", type=Path, required=True, metavar="DIR",
        help="checkpoint directory (config.json + model.safetensors) or .safetensors file",
    )
    embed.add_argument(
        "--ids", type=Path, metavar="FILE.npy", help="integer token ids, shape (B, S) or (S,)"
    )
    embed.add_argument(
        "--segment-ids", type=Path, metavar="FILE.npy",
        help="segment ids of the same shape (default: all 0)",
    )
    embed.add_argument(
        "--text-a", metavar="TEXT",
        help="instead of --ids: sentence A, tokenised with the model's tokenizer.json "
        "(needs the 'tokenizers' package)",
    )
    embed.add_argument("--text-b", metavar="TEXT", help="sentence B of the pair (segment 1)")
    embed.add_argument(
        "--out", type=Path, metavar="FILE.npy",
        help="where to write the result, shape ids.shape + (H,) (required with --ids)",
    )
    embed.add_argument(
        "--chunk-rows", type=_positive_int, metavar="N",
        help="sequences per chunk (default: about 64 MiB of result per chunk)",
    )
    embed.add_argument(
        "--dtype", choices=("float32", "float64"),
        help="result dtype (default: the checkpoint's, float32 for most)",
    )
    embed.add_argument(
        "--threads", type=_positive_int, metavar="T", help="OpenMP threads (default: automatic)"
    )
    embed.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    embed.set_defaults(func=cmd_embed)
    return parser


def _describe(exc: BaseException) -> str:
    """One line for an expected exception."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    if isinstance(exc, ImportError):
        return f"{exc} (an optional dependency is missing)"
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


def _fail(message: str, stream: TextIO | None = None) -> None:
    out = sys.stderr if stream is None else stream
    out.write(f"bertembed: error: {' '.join(message.split())}\n")
    out.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``bertembed`` command; return its exit status.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after the program name; default ``sys.argv[1:]``.

    Returns
    -------
    int
        0 on success, 1 when the input was bad (one ``bertembed: error:`` line
        on stderr), 2 for a command line that cannot be parsed, 130 after Ctrl-C.
        ``--help`` and ``--version`` exit 0 through ``SystemExit`` as usual.
    """
    args = build_parser().parse_args(None if argv is None else list(argv))
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return int(func(args))
    except CLIError as exc:
        _fail(str(exc))
        return exc.status
    except EXPECTED_ERRORS as exc:
        _fail(_describe(exc))
        return EXIT_ERROR
    except KeyboardInterrupt:
        _fail("interrupted")
        return EXIT_INTERRUPTED




if __name__ == "__main__":
    # ``python -m bertembed._cli``: run the package's copy of this module, the
    # one the subcommand modules import, so that main catches their CLIError.
    from ._cli import main as _package_main

    sys.exit(_package_main())
