"""The record of the machine a run measured on."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
from typing import Any

from .._core.runtime import config


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    return None


def machine_info() -> dict[str, Any]:
    """Platform, CPUs and library versions, for the record of a run.

    Returns
    -------
    dict
        JSON-serialisable.
    """
    info: dict[str, Any] = dict(config())
    info["cpu_model"] = _cpu_model()
    if hasattr(os, "sched_getaffinity"):
        info["usable_cpus"] = len(os.sched_getaffinity(0))
    for dist in ("torch", "onnxruntime", "onnx"):
        info[dist] = _version(dist)
    return info
