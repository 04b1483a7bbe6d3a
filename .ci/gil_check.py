"""The GIL stays disabled on free-threaded CPython: a script and a pytest plugin.

As a script (``python .ci/gil_check.py``): the interpreter must be a
free-threaded build, and importing NumPy and bertembed and computing once
must leave the GIL disabled (an extension module that does not declare
free-threading support re-enables it at import, with a RuntimeWarning, which
is made an error here). Run it without ``PYTHON_GIL`` set, which would force
the answer.

As a pytest plugin (``-p gil_check`` with this directory on ``sys.path``):
the session fails if the GIL is enabled when it ends.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import warnings


def pytest_sessionfinish(session, exitstatus):
    if sys._is_gil_enabled():
        print("\ngil_check: the GIL is enabled at the end of the session", file=sys.stderr)
        session.exitstatus = 1
    else:
        print("\ngil_check: the GIL stayed disabled")


def main() -> int:
    if "PYTHON_GIL" in os.environ:
        print("gil_check: unset PYTHON_GIL first (it forces the answer)", file=sys.stderr)
        return 1
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):
        print(f"gil_check: {sys.version} is not a free-threaded build", file=sys.stderr)
        return 1
    warnings.simplefilter("error", RuntimeWarning)
    import numpy as np

    import bertembed

    out = bertembed.bert_embeddings([[1, 2]], None, np.ones((4, 3)), np.ones((4, 3)), None)
    if out.shape != (1, 2, 3) or sys._is_gil_enabled():
        print("gil_check: the GIL is enabled after importing bertembed", file=sys.stderr)
        return 1
    print(
        f"gil_check: GIL disabled after import; bertembed {bertembed.__version__} from "
        f"{bertembed.__file__}, NumPy {np.__version__}, OpenMP {bertembed.openmp_enabled()}, "
        f"Python {sys.version.split()[0]}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
