"""Run Python code in a fresh interpreter that imports this same bertembed.

The parent side of every subprocess the harness starts (one per contender
and case in the isolated scenario, one for the RSS measurement): the child
gets this copy of the package first on ``PYTHONPATH``, so it never picks up
another installed bertembed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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


def run_child(
    code: str,
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    paths: Sequence[str] = (),
    timeout: float = CHILD_TIMEOUT_S,
) -> Any:
    """Run ``python -c code args...`` and return the JSON its :func:`emit` printed.

    Raises
    ------
    RuntimeError
        The child failed, timed out or printed no result; the message holds
        the last line of its stderr.
    """
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code, *args],
            capture_output=True, text=True, env=child_env(env, paths), timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"the child process ran longer than {timeout:.0f} s") from None
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_MARK):
            return json.loads(line[len(RESULT_MARK):])
    tail = proc.stderr.strip().splitlines()[-1:] or ["no output"]
    raise RuntimeError(f"the child process exited with status {proc.returncode}: {tail[0]}")
