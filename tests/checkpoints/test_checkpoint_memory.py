"""A bfloat16 checkpoint costs (almost) no private memory: its tables are the file's pages.

A BERT-base-shaped bfloat16 checkpoint is loaded and called once in a fresh
process; the growth of its private memory (RssAnon, Linux) must stay within
the memory goal's 8 MiB. The control, the same checkpoint converted to float32 at
load time (a private copy, as before tables were read natively), grows by
about twice the table, which shows the measurement can fail.
"""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from helpers.sanitizer import not_under_asan
from helpers.weights import bfloat16_bits, write_safetensors

pytestmark = [pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc"), not_under_asan]

V, P, H = 30522, 512, 768

CHILD = textwrap.dedent(
    """
    import sys, numpy as np, bertembed

    def anon():
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1]) * 1024
    ids = np.random.default_rng(0).integers(0, 30522, (1, 128))
    sids = np.zeros_like(ids)
    before = anon()
    layer = bertembed.BertEmbeddings.from_pretrained(sys.argv[1], table_dtype=sys.argv[2] or None)
    layer(ids, sids)
    print(anon() - before, layer.table_dtype)
    """
)


def write_bf16_checkpoint(directory: Path) -> Path:
    rng = np.random.default_rng(0)
    shapes = {
        "embeddings.word_embeddings.weight": (V, H),
        "embeddings.position_embeddings.weight": (P, H),
        "embeddings.token_type_embeddings.weight": (2, H),
        "embeddings.LayerNorm.weight": (H,),
        "embeddings.LayerNorm.bias": (H,),
    }
    tensors = {
        name: ("BF16", bfloat16_bits(rng.standard_normal(shape, dtype=np.float32) * 0.05))
        for name, shape in shapes.items()
    }
    directory.mkdir()
    write_safetensors(directory / "model.safetensors", tensors)
    (directory / "config.json").write_text(json.dumps({"model_type": "bert", "hidden_size": H}))
    return directory


def private_growth(path: Path, table_dtype: str = "") -> tuple[int, str]:
    res = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), table_dtype], capture_output=True, text=True, timeout=120, check=True
    )
    grown, dtype = res.stdout.split()
    return int(grown), dtype


def test_bfloat16_checkpoint_is_mapped_not_copied(tmp_path):
    path = write_bf16_checkpoint(tmp_path / "bf16")
    table = V * H * 2
    grown, dtype = private_growth(path)
    print(f"\nbfloat16 checkpoint ({table / 2**20:.1f} MiB token table): private memory +{grown / 2**20:.2f} MiB")
    assert dtype == "bfloat16"
    assert grown <= 8 << 20
    control, dtype = private_growth(path, "float32")
    print(f"converted to float32 at load time: +{control / 2**20:.2f} MiB")
    assert dtype == "float32"
    # the float32 copy of the token table alone (5% allowed for memory freed meanwhile)
    assert control >= 0.95 * 2 * table
