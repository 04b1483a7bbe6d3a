"""Bounded reads of checkpoint files: regular files only, size and nesting limits.

Every file a checkpoint reader opens goes through :func:`open_regular`: the
file is opened non-blocking (a FIFO opens at once instead of waiting for a
writer) and then checked with ``fstat``, so a FIFO, a socket or a device
(``/dev/zero``, ``/dev/urandom``) is an error, never a hang or an endless
read. Symbolic links are followed (the Hugging Face cache links snapshot
files to blobs); a loop of links is an error naming the file. What is read
into memory (``config.json``, an index, a safetensors header, a pickle) is
capped, and so is what parsing it would build: JSON values (counted on the
bytes by :func:`json_shape` before anything is built), pickle opcodes and zip
members. The limits below are far above what real checkpoints hold, and a file
at them costs at most about 1.3 s of CPU and 220 MiB
(``tests/checkpoints/test_hostile_checkpoints.py`` bounds each at 2 s and 256 MiB).
"""

from __future__ import annotations

import errno
import io
import json
import os
import re
import stat
from collections.abc import Callable
from typing import IO, Any, BinaryIO, NamedTuple

import numpy as np

from ..errors import CheckpointError, short

#: Largest ``config.json`` read (real ones are a few KiB).
MAX_CONFIG_BYTES = 16 * 2**20
#: Most JSON values in a ``config.json`` (real ones hold hundreds; a large ``id2label`` tens of thousands).
MAX_CONFIG_VALUES = 1_000_000
#: Largest ``*.index.json`` of a sharded checkpoint read (transformers writes ~95 bytes per tensor: the
#: largest real indexes, of ~100,000 tensors, take ~10 MiB).
MAX_INDEX_BYTES = 48 * 2**20
#: Most JSON values in a ``*.index.json`` (one per tensor, plus a few).
MAX_INDEX_VALUES = 500_000
#: Largest safetensors header read (real ones hold ~150 bytes per tensor: tens of thousands of tensors take
#: a few MiB). Below the format's own 100,000,000 bytes: parsing holds the text and the strings parsed from
#: it at once, about twice the header, and this keeps a header at every limit under 256 MiB.
MAX_HEADER_BYTES = 48 * 2**20
#: Most JSON values in a safetensors header (8 per tensor: 125,000 tensors; real ones hold tens of thousands).
MAX_HEADER_VALUES = 1_000_000
#: Deepest nesting of JSON arrays and objects (real files nest a few levels).
MAX_JSON_DEPTH = 64
#: Largest ``data.pkl`` of a ``torch.save`` archive (real ones hold ~130 bytes per tensor, 4 MiB at the
#: opcode limit; a string in it may take 4 times its bytes once decoded).
MAX_PICKLE_BYTES = 16 * 2**20
#: Most opcodes in that pickle (torch writes 32 per tensor: 31,250 tensors).
MAX_PICKLE_OPCODES = 1_000_000
#: Largest ``byteorder`` record (it holds ``little`` or ``big``).
MAX_BYTEORDER_BYTES = 16
#: Most members of a ``torch.save`` zip archive (one per storage, plus a few: 31,255 at most at the opcode
#: limit).
MAX_ZIP_MEMBERS = 50_000

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


def open_regular(path: str | os.PathLike[str], what: str = "file") -> io.BufferedReader:
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


def read_capped(path: str | os.PathLike[str], limit: int, limit_name: str, what: str = "file") -> bytearray:
    """The bytes of the regular file `path`, or an error when it holds more than `limit`.

    A bytearray, which :func:`parse_json` empties once it has decoded it.
    """
    with open_regular(path, what) as fh:
        size = file_size(fh)
        if size > limit:
            raise too_big(path, f"the {what}", size, limit, limit_name)
        data = bytearray(size + 1)  # one more byte: a file that grew since fstat shows it
        got = fh.readinto(data)
        if got > size:
            data += fh.read(limit + 1 - got)  # a file that grows is still cut at the limit
        else:
            del data[got:]
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

#: Bytes of JSON text scanned at a time (bounds the scan's own memory).
_SCAN_CHUNK = 1 << 20
_QUOTE = ord('"')
#: Escapes of characters that make a str 2 bytes per character (U+0100 and up), and 4 (a high surrogate:
#: with its low one, a character beyond U+FFFF). An escaped backslash before ``u`` matches too: the scan
#: then counts wider than the parse stores, never narrower.
_WIDE_ESCAPE = re.compile(rb"\\u(?!00)[0-9a-fA-F]{2}")
_ASTRAL_ESCAPE = re.compile(rb"\\u[dD][89abAB]")
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'"[]{}:,')
_ASCII = bytes(range(0x80))
_DEPTH_STEP = np.zeros(256, np.int8)
_DEPTH_STEP[[ord("["), ord("{")]] = 1
_DEPTH_STEP[[ord("]"), ord("}")]] = -1


class JsonShape(NamedTuple):
    """What a JSON text would cost to parse, counted on its bytes (see :func:`json_shape`)."""

    #: Deepest nesting of arrays and objects (once over the scan's `max_depth`, where the scan stopped).
    depth: int
    #: Values (strings, numbers, literals, arrays, objects), counted as 1 + commas + arrays and
    #: objects: exact when no array or object is empty, above the count otherwise.
    values: int
    #: Object members (colons outside strings).
    keys: int
    #: Characters the text decodes to (as UTF-8; an upper bound when it is not valid UTF-8).
    chars: int
    #: Bytes per character of the ``str`` that holds the text, or of a string parsed from it: CPython
    #: stores every character of a string in 1, 2 or 4 bytes, by the widest one (beyond U+00FF: 2, beyond
    #: U+FFFF: 4), whether it is written as UTF-8 or as a ``\u`` escape.
    char_bytes: int
    #: Bytes scanned (less than the text when the scan stopped at a limit).
    scanned: int

    @property
    def text_bytes(self) -> int:
        """Bytes of the ``str`` the text decodes to (without the object's header)."""
        return self.chars * self.char_bytes


def json_shape(raw: bytes | bytearray, max_depth: int = MAX_JSON_DEPTH, max_values: int | None = None) -> JsonShape:
    """The nesting, values and members of the JSON text `raw`, without building anything.

    Outside strings, brackets give the nesting, commas and brackets the
    values and colons the members (escaped backslashes and quotes are
    dropped first, so that every quote left opens or closes a string). Byte
    operations on chunks of :data:`_SCAN_CHUNK` bytes: the scan's memory stays
    a few chunks whatever the text, and it stops at the chunk where the depth
    passes `max_depth` or the values pass `max_values`. Exact for valid JSON;
    for a text that is not, exact up to its first error, which is where
    ``json.loads`` stops.

    Examples
    --------
    >>> json_shape(b'{"a": [1, {"b": "]],"}], "c": []}')
    JsonShape(depth=3, values=7, keys=3, chars=33, char_bytes=1, scanned=33)
    >>> json_shape(b"[" * 100 + b"]" * 100).depth
    100
    >>> json_shape('["\\u00e9", "\\U0001f600"]'.encode()).text_bytes  # 10 characters of 4 bytes
    40
    """
    view = memoryview(raw)
    n = len(raw)
    start = depth = deepest = commas = colons = opens = 0
    continuation = 0  # UTF-8 continuation bytes: they add no character
    widest = 0  # the largest UTF-8 lead byte
    escaped = 1  # bytes per character that the \u escapes seen so far call for
    inside = False  # whether the chunk starts inside a string
    while start < n:
        end = min(n, start + _SCAN_CHUNK)
        chunk = bytes(view[start:end])
        if end < n and chunk.endswith(b"\\"):
            run = len(chunk) - len(chunk.rstrip(b"\\"))
            if run % 2:  # the last backslash escapes the next byte: keep the pair together
                end += 1
                chunk = bytes(view[start:end])
        if escaped < 4 and b"\\u" in chunk:  # (the chunk holds the escape; its digits may spill over)
            window = chunk + bytes(view[end : end + 5])
            if _ASTRAL_ESCAPE.search(window):
                escaped = 4
            elif _WIDE_ESCAPE.search(window):
                escaped = 2
        start = end
        high = chunk.translate(None, _ASCII)
        if high:
            codes = np.frombuffer(high, np.uint8)
            continuation += int(np.count_nonzero(codes < 0xC0))
            widest = max(widest, int(codes.max()))
        plain = chunk.replace(b"\\\\", b"").replace(b'\\"', b"").translate(None, _NOT_STRUCTURE)
        if b'"' in plain:
            codes = np.frombuffer(plain, np.uint8)
            quote = codes == _QUOTE
            in_string = np.logical_xor.accumulate(quote)  # True from an opening quote to the closing one
            if inside:
                np.logical_not(in_string, out=in_string)
            inside = bool(in_string[-1])
            structure = codes[~(in_string | quote)].tobytes()
        else:
            structure = b"" if inside else plain
        if not structure:
            continue
        chunk_commas, chunk_colons = structure.count(b","), structure.count(b":")
        opening = structure.count(b"[") + structure.count(b"{")
        if depth + opening > deepest:  # (else the chunk cannot go deeper: no need to follow it)
            levels = np.cumsum(_DEPTH_STEP[np.frombuffer(structure, np.uint8)], dtype=np.int32)
            deepest = max(deepest, depth + int(levels.max()))
        depth += 2 * opening + chunk_commas + chunk_colons - len(structure)  # (opening - closing)
        commas, colons, opens = commas + chunk_commas, colons + chunk_colons, opens + opening
        if deepest > max_depth or (max_values is not None and 1 + commas + opens > max_values):
            break
    char_bytes = max(escaped, 4 if widest >= 0xF0 else 2 if widest >= 0xC4 else 1)
    return JsonShape(deepest, 1 + commas + opens, colons, start - continuation, char_bytes, start)


def count_all_keys(value: Any) -> int:
    """The keys of every object in the parsed JSON `value`.

    Examples
    --------
    >>> count_all_keys({"a": [1, {"b": 2, "c": {}}], "d": {"e": None}})
    5
    """
    keys, todo = 0, [value]
    while todo:
        item = todo.pop()
        if type(item) is dict:
            keys += len(item)
            todo.extend(v for v in item.values() if type(v) is dict or type(v) is list)
        elif type(item) is list:
            todo.extend(v for v in item if type(v) is dict or type(v) is list)
    return keys


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


def parse_json(
    raw: bytes | bytearray,
    where: object,
    what: str = "",
    count_keys: Callable[[Any], int] | None = None,
    *,
    max_bytes: int,
    bytes_name: str,
    max_values: int,
    values_name: str,
    per: str = "",
) -> Any:
    """`raw` parsed as JSON, with errors that name `where`, its cost bounded before anything is built.

    Refused before parsing (by :func:`json_shape`, which counts on the bytes):
    nesting deeper than :data:`MAX_JSON_DEPTH`, more than `max_values` values
    (the limit called `values_name` in this module; `per`, such as ``"; a
    safetensors header holds 8 per tensor"``, ends what the message says about
    values), and text that Python would hold in more than `max_bytes` bytes
    (`bytes_name`: one character beyond U+FFFF makes CPython store every
    character of a string in 4 bytes). Refused by the parse: text that is not
    UTF-8 JSON, a key that appears twice in one object, and integers too long
    to convert (more digits than Python converts). `what` (such as ``"the
    header "``) starts the messages after `where`.

    A `raw` bytearray is emptied once decoded, so that its memory is given
    back before the parse builds objects.

    The text is parsed without a duplicate check first: when the objects
    parsed hold as many keys as the text (counted by `count_keys`, all the
    objects' keys by default), no key appeared twice; only otherwise is it
    parsed again, looking for the duplicate.
    """
    shape = json_shape(raw, MAX_JSON_DEPTH, max_values)
    partial = shape.scanned < len(raw)
    if shape.depth > MAX_JSON_DEPTH:
        raise CheckpointError(
            f"{where}: {what}nests JSON arrays/objects {shape.depth}{' or more' if partial else ''} deep, more than "
            f"the limit of {MAX_JSON_DEPTH} (bertembed._checkpoints.readers.reading.MAX_JSON_DEPTH)"
        )
    if shape.values > max_values:
        raise CheckpointError(
            f"{where}: {what}holds {shape.values}{' or more' if partial else ''} JSON values (strings, numbers, "
            f"arrays and objects{per}), more than the limit of {max_values} "
            f"(bertembed._checkpoints.readers.reading.{values_name}): refusing to parse it"
        )
    if shape.text_bytes > max_bytes:
        beyond = 0xFF if shape.char_bytes == 2 else 0xFFFF
        raise CheckpointError(
            f"{where}: {what}decodes to {shape.chars} characters, which Python would store in {shape.char_bytes} "
            f"bytes each (one of its strings holds a character beyond U+{beyond:04X}): "
            f"{shape.text_bytes} bytes, more than the limit of {max_bytes} bytes "
            f"(bertembed._checkpoints.readers.reading.{bytes_name}): refusing to read it"
        )
    try:
        text = raw.decode("utf-8")
        if isinstance(raw, bytearray):
            raw.clear()
        value = json.loads(text)
        if (count_keys or count_all_keys)(value) == shape.keys:
            return value
        del value
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
