"""``import bertembed`` loads only what a layer built from arrays needs.

The checkpoint code (readers, families, the saver), ``threading``,
``pathlib`` and ``ml_dtypes`` are imported when first used, so that a worker's start-up does
not pay for them (issue: import time within 1.3x ``import numpy``).
"""

import json
import subprocess
import sys

import pytest

_PROBE = """
import json, sys
import bertembed
print(json.dumps(sorted(sys.modules)))
"""


def _modules_after(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


@pytest.fixture(scope="module")
def added_by_bertembed() -> set[str]:
    """The modules ``import bertembed`` loads beyond those ``import numpy`` loads."""
    return _modules_after(_PROBE) - _modules_after("import json, sys, numpy; print(json.dumps(sorted(sys.modules)))")


@pytest.mark.parametrize(
    "module",
    [
        "bertembed._checkpoints.load",
        "bertembed._checkpoints.save",
        "bertembed._checkpoints.readers",
        "bertembed._checkpoints.families",
        "zipfile",
        "threading",
        "pathlib",
        "ml_dtypes",
    ],
)
def test_import_leaves_out(module, added_by_bertembed):
    assert module not in added_by_bertembed


def test_the_checkpoint_code_comes_with_its_first_use(tmp_path):
    code = f"""
import json, sys
import numpy as np
import bertembed
layer = bertembed.BertEmbeddings(np.ones((4, 2), np.float32), np.ones((3, 2), np.float32))
layer.save_pretrained({str(tmp_path)!r})
again = bertembed.BertEmbeddings.from_pretrained({str(tmp_path)!r})
print(json.dumps(sorted(sys.modules)))
"""
    seen = _modules_after(code)
    assert {"bertembed._checkpoints.load", "bertembed._checkpoints.save"} <= seen
