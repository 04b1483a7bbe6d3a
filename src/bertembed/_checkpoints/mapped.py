"""Which files this process maps, and the refusal to save over one where the OS forbids it.

A layer read by ``from_pretrained`` maps its weights file: its tables are
views of the file's pages for as long as the layer (or any array of it)
lives. Replacing that file is where the platforms differ:

- POSIX (Linux, macOS): the writer's rename over the mapped file succeeds;
  the live layer keeps reading the old file (its inode lives on, unnamed,
  until the last map of it goes), and a new ``from_pretrained`` reads the new
  one.
- Windows: a file that a process maps cannot be replaced, renamed or deleted
  (``PermissionError``, WinError 5 or 32). The writer asks first
  (:func:`check_replaceable`) and refuses with :class:`MappedFileError`
  before anything is written; when the rename fails anyway (another process
  maps the file: a server), :func:`replace` says the same.

This process's maps are known two ways: every map the package makes is
registered here (:func:`register`: the readers are the package's only
mappers; the entry holds a weak reference, so it goes when the map is
released), and on Linux ``/proc/self/maps`` also lists the maps made by
other code. A file is matched by identity (device and inode, or file index
on Windows), so a file that a rename has already replaced is not "mapped".
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import weakref
from pathlib import Path
from typing import Any

import numpy as np

#: Whether the OS refuses to replace a file that a process maps (Windows).
#: When True the writer checks before writing anything; tests set it to
#: exercise the Windows path on any platform.
REPLACE_REFUSED = sys.platform == "win32"
#: Where Linux lists this process's maps ("" or a missing file: not used).
PROC_MAPS = "/proc/self/maps"
#: The WinError codes of a refused replace: access denied, sharing
#: violation, a user-mapped section open.
_WIN_REFUSED = (5, 32, 1224)

_lock = threading.Lock()
#: (weak reference to the mapped buffer, file identity, path) of every map the package made.
_maps: list[tuple[weakref.ref[Any], Any, str]] = []


class MappedFileError(PermissionError):
    """A file that cannot be replaced because a live layer maps it (Windows' rule for mapped files).

    A ``PermissionError``. ``filename`` is the file; the message says which
    mapping holds it and what to do: save into another directory, or drop
    every layer loaded from that directory first. Nothing was written.
    """

    def __str__(self) -> str:
        return f"{self.filename}: {self.strerror}"


def _identity(path: str | os.PathLike[str], st: os.stat_result) -> Any:
    """What names one file whatever path reaches it: (device, inode), or the real path where there is no inode."""
    if st.st_ino:
        return (st.st_dev, st.st_ino)
    return os.path.normcase(os.path.realpath(path))


def register(arr: np.ndarray, path: str | os.PathLike[str], st: os.stat_result) -> None:
    """Record that `arr` maps the file `path` (whose ``os.fstat`` is `st`), for as long as its map lives."""
    base: Any = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if base is None:  # (an empty tensor: nothing mapped)
        return
    try:
        ref = weakref.ref(base)
    except TypeError:  # pragma: no cover - numpy's maps are mmap objects, which take weak references
        return
    with _lock:
        _maps[:] = [m for m in _maps if m[0]() is not None]
        _maps.append((ref, _identity(path, st), os.fspath(path)))


def _registered(key: Any) -> bool:
    with _lock:
        _maps[:] = [m for m in _maps if m[0]() is not None]
        return any(k == key for _, k, _ in _maps)


def _in_proc_maps(path: Path, st: os.stat_result) -> bool:
    """Whether ``/proc/self/maps`` lists the file now at `path` (same inode and name; not a replaced one)."""
    if not PROC_MAPS or not os.path.exists(PROC_MAPS):
        return False
    try:
        with open(PROC_MAPS, encoding="utf-8", errors="surrogateescape") as fh:
            lines = fh.readlines()
    except OSError:
        return False
    real = None
    for line in lines:
        parts = line.split(maxsplit=5)
        if len(parts) < 6 or not parts[4].isdigit() or int(parts[4]) != st.st_ino:
            continue
        name = parts[5].rstrip("\n")
        if name.endswith(" (deleted)"):
            continue
        real = real or os.path.realpath(path)
        if os.path.realpath(name) == real:
            return True
    return False


def is_mapped(path: str | os.PathLike[str]) -> bool:
    """Whether this process maps the file now at `path` (False when there is none).

    Examples
    --------
    >>> import tempfile, numpy as np
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = Path(d) / "t.bin"
    ...     np.arange(4, dtype=np.uint8).tofile(p)
    ...     before = is_mapped(p)
    ...     m = np.memmap(p, dtype=np.uint8, mode="r")
    ...     register(m, p, p.stat())
    ...     during = is_mapped(p)
    ...     del m
    ...     after = is_mapped(p)
    >>> before, during, after
    (False, True, False)
    """
    p = Path(os.fspath(path))
    try:
        st = os.stat(p)
    except OSError:
        return False
    return _registered(_identity(p, st)) or _in_proc_maps(p, st)


def _in_use(path: Path) -> MappedFileError:
    return MappedFileError(
        errno.EACCES,
        "cannot replace this file: a live layer in this process maps it (from_pretrained maps its weights, "
        "and Windows refuses to replace a mapped file). Nothing was written. Save into another directory, "
        "or drop every layer loaded from this directory first (del layer; gc.collect()) and save again",
        os.fspath(path),
    )


def check_replaceable(path: str | os.PathLike[str]) -> None:
    """Where the OS refuses to replace a mapped file (Windows), refuse `path` if this process maps it.

    Raises
    ------
    MappedFileError
        :data:`REPLACE_REFUSED` and a live map of the file now at `path`.
    """
    if REPLACE_REFUSED and is_mapped(path):
        raise _in_use(Path(os.fspath(path)))


def replace(src: Path, dst: Path) -> None:
    """``os.replace(src, dst)``; a refusal because `dst` is mapped becomes :class:`MappedFileError`.

    Raises
    ------
    MappedFileError
        The rename was refused (``PermissionError``) and this process maps
        `dst`, or the refusal is Windows' for a file in use (a map or an open
        handle in another process, such as a server of that directory).
    PermissionError
        Any other refusal, as raised.
    """
    try:
        os.replace(src, dst)
    except PermissionError as exc:
        if is_mapped(dst):
            raise _in_use(dst) from exc
        if REPLACE_REFUSED or getattr(exc, "winerror", None) in _WIN_REFUSED:
            raise MappedFileError(
                errno.EACCES,
                f"cannot replace this file ({exc.strerror}): on Windows a file that a process maps or holds "
                "open cannot be replaced, and a process serving a layer from this directory maps it. "
                "Nothing was written. Save into another directory, or stop that process first",
                os.fspath(dst),
            ) from exc
        raise
