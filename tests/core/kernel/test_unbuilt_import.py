"""Importing bertembed from a source tree whose extension was never built says so, and how to build it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import ROOT

SRC = ROOT / "src"
pytestmark = pytest.mark.skipif(
    not (SRC / "bertembed" / "__init__.py").exists(), reason="src/ is not beside the tests (installed wheel)"
)


def _unbuilt_tree(tmp_path: Path) -> Path:
    """A copy of src/ without the compiled extension (nor its generated C)."""
    tree = tmp_path / "src"
    shutil.copytree(SRC, tree, ignore=shutil.ignore_patterns("*.so", "*.pyd", "_kernel.c", "__pycache__", "*.egg-info"))
    assert not list(tree.rglob("_kernel*.so"))
    return tree


def _import_in(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", "import bertembed"],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_unbuilt_tree_says_the_extension_is_not_built(tmp_path: Path) -> None:
    proc = _import_in(_unbuilt_tree(tmp_path))
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: bertembed's compiled extension (bertembed._core._kernel) is not built in ")
    assert "pip install ." in last and "build_ext --inplace" in last
    assert "circular import" not in proc.stderr


def test_other_import_errors_are_not_masked(tmp_path: Path) -> None:
    tree = _unbuilt_tree(tmp_path)
    # an extension that exists but fails to load (a missing library, say) keeps its own message
    kernel = tree / "bertembed" / "_core" / "_kernel.py"
    kernel.write_text('raise ImportError("libgomp.so.1: cannot open shared object")\n')
    proc = _import_in(tree)
    assert proc.returncode != 0
    assert "libgomp.so.1: cannot open shared object" in proc.stderr
    assert "is not built" not in proc.stderr
