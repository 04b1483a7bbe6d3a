"""The ``bertembed`` argument parser and :func:`main`: the top of the command line.

Each subcommand module registers its own options (``add_parser``); this
module puts them together and turns expected failures into one
``bertembed: error: ...`` line and an exit status.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
from collections.abc import Callable, Iterator, Sequence

from .._version import __version__
from . import bench, convert, demo, embed, export, info, serve, split_onnx, trim
from .common import EXIT_ERROR, EXIT_INTERRUPTED, EXPECTED_ERRORS, CLIError, describe, fail


def build_parser() -> argparse.ArgumentParser:
    """The ``bertembed`` argument parser with its subcommands."""
    parser = argparse.ArgumentParser(
        prog="bertembed",
        description="Fast, safe BERT input embeddings (token + position + segment, "
        "optional fused LayerNorm) on the CPU.",
        epilog="Run 'bertembed COMMAND --help' for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"bertembed {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (demo, info, bench, embed, convert, split_onnx, trim, export, serve):
        command.add_parser(sub)
    return parser


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

    Examples
    --------
    >>> main(["info", "--json"])  # doctest: +ELLIPSIS
    {
      "bertembed": ...
    }
    0
    """
    args = build_parser().parse_args(None if argv is None else list(argv))
    func: Callable[[argparse.Namespace], int] = args.func
    with _printable_output():
        try:
            return int(func(args))
        except CLIError as exc:
            fail(str(exc))
            return exc.status
        except EXPECTED_ERRORS as exc:
            fail(describe(exc))
            return EXIT_ERROR
        except KeyboardInterrupt:
            fail("interrupted")
            return EXIT_INTERRUPTED


@contextlib.contextmanager
def _printable_output() -> Iterator[None]:
    """stdout and stderr write what their encoding cannot hold as escapes.

    A console or pipe in a legacy code page (cp1252 on Windows) cannot encode
    the markers of byte-level and SentencePiece tokens ('\u0120', '\u2581'):
    ``embed --text`` would fail half-way through its table. Printed as
    ``\\u0120`` instead; streams already set to another error rule are left alone.
    """
    changed = []
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")
            changed.append(stream)
    try:
        yield
    finally:
        for stream in changed:
            stream.reconfigure(errors="strict")
