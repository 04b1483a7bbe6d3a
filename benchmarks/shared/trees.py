"""Run code in a fresh Python whose bertembed is another source tree's: comparing two builds.

``call_overhead.py``, ``load_checks.py`` and ``isa_builds.py`` compare trees
(``--tree NAME=SRC``), each in its own processes. The child's code is a
short program on purpose: it runs against that tree's bertembed (which may
lack this harness), so nothing of this tree can be imported there by name;
the prelude loads this harness's :mod:`bertembed._bench.timing` by its file
(:data:`bertembed._bench.spawn.TIMING_FILE`) so that every tree is timed by
the same code.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from bertembed._bench.spawn import CHILD_TIMEOUT_S, RESULT_MARK, TIMING_FILE, run_child

_TREE_PRELUDE = """\
import importlib.util as _util, json as _json, os as _os, sys as _sys
_spec = _util.spec_from_file_location("bertembed_harness_timing", {timing_file!r})
timing = _util.module_from_spec(_spec)
_sys.modules[_spec.name] = timing
_spec.loader.exec_module(timing)
import bertembed
_file = _os.path.realpath(bertembed.__file__)
if not _file.startswith({tree!r} + _os.sep):
    raise SystemExit("bertembed was imported from " + _file + ", not from the tree {tree}")
def emit(result):
    print({mark!r} + _json.dumps({{**result, "bertembed_file": _file}}), flush=True)
"""


def run_in_tree(
    code: str,
    tree: str | os.PathLike[str],
    args: Sequence[str] = (),
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = CHILD_TIMEOUT_S,
) -> Any:
    """Run ``code`` in a fresh Python whose ``bertembed`` is the one in directory ``tree``.

    For comparing two builds or revisions, each in its own processes. The
    code runs after a prelude that imports ``bertembed`` from ``tree``
    (refusing to run if it came from elsewhere) and binds ``timing`` to
    *this* harness's :mod:`~bertembed._bench.timing`, loaded from its file
    (so every tree is timed by the same code, whatever its own harness is),
    and ``emit(result)``, which reports a dict with ``bertembed_file`` added.

    Parameters
    ----------
    code : str
        Python source; ``sys.argv[1:]`` are ``args``.
    tree : path
        A directory that holds a ``bertembed`` package (``src/`` of a
        checkout, with its compiled kernel).

    Returns
    -------
    dict
        What the child emitted.

    Raises
    ------
    RuntimeError
        As :func:`bertembed._bench.spawn.run_child`.
    """
    root = os.path.realpath(tree)
    prelude = _TREE_PRELUDE.format(timing_file=TIMING_FILE, tree=root, mark=RESULT_MARK)
    return run_child(prelude + code, args, env=env, paths=[root], timeout=timeout)


def script_code(path: str | os.PathLike[str], body: str) -> str:
    """Child code that imports ``sys``, loads the Python file ``path`` as the module
    ``script``, then runs ``body``.

    For a ``benchmarks/`` script whose child processes call its own
    functions (with :func:`~bertembed._bench.spawn.run_child`, ``body`` imports ``emit`` itself;
    :func:`run_in_tree`'s prelude provides it).
    """
    return (
        "import importlib.util as _util\n"
        "import sys\n"
        f"_spec = _util.spec_from_file_location('bertembed_bench_script', {os.fspath(path)!r})\n"
        "script = _util.module_from_spec(_spec)\n"
        "sys.modules[_spec.name] = script\n"
        "_spec.loader.exec_module(script)\n"
        f"{body}\n"
    )
