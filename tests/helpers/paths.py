"""Where the repository's parts are, seen from the tests."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: The repository root (the tests live in ``ROOT / "tests" / <concern>``).
ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def env_with_helpers(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with ``tests/`` first on ``PYTHONPATH``.

    For a child process that imports ``helpers``: a fuzz target, the
    hostile-checkpoint worker. No script under ``tests/`` edits ``sys.path``;
    whoever starts one puts ``tests/`` on its ``PYTHONPATH``.
    """
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), out.get("PYTHONPATH", "")) if p)
    return out
