"""``show_config``: what this build of bertembed is and can do."""

from __future__ import annotations

import os
import platform
import sys

import numpy as np

from . import _kernel
from ._openmp import openmp_runtime
from ._version import __version__


def config() -> dict[str, object]:
    """The build and runtime facts that ``show_config`` prints, as a dict."""
    info = _kernel.build_info()
    return {
        "bertembed": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "numpy": np.__version__,
        "compiler": info["compiler"],
        "openmp": bool(_kernel.openmp_enabled()),
        "openmp_version": info["openmp_version"],
        "openmp_runtime": openmp_runtime(),
        "row_kernel_isa": info["isa"],
        "max_threads": int(_kernel.max_threads()),
        "cpu_count": os.cpu_count(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "table_dtypes": "float32, float64, float16, bfloat16 (read as stored); int8 token tables",
        "result_dtypes": "float32, float64, float16, bfloat16",
        "id_dtypes": "any integer (int32/int64 natively)",
    }


def show_config() -> None:
    """Print version, OpenMP status, threads and compiler of this build.

    Examples
    --------
    >>> import bertembed
    >>> bertembed.show_config()  # doctest: +ELLIPSIS
    bertembed: ...
    """
    for key, value in config().items():
        print(f"{key}: {value}")
