"""Where the repository's parts are, seen from the tests."""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

#: The repository root (the tests live in ``ROOT / "tests" / <concern>``).
ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
#: What the benchmark scripts share (``benchmarks/shared/``, not in the wheel).
BENCHMARKS_SHARED = ROOT / "benchmarks" / "shared"


def benchmarks_shared(name: str) -> ModuleType:
    """``benchmarks/shared/<name>.py``, imported from its file as ``benchmarks_shared_<name>``.

    The test that asks is skipped when ``benchmarks/`` is not beside the
    tests (an installed wheel's test run).
    """
    path = BENCHMARKS_SHARED / f"{name}.py"
    if not path.is_file():
        import pytest

        pytest.skip(f"{path} is not in this checkout")
    module_name = f"benchmarks_shared_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def env_with_helpers(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with ``tests/`` first on ``PYTHONPATH``.

    For a child process that imports ``helpers``: a fuzz target, the
    hostile-checkpoint worker. No script under ``tests/`` edits ``sys.path``;
    whoever starts one puts ``tests/`` on its ``PYTHONPATH``.
    """
    out = dict(os.environ if env is None else env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), out.get("PYTHONPATH", "")) if p)
    return out


def env_with_bertembed(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """`env` (default: this process's) with the folder of the bertembed under test first on ``PYTHONPATH``.

    For a script run as a child (a benchmark), so that it imports the
    bertembed these tests import, wherever that is installed.
    """
    import bertembed

    out = dict(os.environ if env is None else env)
    src = str(Path(bertembed.__file__).resolve().parent.parent)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (src, out.get("PYTHONPATH", "")) if p)
    return out
