"""Bounded reads of checkpoint files: regular files only, size and nesting limits.

Every file a checkpoint reader opens goes through :func:`open_regular`: the
file is opened non-blocking (a FIFO opens at once instead of waiting for a
writer) and then checked with ``fstat``, so a FIFO, a socket or a device
(``/dev/zero``, ``/dev/urandom``) is an error, never a hang or an endless
read. Symbolic links are followed (the Hugging Face cache links snapshot
files to blobs); a loop of links is an error naming the file. What is read
into memory (``config.json``, an index, a safetensors header, a pickle) is
capped: the limits below are far above what real checkpoints hold.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Callable
from typing import IO, Any, BinaryIO

import numpy as np

from ..errors import CheckpointError, short

#: Largest ``config.json`` read (real ones are a few KiB).
MAX_CONFIG_BYTES = 16 * 2**20
#: Largest ``*.index.json`` of a sharded checkpoint read (real ones are below 1 MiB).
MAX_INDEX_BYTES = 64 * 2**20
#: Largest safetensors header: the limit of the safetensors package itself.
MAX_HEADER_BYTES = 100_000_000
#: Largest ``data.pkl`` of a ``torch.save`` archive (real ones hold ~200 bytes per tensor).
MAX_PICKLE_BYTES = 64 * 2**20
#: Largest ``byteorder`` record (it holds ``little`` or ``big``).
MAX_BYTEORDER_BYTES = 16
#: Deepest nesting of JSON arrays and objects (real files nest a few levels).
MAX_JSON_DEPTH = 64
#: Largest number of members of a ``torch.save`` zip archive (one per storage, plus a few).
MAX_ZIP_MEMBERS = 1_000_000

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


#: Extra flags of every open: non-blocking, so that opening a FIFO never waits
#: for a writer (the check that it is not a regular file follows), and
#: close-on-exec. Windows has neither flag (nor FIFOs): 0 there.
_OPEN_FLAGS = getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


#: Windows' error for a path it cannot resolve (a loop of symbolic links).
_WIN_CANT_RESOLVE_FILENAME = 1921


def _opener(path: str, flags: int) -> int:
    return os.open(path, flags | _OPEN_FLAGS)


def open_regular(path: str | os.PathLike[str], what: str = "file") -> BinaryIO:
    """`path` opened for binary reading, after checking that it is a regular file.

    Raises
    ------
    FileNotFoundError
        No such file (or a dangling link).
    IsADirectoryError
        A directory.
    CheckpointError
        A FIFO, socket or device, or a loop of symbolic links.
    """
    p = os.fspath(path)
    try:
        fh = open(p, "rb", opener=_opener)
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: no such file") from None
    except IsADirectoryError:
        raise IsADirectoryError(f"{p}: is a directory, not a {what}") from None
    except OSError as exc:
        # Windows says PermissionError for a directory and ERROR_CANT_RESOLVE_FILENAME
        # (WinError 1921) for a loop of links where POSIX says EISDIR and ELOOP.
        if isinstance(exc, PermissionError) and os.path.isdir(p):
            raise IsADirectoryError(f"{p}: is a directory, not a {what}") from None
        if exc.errno == errno.ELOOP or getattr(exc, "winerror", None) == _WIN_CANT_RESOLVE_FILENAME:
            raise CheckpointError(f"{p}: a loop of symbolic links, not a {what}") from None
        raise
    mode = os.fstat(fh.fileno()).st_mode
    if not stat.S_ISREG(mode):
        fh.close()
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(f"{p}: is a directory, not a {what}")
        raise CheckpointError(f"{p}: {_kind(mode)}, not a regular {what}: refusing to read it")
    return fh


def file_size(fh: BinaryIO) -> int:
    """The size of the open file `fh` now."""
    return os.fstat(fh.fileno()).st_size


def too_big(path: object, what: str, size: int | str, limit: int, limit_name: str) -> CheckpointError:
    """The error for a file or member over its size limit."""
    return CheckpointError(
        f"{path}: {what} holds {size} bytes, more than the limit of {limit} bytes "
        f"(bertembed._checkpoints.readers.reading.{limit_name}): refusing to read it"
    )


def read_capped(path: str | os.PathLike[str], limit: int, limit_name: str, what: str = "file") -> bytes:
    """The bytes of the regular file `path`, or an error when it holds more than `limit`."""
    with open_regular(path, what) as fh:
        size = file_size(fh)
        if size > limit:
            raise too_big(path, f"the {what}", size, limit, limit_name)
        data = fh.read(limit + 1)  # a file that grows is still cut at the limit
    if len(data) > limit:
        raise too_big(path, f"the {what}", f"more than {limit}", limit, limit_name)
    return data


def read_stream_capped(stream: IO[bytes], limit: int) -> bytes | None:
    """At most `limit` bytes of `stream`; None if it holds more (read at most ``limit + 1``)."""
    chunks, have = [], 0
    while have <= limit:
        chunk = stream.read(min(1 << 20, limit + 1 - have))
        if not chunk:
            break
        chunks.append(chunk)
        have += len(chunk)
    return None if have > limit else b"".join(chunks)


# ------------------------------------------------------------------ JSON

_DEPTH_STEP = np.zeros(256, np.int8)
_DEPTH_STEP[[ord("["), ord("{")]] = 1
_DEPTH_STEP[[ord("]"), ord("}")]] = -1
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}:')


def json_structure(raw: bytes) -> bytes:
    """The brackets and colons of the JSON text `raw` that lie outside strings, in order.

    Escaped backslashes and quotes are dropped first, so that every quote left
    opens or closes a string; the text between the quotes is then dropped.
    Byte operations only (fast on large headers).

    Examples
    --------
    >>> json_structure(b'{"a": [1, {"b": "]]"}]}')
    b'{:[{:}]}'
    """
    plain = raw.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
    return b"".join(plain.split(b'"')[::2])


def json_depth(raw: bytes) -> int:
    """The deepest nesting of arrays and objects in the JSON text `raw` (strings skipped).

    A text that opens no more than :data:`MAX_JSON_DEPTH` arrays and objects
    in all gives that count instead (a bound, enough to compare with the
    limit, and cheaper to get).

    Examples
    --------
    >>> json_depth(b'{"a": [1, {"b": "]]]"}]}')
    3
    >>> json_depth(b"[" * 100 + b"]" * 100)
    100
    """
    return _depth(json_structure(raw))


def _depth(structure: bytes) -> int:
    opening = structure.count(b"[") + structure.count(b"{")
    if opening <= MAX_JSON_DEPTH:  # (a small text: no need to follow the nesting)
        return opening
    steps = _DEPTH_STEP[np.frombuffer(structure, np.uint8)]
    return int(np.cumsum(steps, dtype=np.int64).max())


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Duplicate(key)
            seen.add(key)
    return out


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def parse_json(raw: bytes, where: object, what: str = "", count_keys: Callable[[Any], int] | None = None) -> Any:
    """`raw` parsed as JSON, with errors that name `where`.

    Refused: text that is not UTF-8 JSON, nesting deeper than
    :data:`MAX_JSON_DEPTH`, a key that appears twice in one object, and
    integers too long to convert (more digits than Python converts).
    `what` (such as ``"the header "``) starts the messages after `where`.

    With `count_keys` (the number of keys the parsed value holds, counted
    where duplicates matter), the text is parsed without a duplicate check
    when that count equals the number of keys in the text; only otherwise is
    it parsed again, looking for the duplicate (a fast path for large
    safetensors headers).
    """
    structure = json_structure(raw)
    depth = _depth(structure)
    if depth > MAX_JSON_DEPTH:
        raise CheckpointError(
            f"{where}: {what}nests JSON arrays/objects {depth} deep, more than the limit of "
            f"{MAX_JSON_DEPTH} (bertembed._checkpoints.readers.reading.MAX_JSON_DEPTH)"
        )
    try:
        text = raw.decode("utf-8")
        if count_keys is not None:
            value = json.loads(text)
            if count_keys(value) == structure.count(b":"):
                return value
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except UnicodeDecodeError as exc:
        raise CheckpointError(
            f"{where}: {what}{'is ' if what else ''}not valid JSON (not UTF-8: {exc.reason} at byte {exc.start})"
        ) from None
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{where}: {what}{'is ' if what else ''}not valid JSON ({exc})") from None
    except _Duplicate as exc:
        raise CheckpointError(f"{where}: {what}the key {short(exc.key)} appears twice in one object") from None
    except RecursionError:
        raise CheckpointError(f"{where}: {what}nests JSON too deeply") from None
    except ValueError:  # int(): more digits than sys.get_int_max_str_digits()
        raise CheckpointError(
            f"{where}: {what}holds an integer with too many digits to be a size, an offset or a config value"
        ) from None
