"""Run bertembed's tests on Linux the way Windows' Python would see the package.

What Windows lacks is taken away from bertembed and its tests (and only from
them: the interpreter, pytest and NumPy keep what they need on Linux):

- the POSIX-only attributes of ``os`` and ``signal`` (``O_NONBLOCK``,
  ``fork``, ``register_at_fork``, ``sched_getaffinity``, ``killpg``,
  ``mkfifo``, ``SIGALRM``, ``SIGKILL``, ...; :data:`OS_ONLY_POSIX`,
  :data:`SIGNAL_ONLY_POSIX`): code whose file is in bertembed's package or in
  the tests gets ``AttributeError`` (``hasattr`` says False), everyone else the
  real thing;
- the POSIX-only modules (``resource``, ``fcntl``, ``pwd``, ...): importing
  one from that code raises ``ModuleNotFoundError``;
- the ``fork`` and ``forkserver`` start methods of ``multiprocessing``, and
  the default start method is ``spawn``;

and, for every caller, Windows' rule for mapped files (a file some process of
the run maps cannot be replaced, renamed, deleted or truncated:
``helpers.windows.install_mapped_file_rule``). Standard output and error are
cp1252, a Windows console's legacy code page: ``.ci/winlike.sh`` starts pytest
with ``PYTHONIOENCODING=cp1252``, which the processes the tests start inherit
(pytest's own capture is UTF-8 whatever the console is).

The same rules apply in every Python process the tests start (this folder and
``tests/``, for ``helpers.windows``, are on ``PYTHONPATH``; ``sitecustomize.py`` applies them when
``BERTEMBED_WINLIKE=1``). As a pytest plugin (``-p winlike``) it also prints
what it took away. ``sys.platform`` stays ``linux``: code that asks the
platform by name is not exercised.

(PYTEST_DONT_REWRITE: sitecustomize imports it before pytest could.)
"""

from __future__ import annotations

import builtins
import os
import signal
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

OS_ONLY_POSIX = (
    # file flags Windows' os does not define
    "O_NONBLOCK O_NDELAY O_NOFOLLOW O_CLOEXEC O_DIRECTORY O_NOCTTY O_SYNC O_DSYNC O_RSYNC O_ASYNC "
    "O_DIRECT O_LARGEFILE O_NOATIME O_PATH O_TMPFILE "
    # processes
    "fork forkpty register_at_fork killpg getpgid getpgrp setpgid setpgrp setsid getsid "
    "wait3 wait4 waitid WNOHANG WUNTRACED WCONTINUED posix_spawn posix_spawnp "
    "nice getpriority setpriority "
    "sched_getaffinity sched_setaffinity sched_getscheduler sched_setscheduler sched_param sched_yield "
    "sched_get_priority_min sched_get_priority_max sched_rr_get_interval "
    # users and groups
    "getuid geteuid getgid getegid setuid setgid seteuid setegid getgroups setgroups initgroups "
    "getresuid getresgid chown lchown fchown chroot "
    # files
    "mkfifo mknod major minor makedev statvfs fstatvfs pread pwrite preadv pwritev readv writev "
    "posix_fadvise posix_fallocate pipe2 openpty ttyname ctermid memfd_create eventfd splice "
    "copy_file_range sendfile lockf fdatasync sync fchdir getxattr setxattr listxattr removexattr "
    # the system
    "uname getloadavg sysconf sysconf_names confstr confstr_names pathconf fpathconf pathconf_names"
).split()
SIGNAL_ONLY_POSIX = (
    "SIGALRM SIGHUP SIGKILL SIGUSR1 SIGUSR2 SIGCHLD SIGPIPE SIGQUIT SIGSTOP SIGCONT SIGTSTP SIGTTIN "
    "SIGTTOU SIGXCPU SIGXFSZ SIGVTALRM SIGPROF SIGWINCH SIGIO SIGPOLL SIGURG SIGSYS SIGTRAP SIGBUS "
    "SIGPWR SIGRTMIN SIGRTMAX SIGSTKFLT alarm setitimer getitimer ITIMER_REAL ITIMER_VIRTUAL "
    "ITIMER_PROF ItimerError pause pthread_kill pthread_sigmask sigpending sigwait sigwaitinfo "
    "sigtimedwait siginterrupt SIG_BLOCK SIG_UNBLOCK SIG_SETMASK pidfd_send_signal"
).split()
# (not "posix": it is where os's functions live on Linux, as "nt" on Windows; pickle names it)
MODULES_ONLY_POSIX = ("resource", "fcntl", "pwd", "grp", "termios", "tty", "pty", "crypt", "syslog")

_HERE = Path(__file__).resolve().parent
_state: dict[str, Any] = {"applied": False, "hidden": {}, "ours": []}


def _our_roots() -> list[str]:
    """The folders whose code sees Windows' modules: bertembed's package and the tests."""
    import importlib.util

    roots = [str(_HERE.parents[1] / "tests"), str(_HERE.parents[1] / "src" / "bertembed")]
    spec = importlib.util.find_spec("bertembed")  # found, not imported
    if spec is not None and spec.submodule_search_locations:
        roots += [str(Path(p).resolve()) for p in spec.submodule_search_locations]
    roots += [r for r in os.environ.get("BERTEMBED_WINLIKE_ROOTS", "").split(os.pathsep) if r]
    return sorted({os.path.realpath(r) + os.sep for r in roots})


def _ours(depth: int) -> bool:
    try:
        frame = sys._getframe(depth)
    except ValueError:
        return False
    path = frame.f_code.co_filename
    return path.startswith(tuple(_state["ours"])) or os.path.realpath(path).startswith(tuple(_state["ours"]))


def _hide(module: types.ModuleType, names: list[str]) -> list[str]:
    hidden = {n: module.__dict__.pop(n) for n in names if n in module.__dict__}
    _state["hidden"][module.__name__] = hidden
    previous = module.__dict__.get("__getattr__")

    def __getattr__(name: str) -> Any:
        if name in hidden:
            if _ours(2):
                raise AttributeError(f"module {module.__name__!r} has no attribute {name!r} (as on Windows)")
            return hidden[name]
        if previous is not None:
            return previous(name)
        raise AttributeError(f"module {module.__name__!r} has no attribute {name!r}")

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    return sorted(hidden)


def _block_modules() -> None:
    real_import: Callable[..., Any] = builtins.__import__

    def windows_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and name.split(".")[0] in MODULES_ONLY_POSIX and _ours(2):
            raise ModuleNotFoundError(f"No module named {name!r} (as on Windows)", name=name)
        return real_import(name, globals, locals, fromlist, level)

    builtins.__import__ = windows_import


def _no_fork_start_methods() -> None:
    import multiprocessing
    import multiprocessing.context

    multiprocessing.set_start_method("spawn", force=True)
    ctx = multiprocessing.context._default_context
    real_get_context = ctx.get_context
    real_methods = ctx.get_all_start_methods

    def get_context(method: str | None = None) -> Any:
        if method in ("fork", "forkserver") and _ours(2):
            raise ValueError(f"cannot find context for {method!r} (as on Windows)")
        return real_get_context(method)

    def get_all_start_methods() -> list[str]:
        return ["spawn"] if _ours(2) else real_methods()

    for owner in (ctx, multiprocessing):
        owner.get_context = get_context  # type: ignore[method-assign]
        owner.get_all_start_methods = get_all_start_methods  # type: ignore[method-assign]


def apply() -> None:
    """Take away from bertembed and its tests what Windows' Python does not have (once)."""
    if _state["applied"]:
        return
    _state["applied"] = True
    _state["ours"] = _our_roots()
    _hide(os, OS_ONLY_POSIX)
    _hide(signal, SIGNAL_ONLY_POSIX)
    _block_modules()
    _no_fork_start_methods()
    pids = os.environ.get("BERTEMBED_WINLIKE_PIDS", "")
    os.environ["BERTEMBED_WINLIKE_PIDS"] = f"{os.getpid()} {pids}".strip()
    from helpers.windows import install_mapped_file_rule  # tests/ is on PYTHONPATH (.ci/winlike.sh)

    install_mapped_file_rule()


# ---------------------------------------------------------------- pytest plugin
def pytest_configure(config: Any) -> None:
    os.environ["BERTEMBED_WINLIKE"] = "1"
    apply()


def pytest_report_header(config: Any) -> list[str]:
    hidden = _state["hidden"]
    return [
        f"winlike: hidden from bertembed and the tests: os.{{{', '.join(sorted(hidden.get('os', {})))}}}",
        f"winlike: signal.{{{', '.join(sorted(hidden.get('signal', {})))}}}; modules {', '.join(MODULES_ONLY_POSIX)}",
        f"winlike: multiprocessing start method spawn; mapped files cannot be replaced; stdout {sys.stdout.encoding}",
    ]
