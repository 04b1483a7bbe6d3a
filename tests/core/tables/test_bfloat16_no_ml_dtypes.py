"""bfloat16 tables and checkpoints never import ml_dtypes (it takes seconds to import)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np

import bertembed

_MAKE = """
import sys, numpy as np, bertembed
rng = np.random.default_rng(0)
tok, pos = rng.standard_normal((300, 32), dtype=np.float32), rng.standard_normal((64, 32), dtype=np.float32)
ids = rng.integers(0, 300, (4, 64))
"""


def _fresh(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", _MAKE + textwrap.dedent(code)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_converting_loading_and_calling_bfloat16_never_import_ml_dtypes(tmp_path):
    out = _fresh(
        f"""
        layer = bertembed.BertEmbeddings(tok, pos, ln_weight=np.ones(32), ln_bias=np.zeros(32), table_dtype="bfloat16")
        np.save({str(tmp_path / "converted.npy")!r}, layer(ids))
        layer.save_pretrained({str(tmp_path / "saved")!r})
        print("ml_dtypes" in sys.modules, layer.table_dtype)
        """
    )
    assert out.split() == ["False", "bfloat16"]
    out = _fresh(
        f"""
        layer = bertembed.BertEmbeddings.from_pretrained({str(tmp_path / "saved")!r})
        np.save({str(tmp_path / "loaded.npy")!r}, layer(ids, out=np.empty((4, 64, 32), np.float32)))
        print("ml_dtypes" in sys.modules, layer.table_dtype, layer.dtype)
        """
    )
    assert out.split() == ["False", "bfloat16", "float32"]
    # the same values as a layer built here from the same tables
    rng = np.random.default_rng(0)
    tok, pos = rng.standard_normal((300, 32), dtype=np.float32), rng.standard_normal((64, 32), dtype=np.float32)
    ids = rng.integers(0, 300, (4, 64))
    want = bertembed.BertEmbeddings(tok, pos, ln_weight=np.ones(32), ln_bias=np.zeros(32), table_dtype="bfloat16")(ids)
    np.testing.assert_array_equal(np.load(tmp_path / "converted.npy"), want)
    np.testing.assert_array_equal(np.load(tmp_path / "loaded.npy"), want)
