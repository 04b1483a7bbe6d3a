"""What every ``bertembed`` subcommand shares: errors, exit codes, a progress bar, file helpers.

This module is the bottom of the command line: it imports nothing else of
:mod:`bertembed._cli`, and every subcommand module imports from it.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path
from typing import TextIO

#: Exit status of a run that failed on bad input (files, ids, arguments).
EXIT_ERROR = 1
#: Exit status of a command line argparse could not make sense of.
EXIT_USAGE = 2
#: Exit status after Ctrl-C (128 + SIGINT), as shells report it.
EXIT_INTERRUPTED = 130

#: Exceptions that mean "bad input", reported in one line instead of a traceback.
EXPECTED_ERRORS = (OSError, ValueError, TypeError, IndexError, KeyError, ImportError)


class CLIError(Exception):
    """A failure to report as ``bertembed: error: <message>``.

    Parameters
    ----------
    message : str
        The text after ``bertembed: error:``.
    status : int, default EXIT_ERROR
        The exit status of the command.
    """

    def __init__(self, message: str, status: int = EXIT_ERROR) -> None:
        super().__init__(message)
        self.status = status


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
        return f"{head}[{bar}] {100 * frac:3.0f}%  {self.done}/{self.total} {self.unit}  {elapsed:.1f} s"

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


def positive_int(text: str) -> int:
    """argparse type: a positive integer, or a usage error that says what was given."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def check_out_dir(out: Path, option: str = "--out") -> None:
    """Fail early (before any work) when ``out`` cannot be written as a file."""
    parent = out.parent if str(out.parent) else Path(".")
    if not parent.is_dir():
        raise CLIError(f"{option} {out}: the directory {parent} does not exist")
    if out.is_dir():
        raise CLIError(f"{option} {out}: is a directory, expected a file name")


def partial_path(out: Path) -> Path:
    """The temporary name a result is written under before it is renamed to ``out``."""
    return out.with_name(f".{out.name}.partial-{os.getpid()}")


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file, then a rename)."""
    tmp = partial_path(path)
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def describe(exc: BaseException) -> str:
    """One line for an expected exception."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    if isinstance(exc, KeyError) and exc.args:
        return str(exc.args[0])
    if isinstance(exc, ImportError):
        return f"{exc} (an optional dependency is missing)"
    text = str(exc).strip() or type(exc).__name__
    return " ".join(text.split())


def fail(message: str, stream: TextIO | None = None) -> None:
    """Print ``bertembed: error: <message>`` as one line on stderr."""
    out = sys.stderr if stream is None else stream
    out.write(f"bertembed: error: {' '.join(message.split())}\n")
    out.flush()
