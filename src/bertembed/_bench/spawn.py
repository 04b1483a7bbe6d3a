"""Run Python code in a fresh interpreter: this same bertembed, or another source tree's.

The parent side of every subprocess the harness and the ``benchmarks/``
scripts start (one per contender and case in the isolated scenario, one for
the RSS measurement, one per contender and round in the scripts that
compare conversions, loads or builds): :func:`run_function` calls a
module's function in a child that has this copy of the package first on
``PYTHONPATH``, so it never picks up another installed bertembed
(``benchmarks/shared/trees.py`` runs another tree's bertembed with this
harness's timing, :data:`TIMING_FILE`). The child reports with :func:`emit`;
:func:`in_rounds` is the order in which such contenders take turns.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import timing

#: Prefix of the line in a child's stdout that carries its JSON result.
RESULT_MARK = "BERTEMBED-BENCH-RESULT "
#: Longest a child may run, in seconds.
CHILD_TIMEOUT_S = 900


def package_root() -> str:
    """The directory holding this ``bertembed`` package (``src/`` in a checkout)."""
    return str(Path(__file__).resolve().parent.parent.parent)


def child_env(extra: Mapping[str, str] | None = None, paths: Sequence[str] = ()) -> dict[str, str]:
    """This process's environment with ``paths`` and :func:`package_root` first on PYTHONPATH."""
    env = dict(os.environ)
    entries = [*paths, package_root(), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in entries if p))
    env.update(extra or {})
    return env


def emit(result: Any) -> None:
    """Child side: print ``result`` as the marked JSON line the parent looks for."""
    print(RESULT_MARK + json.dumps(result), flush=True)


def run_function(
    target: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    paths: Sequence[str] = (),
    timeout: float = CHILD_TIMEOUT_S,
    python: str = sys.executable,
) -> Any:
    """Call a function in a fresh Python and return what it returned (JSON).

    The child is ``python -m bertembed._bench.child target args...``
    (:mod:`bertembed._bench.child`): it calls the function ``target`` names,
    ``module:function`` or ``path/to/file.py:function``, with ``args`` as one
    list of strings, and emits its result.

    Parameters
    ----------
    target : str
        E.g. ``"bertembed._bench.worker:main"`` or ``f"{__file__}:child_main"``.
    args : sequence of str
    env : mapping, optional
        Variables set in the child besides this process's environment.
    paths : sequence of str
        Directories put first on the child's ``PYTHONPATH`` (before this bertembed's).
    timeout : float
        Seconds.
    python : str, default this interpreter
        Another environment's interpreter (its ``PYTHONPATH`` given in
        `env` must then lead to a ``bertembed`` it can import).

    Raises
    ------
    RuntimeError
        As :func:`run_program`.
    """
    return run_program([python, "-m", "bertembed._bench.child", target, *args], env=env, paths=paths, timeout=timeout)


def run_child(
    code: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    paths: Sequence[str] = (),
    timeout: float = CHILD_TIMEOUT_S,
) -> Any:
    """Run ``python -c code args...`` and return the JSON its :func:`emit` printed.

    Only for what cannot be a module's function: another tree's prelude
    (``benchmarks/shared/trees.py``), and the lines that must run before
    ``bertembed`` is imported, which ``python -m bertembed._bench.child``
    (:func:`run_function`) does first (``benchmarks/quota.py`` joins its
    cgroup, then calls its own function through :func:`bertembed._bench.child.main`).

    Raises
    ------
    RuntimeError
        As :func:`run_program`.
    """
    return run_program([sys.executable, "-c", code, *args], env=env, paths=paths, timeout=timeout)


def run_program(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    paths: Sequence[str] = (),
    timeout: float = CHILD_TIMEOUT_S,
) -> Any:
    """Run ``argv`` (a Python program) with :func:`child_env` and return the JSON its :func:`emit` printed.

    Raises
    ------
    RuntimeError
        The child failed, timed out or printed no result; the message holds
        the last line of its stderr.
    """
    try:
        proc = subprocess.run(
            list(argv),
            capture_output=True,
            text=True,
            env=child_env(env, paths),
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the child process ran longer than {timeout:.0f} s") from None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK) :])
    tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
    raise RuntimeError(f"the child process exited with status {proc.returncode}: {tail[0]}")


#: The harness's timing module (standard library only), loaded from this file by children
#: whose bertembed is another tree's or none (``benchmarks/shared/trees.py``, ``benchmarks/service/latency.py``).
TIMING_FILE = str(Path(timing.__file__).resolve())


def in_rounds(names: Sequence[str], rounds: int) -> list[tuple[int, str]]:
    """The turns of contenders that each run in fresh processes: ``(round, name)``.

    Every name once per round, the first of each round rotated by one, so
    that a burst of noise on the machine hits every contender and none
    always runs right after the same one.

    Examples
    --------
    >>> in_rounds(["a", "b", "c"], 2)
    [(0, 'a'), (0, 'b'), (0, 'c'), (1, 'b'), (1, 'c'), (1, 'a')]
    """
    order = list(names)
    turns: list[tuple[int, str]] = []
    for r in range(rounds):
        k = r % len(order) if order else 0
        turns.extend((r, name) for name in order[k:] + order[:k])
    return turns


def run_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command to its end (a build or an export a benchmark needs first); its output
    captured, a non-zero exit a :class:`subprocess.CalledProcessError`."""
    return subprocess.run(
        list(argv), check=True, capture_output=True, text=True, env=None if env is None else dict(env)
    )


def start_process(argv: Sequence[str], log: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Any:
    """Start a long-running process (a server under load), in a process group of its own,
    its output into `log`; stop it with :func:`stop_process`."""
    with open(log, "wb") as out:
        return subprocess.Popen(
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=None if env is None else dict(env),
            start_new_session=True,
        )


def stop_process(process: Any, grace: float = 15.0) -> None:
    """Stop what :func:`start_process` started and everything it started: SIGTERM to the
    group, then SIGKILL after `grace` seconds (``terminate``/``kill`` where there are no groups)."""
    import signal

    killpg = getattr(os, "killpg", None)
    try:
        if killpg is not None:
            killpg(process.pid, signal.SIGTERM)
        else:
            process.terminate()
        process.wait(timeout=grace)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        if killpg is not None:
            killpg(process.pid, getattr(signal, "SIGKILL", signal.SIGTERM))
        else:
            process.kill()
    except ProcessLookupError:
        pass
