"""A child process's entry: ``python -m bertembed._bench.child TARGET [ARG ...]``.

What :func:`bertembed._bench.spawn.run_function` starts. ``TARGET`` names a
function, ``package.module:function`` or ``path/to/file.py:function`` (a
``benchmarks/`` script's own function); it is called with the ``ARG``
strings as one list, and what it returns is printed as the marked JSON line
the parent reads (:func:`bertembed._bench.spawn.emit`). The child's code is
a module's, never a program passed as a string.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from .spawn import emit

#: The name a script loaded from its file gets in ``sys.modules``.
SCRIPT_MODULE = "bertembed_bench_script"


def _module(where: str) -> ModuleType:
    if not where.endswith(".py"):
        return importlib.import_module(where)
    spec = importlib.util.spec_from_file_location(SCRIPT_MODULE, Path(where))
    if spec is None or spec.loader is None:
        raise ImportError(f"{where}: cannot be loaded as a module")
    module = importlib.util.module_from_spec(spec)
    sys.modules[SCRIPT_MODULE] = module
    spec.loader.exec_module(module)
    return module


def resolve(target: str) -> Callable[[list[str]], Any]:
    """The function ``target`` names (``module:function`` or ``file.py:function``).

    Examples
    --------
    >>> resolve("bertembed._bench.spawn:package_root").__name__
    'package_root'
    """
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(f"{target!r}: expected module:function or file.py:function")
    fn: Callable[[list[str]], Any] = getattr(_module(where), name)
    return fn


def main(argv: Sequence[str]) -> None:
    """Call the function ``argv[0]`` names with ``argv[1:]``; emit what it returns."""
    emit(resolve(argv[0])(list(argv[1:])))


if __name__ == "__main__":
    main(sys.argv[1:])
