"""Optional packages: a test that needs one skips, naming the extra that installs it.

``pip install ".[test]"`` runs the suite with only the test extra; a test
that needs more calls :func:`needs`, so that its skip says what to install::

    ml_dtypes = needs("ml_dtypes", "bfloat16")
    # SKIPPED ... needs ml_dtypes: pip install "bertembed[bfloat16]"

The extras are pyproject.toml's ``[project.optional-dependencies]``; ``peers``
has everything the suite compares against (torch, transformers, ONNX Runtime,
the packaged checkpoints).
"""

from __future__ import annotations

from types import ModuleType

import pytest


def why(module: str, extra: str | None) -> str:
    """The skip reason: the missing module and the pip command that installs it
    (``extra=None``: a package no extra lists, installed by its own name)."""
    how = f'pip install "bertembed[{extra}]"' if extra else f"pip install {module.partition('.')[0]}"
    return f"needs {module}: {how}"


def needs(module: str, extra: str | None) -> ModuleType:
    """Import `module` and return it, or skip the test saying which extra installs it."""
    __tracebackhide__ = True  # the skip is reported at the caller's line
    return pytest.importorskip(module, reason=why(module, extra))
