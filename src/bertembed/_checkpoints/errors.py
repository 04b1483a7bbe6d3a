"""The errors a checkpoint reader raises, and a bounded ``repr`` for their messages."""

from __future__ import annotations

import reprlib
from typing import Any


class CheckpointError(ValueError):
    """A checkpoint file (weights, index or ``config.json``) that bertembed refuses to read.

    A ``ValueError``. The message names the file, and the tensor or config
    key when there is one, and says what is wrong with it.

    Examples
    --------
    >>> import bertembed
    >>> issubclass(bertembed.CheckpointError, ValueError)
    True
    """

    __module__ = "bertembed"  # its public name: bertembed.CheckpointError


class UnsafeCheckpointError(CheckpointError):
    """A pickle references a global that a state dict does not need.

    Nothing from the file was imported or run. A :class:`CheckpointError`
    (hence a ``ValueError``).

    Examples
    --------
    >>> import bertembed
    >>> issubclass(bertembed.UnsafeCheckpointError, bertembed.CheckpointError)
    True
    """

    __module__ = "bertembed"


class _Short(reprlib.Repr):
    """``reprlib`` limits, and ints too long to print shown by their size."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel = 3
        self.maxstring = 80
        self.maxother = 80
        self.maxlong = 40
        self.maxtuple = self.maxlist = self.maxdict = self.maxset = 6

    def repr_int(self, x: int, level: int) -> str:
        if x.bit_length() > 128:
            return f"<an int of {x.bit_length()} bits>"
        return super().repr_int(x, level)


_SHORT = _Short()


def bounded(exc: BaseException, limit: int = 200) -> str:
    """The message of `exc` (a library's own error, which may quote file data), cut at `limit` characters.

    Examples
    --------
    >>> bounded(ValueError("x" * 1000), 10)
    'xxxxxxxxxx...'
    >>> bounded(EOFError())
    'EOFError'
    """
    try:
        text = str(exc) or type(exc).__name__
    except Exception:
        return type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def short(obj: Any) -> str:
    """A ``repr`` of `obj` bounded in length and depth, whatever it holds.

    Examples
    --------
    >>> short(10 ** 100)
    '<an int of 333 bits>'
    >>> short(((((1,),),),))
    '((((...),),),)'
    """
    try:
        return _SHORT.repr(obj)
    except Exception:  # a repr that fails: name the type only
        return f"<a {type(obj).__name__}>"
