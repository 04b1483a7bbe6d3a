"""Calling the layer the way Hugging Face tokenizers hand over their output."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.extras import needs

from bertembed import BertEmbeddings, bert_embeddings


@pytest.fixture
def layer():
    rng = np.random.default_rng(0)
    return BertEmbeddings(
        rng.standard_normal((30, 4)),
        rng.standard_normal((8, 4)),
        rng.standard_normal((2, 4)),
        ln_weight=np.ones(4),
        ln_bias=np.zeros(4),
    )


IDS = [[2, 5, 7, 0], [3, 4, 0, 0]]
TYPES = [[0, 0, 1, 1], [0, 1, 0, 0]]
MASK = [[1, 1, 1, 1], [1, 1, 0, 0]]


def _expected(layer):
    return layer(np.array(IDS), np.array(TYPES))


@pytest.mark.parametrize("convert", [np.array, lambda x: x, lambda x: np.array(x, np.int32)])
def test_transformers_names_and_mapping(layer, convert):
    enc = {
        "input_ids": convert(IDS),
        "token_type_ids": convert(TYPES),
        "attention_mask": convert(MASK),
        "special_tokens_mask": convert(MASK),
        "offset_mapping": [[(0, 1)] * 4] * 2,
        "length": [4, 2],
        "overflow_to_sample_mapping": [0, 1],
    }
    want = _expected(layer)
    np.testing.assert_array_equal(layer(**enc), want)
    np.testing.assert_array_equal(layer(enc), want)
    np.testing.assert_array_equal(layer(input_ids=convert(IDS), segment_ids=convert(TYPES)), want)


def test_batch_encoding_and_torch(layer):
    transformers = needs("transformers", "peers")
    torch = needs("torch", "peers")
    enc = transformers.BatchEncoding(
        {"input_ids": IDS, "token_type_ids": TYPES, "attention_mask": MASK}, tensor_type="pt"
    )
    assert isinstance(enc["input_ids"], torch.Tensor)
    np.testing.assert_array_equal(layer(**enc), _expected(layer))
    np.testing.assert_array_equal(layer(enc), _expected(layer))


def test_tokenizers_encodings(layer):
    tokenizers = needs("tokenizers", "text")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    vocab = {"[PAD]": 0, "[UNK]": 1, "a": 2, "b": 3, "c": 4}
    tok = tokenizers.Tokenizer(WordLevel(vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = Whitespace()
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    encodings = tok.encode_batch(["a b c", "c a"])
    got = layer(encodings)
    want = layer(np.array([e.ids for e in encodings]), np.array([e.type_ids for e in encodings]))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(layer(encodings[0]), want[0])
    tok.no_padding()
    with pytest.raises(ValueError, match=r"token_ids is ragged: its rows have lengths 3, 2; pad them.*enable_padding"):
        layer(tok.encode_batch(["a b c", "c a"]))


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"token_ids": IDS, "input_ids": IDS}, TypeError, "token_ids and input_ids are the same argument"),
        (
            {"input_ids": IDS, "segment_ids": TYPES, "token_type_ids": TYPES},
            TypeError,
            "segment_ids and token_type_ids are the same argument",
        ),
        ({"input_ids": IDS, "colour": 1}, TypeError, "unexpected keyword argument 'colour'"),
        ({}, TypeError, "missing the token ids"),
        ({"token_ids": {"input_ids": IDS, "colour": IDS}}, TypeError, "has the key 'colour'"),
        ({"token_ids": {"attention_mask": MASK}}, TypeError, "has no 'input_ids'"),
        (
            {"token_ids": {"input_ids": IDS, "attention_mask": MASK}, "attention_mask": MASK},
            TypeError,
            "attention_mask is given twice",
        ),
        (
            {"input_ids": IDS, "attention_mask": [[1, 1, 1, 2], [1, 1, 0, 0]]},
            ValueError,
            r"only 0 \(padding\) and 1 \(a token\); attention_mask\[0, 3\] = 2",
        ),
        (
            {"input_ids": IDS, "attention_mask": [[1, -1, 1, 1], [1, 1, 0, 0]]},
            ValueError,
            r"attention_mask\[0, 1\] = -1",
        ),
        (
            {"input_ids": IDS, "attention_mask": [[1, 1]]},
            ValueError,
            "attention_mask has shape .1, 2., input_ids has shape",
        ),
        (
            {"input_ids": [[1, 2, 3], [4, 5]]},
            ValueError,
            r"input_ids is ragged: its rows have lengths 3, 2; pad them.*padding=True",
        ),
        ({"input_ids": IDS, "token_type_ids": [[0, 1], [0]]}, ValueError, "token_type_ids is ragged"),
        ({"input_ids": IDS, "attention_mask": [[1, 1], [1]]}, ValueError, "attention_mask is ragged"),
        ({"input_ids": [[101, 2**70]]}, IndexError, r"input_ids\[0, 1\] = 1180591620717411303424 is out of range"),
        ({"token_ids": [-(2**70)]}, IndexError, r"token_ids\[0\] = -1180591620717411303424 is out of range"),
        ({"input_ids": [[1, None]]}, ValueError, r"input_ids\[0, 1\] is missing"),
        ({"input_ids": [[1, "a"]]}, TypeError, "input_ids must be an integer array"),
    ],
)
def test_errors(layer, kwargs, error, match):
    with pytest.raises(error, match=match):
        layer(**kwargs)


def test_positional_mapping_with_keyword_twice(layer):
    with pytest.raises(TypeError, match="token_type_ids is given twice"):
        layer({"input_ids": IDS, "token_type_ids": TYPES}, token_type_ids=TYPES)


def test_mask_changes_nothing_except_for_zero_masked_layers(layer):
    ids = np.array(IDS)
    np.testing.assert_array_equal(layer(ids, attention_mask=np.array(MASK, bool)), layer(ids))
    zl = BertEmbeddings(np.ones((30, 4)), None, zero_masked_rows=True)
    got = zl(ids, attention_mask=MASK)
    np.testing.assert_array_equal(got[1, 2:], 0.0)
    np.testing.assert_array_equal(got[0], zl(ids)[0])


def test_nullable_integers_with_na(layer):
    pd = needs("pandas", "peers")
    s = pd.Series([2, None, 3], dtype="Int64")
    with pytest.raises(ValueError, match=r"token_ids holds missing values \(NA\), the first at \[1\]"):
        layer(s)
    np.testing.assert_array_equal(layer(s.fillna(0)), layer(np.array([2, 0, 3])))
    with pytest.raises(ValueError, match=r"token_ids holds missing values"):
        bert_embeddings(s, None, np.ones((30, 4)), None, None)


def test_function_gives_the_same_errors():
    tok = np.ones((30, 4))
    with pytest.raises(ValueError, match=r"token_ids is ragged: its rows have lengths 2, 1"):
        bert_embeddings([[1, 2], [3]], None, tok, None, None)
    with pytest.raises(ValueError, match=r"segment_ids is ragged"):
        bert_embeddings([[1, 2], [3, 4]], [[0], [0, 1]], tok, None, np.ones((2, 4)))
    with pytest.raises(IndexError, match=r"token_ids\[0, 1\] = 1180591620717411303424 is out of range"):
        bert_embeddings([[1, 2**70]], None, tok, None, None)


def test_from_pretrained_tokenizer_file(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(ValueError, match=r"tokenizer.json: this is a tokenizer file, not weights; give the model's"):
        BertEmbeddings.from_pretrained(tmp_path / "tokenizer.json")


def test_from_pretrained_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(
        FileNotFoundError,
        match=r"looks like a Hugging Face Hub id.*does not download.*"
        r"hf download sentence-transformers/all-MiniLM-L6-v2.*snapshot_download",
    ):
        BertEmbeddings.from_pretrained("sentence-transformers/all-MiniLM-L6-v2")
    with pytest.raises(FileNotFoundError, match=r"no such file or directory$"):
        BertEmbeddings.from_pretrained(tmp_path / "a" / "b")
