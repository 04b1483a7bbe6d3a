"""Windows' file rules, simulated on Linux, for tests of code that must run there.

On Windows a file that a process has mapped cannot be replaced, renamed over,
renamed, deleted or truncated (``PermissionError``: errno 13, WinError 32 or 1224),
where POSIX lets the mapping keep the old inode. :func:`refuse_mapped_files`
makes ``os.replace``, ``os.rename``, ``os.unlink``/``os.remove`` (and so
``Path.replace``, ``Path.unlink``, ``shutil.rmtree``) and opening for
writing with truncation (``open(path, "w")``, ``os.open(..., O_TRUNC)``,
``os.truncate``) behave that way for the files this process or one of its
parents maps, read from ``/proc/<pid>/maps`` (Linux only).
:func:`install_mapped_file_rule` does the same for a whole session (the
Windows-like pytest plugin, ``.ci/winlike``).
"""

from __future__ import annotations

import builtins
import io
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

#: The processes whose mappings count (this one and, through the plugin, the
#: pytest process that started it): Windows refuses if any process maps the file.
_PIDS_VAR = "BERTEMBED_WINLIKE_PIDS"


def mapped_files(pids: list[int] | None = None) -> set[str]:
    """The real paths of the files the processes `pids` (default: this one and its listed parents) map now."""
    if pids is None:
        pids = [os.getpid(), *(int(p) for p in os.environ.get(_PIDS_VAR, "").split() if p)]
    found = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as maps:
                lines = maps.readlines()
        except OSError:  # the process is gone
            continue
        for line in lines:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/"):
                found.add(os.path.realpath(parts[5].rstrip("\n").removesuffix(" (deleted)")))
    return found


def _full(path: Any, dir_fd: int | None) -> str | None:
    if isinstance(path, int) or not isinstance(path, (str, bytes, os.PathLike)):
        return None
    p = os.fsdecode(path)
    if dir_fd is not None and not os.path.isabs(p):
        p = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), p)
    return os.path.realpath(p)


def _refuse(name: str, path: Any) -> None:
    """Raise what Windows' Python raises: errno EACCES (13), ``winerror`` 32 (a sharing violation)."""
    exc = PermissionError(13, f"[simulated WinError 32] {name}: the file is mapped by a process", os.fsdecode(path))
    exc.winerror = 32  # type: ignore[attr-defined]
    raise exc


def _guard_paths(real: Callable[..., Any], name: str) -> Callable[..., Any]:
    def guarded(*paths: Any, **kwargs: Any) -> Any:
        if len(paths) == 1:
            targets = [(paths[0], _full(paths[0], kwargs.get("dir_fd")))]
        else:
            targets = [
                (paths[0], _full(paths[0], kwargs.get("src_dir_fd"))),
                (paths[1], _full(paths[1], kwargs.get("dst_dir_fd"))),
            ]
        wanted = [t for t in targets if t[1] is not None]
        if wanted:
            live = mapped_files()
            for p, full in wanted:
                if full in live:
                    _refuse(name, p)
        return real(*paths, **kwargs)

    guarded.__wrapped__ = real  # type: ignore[attr-defined]
    return guarded


def _truncates(mode: str) -> bool:
    return "w" in mode


def _guard_open(real: Callable[..., Any], name: str) -> Callable[..., Any]:
    def guarded(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if isinstance(mode, str) and _truncates(mode):
            full = _full(file, None)
            if full is not None and os.path.exists(full) and full in mapped_files():
                _refuse(name, file)
        return real(file, mode, *args, **kwargs)

    guarded.__wrapped__ = real  # type: ignore[attr-defined]
    return guarded


def _guard_os_open(real: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(path: Any, flags: int, *args: Any, **kwargs: Any) -> Any:
        if flags & os.O_TRUNC:
            full = _full(path, kwargs.get("dir_fd"))
            if full is not None and os.path.exists(full) and full in mapped_files():
                _refuse("os.open(O_TRUNC)", path)
        return real(path, flags, *args, **kwargs)

    guarded.__wrapped__ = real  # type: ignore[attr-defined]
    return guarded


def _guard_truncate(real: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(path: Any, length: int) -> Any:
        full = _full(path, None)
        if full is not None and full in mapped_files():
            _refuse("os.truncate", path)
        return real(path, length)

    guarded.__wrapped__ = real  # type: ignore[attr-defined]
    return guarded


def _patches() -> list[tuple[Any, str, Callable[..., Any]]]:
    out: list[tuple[Any, str, Callable[..., Any]]] = [
        (os, n, _guard_paths(getattr(os, n), f"os.{n}")) for n in ("replace", "rename", "unlink", "remove")
    ]
    out.append((os, "open", _guard_os_open(os.open)))
    out.append((os, "truncate", _guard_truncate(os.truncate)))
    out.append((builtins, "open", _guard_open(builtins.open, "open")))
    out.append((io, "open", _guard_open(io.open, "io.open")))
    return out


def rule_installed() -> bool:
    """Whether the mapped-file rule is on now (the Windows-like run, or :func:`refuse_mapped_files` in a test)."""
    return getattr(os.replace, "__wrapped__", None) is not None


def refuse_mapped_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on (for the test), replacing, renaming, deleting or truncating a mapped file fails as on Windows."""
    import pytest

    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc/self/maps to know which files are mapped")
    for owner, name, fn in _patches():
        monkeypatch.setattr(owner, name, fn)


def install_mapped_file_rule() -> bool:
    """The same rule for the rest of the process (no undo); False where /proc is missing."""
    if not os.path.exists("/proc/self/maps"):
        return False
    if getattr(os.replace, "__wrapped__", None) is not None:
        return True
    for owner, name, fn in _patches():
        setattr(owner, name, fn)
    return True


def mapped_files_are_locked() -> bool:
    """Whether this process runs under Windows' rule for mapped files: on Windows, or with the rule installed."""
    import sys

    return sys.platform == "win32" or getattr(os.replace, "__wrapped__", None) is not None
