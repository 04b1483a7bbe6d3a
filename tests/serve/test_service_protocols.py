"""The service's protocols without a model or a server: bodies as OpenAI's and TEI's clients write and read them.

``bertembed.serve.protocols`` needs NumPy and orjson (the ``serve`` extra); without orjson this
module skips.
"""

from __future__ import annotations

import base64
import json
import re

import numpy as np
import pytest

pytest.importorskip("orjson", reason='the server writes answers with orjson: pip install "bertembed[serve]"')

from bertembed.serve import protocols


@pytest.mark.parametrize(
    ("body", "shape", "texts", "ids"),
    [
        (b'{"texts": ["a", ""]}', "texts", ["a", ""], None),
        (b'{"inputs": "a"}', "tei", ["a"], None),
        (b'{"inputs": ["a", "b"], "normalize": false, "truncate": true}', "tei", ["a", "b"], None),
        (b'{"inputs": [1, 2, 3]}', "tei", None, [[1, 2, 3]]),
        (b'{"inputs": [[1, 2], [3]]}', "tei", None, [[1, 2], [3]]),
    ],
)
def test_embed_bodies(body: bytes, shape: str, texts: list[str] | None, ids: list[list[int]] | None) -> None:
    request = protocols.parse_embed_body(body, max_batch=8)
    assert (request.shape, request.texts, request.ids) == (shape, texts, ids)


def test_tei_defaults_and_options() -> None:
    request = protocols.parse_embed_body(b'{"inputs": "a"}', max_batch=8)
    assert (request.normalize, request.truncate, request.direction) == (True, None, "right")
    request = protocols.parse_embed_body(
        b'{"inputs": "a", "normalize": false, "truncation_direction": "left", "prompt_name": "q"}', max_batch=8
    )
    assert (request.normalize, request.direction, request.prompt_name) == (False, "left", "q")


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b'{"input": "a"}', 400, r"^'model' is a required property$"),
        (b'{"model": "m"}', 400, r"^'input' is a required property$"),
        (b'{"input": "a", "model": "m", "foo": 1}', 400, r"^Unrecognized request argument\(s\) supplied: \['foo'\]$"),
        (b'{"input": [], "model": "m"}', 400, r"^'input' is empty"),
        (b'{"input": [["a"]], "model": "m"}', 400, r"^input\[0\]\[0\] is a string, not a token id$"),
        (b'{"input": [true], "model": "m"}', 400, r"^input\[0\] is a boolean, not a string$"),
        (b'{"input": "a", "model": "m", "encoding_format": "int8"}', 400, r"^'encoding_format' must be 'float' or"),
        (b'{"input": "a", "model": "m", "dimensions": 0}', 400, r"^'dimensions' must be a positive integer, got 0$"),
        (b'{"input": ["a", "b", "c"], "model": "m"}', 400, r"^'input' has 3 inputs, more than the limit of 2"),
    ],
)
def test_openai_bodies_refused(body: bytes, status: int, message: str) -> None:
    with pytest.raises(protocols.BadRequest, match=message) as caught:
        protocols.parse_openai_body(body, max_batch=2)
    assert caught.value.status == status
    error = protocols.openai_error(caught.value)
    assert error["error"]["type"] == "invalid_request_error" and re.search(message, error["error"]["message"])


def test_openai_answer_decodes_like_the_sdk() -> None:
    vectors = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    floats = json.loads(protocols.openai_body(vectors, model="m", encoding_format="float", tokens=9))
    packed = json.loads(protocols.openai_body(vectors, model="m", encoding_format="base64", tokens=9))
    assert floats["usage"] == packed["usage"] == {"prompt_tokens": 9, "total_tokens": 9}
    assert [d["index"] for d in packed["data"]] == [0, 1, 2]
    np.testing.assert_array_equal(np.array([d["embedding"] for d in floats["data"]], np.float32), vectors)
    decoded = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in packed["data"]]
    np.testing.assert_array_equal(decoded, vectors)


def test_dimensions_only_for_models_trained_for_them() -> None:
    request = protocols.parse_openai_body(b'{"input": "a", "model": "m", "dimensions": 128}', max_batch=8)
    with pytest.raises(protocols.BadRequest, match=r"^model 'm' was not trained for reduced dimensions"):
        protocols.check_dimensions(request, 384, [], "m")
    protocols.check_dimensions(request, 384, [256, 128], "m")  # a Matryoshka model: accepted
    request.dimensions = 512
    with pytest.raises(protocols.BadRequest, match=r"^'dimensions' is 512, more than the model's 384$"):
        protocols.check_dimensions(request, 384, [256, 128], "m")
    request.dimensions = 384
    protocols.check_dimensions(request, 384, [], "m")  # the full size is always fine


def test_token_ids_outside_the_table_are_refused() -> None:
    with pytest.raises(protocols.BadRequest, match=r"^inputs\[1\]\[0\] = -1 is not a token id of this model"):
        protocols.check_token_ids("inputs", [[1, 2], [-1]], vocab_size=10)


def test_tei_errors_carry_tei_s_spelling_of_the_kind() -> None:
    """TEI's server writes ``error_type`` as its enum's names (``Validation``, ...); clients generated from
    its OpenAPI schema refuse any other spelling, so a lower-case kind is a programming error here."""
    assert protocols.tei_error(protocols.BadRequest(422, "no")) == {"error": "no", "error_type": "Validation"}
    with pytest.raises(protocols.BadRequest, match=r"^'inputs' is empty") as refused:
        protocols.parse_embed_body(b'{"inputs": []}', max_batch=8)
    assert protocols.tei_error(refused.value)["error_type"] == "Empty"
    with pytest.raises(ValueError, match=r"error_type 'validation' is not one of TEI's \('Unhealthy', 'Backend'"):
        protocols.BadRequest(422, "no", error_type="validation")


@pytest.mark.parametrize("write", ["texts_body", "tei_body", "openai_body"])
def test_float_answers_read_back_as_the_same_float32_bits(write: str) -> None:
    rng = np.random.default_rng(1)
    vectors = rng.standard_normal((4, 384)).astype(np.float32)
    vectors[0, :6] = [0.0, -0.0, 1e-45, -1.17549435e-38, 3.4028235e38, 0.1]  # zeros, subnormal, extremes
    vectors[1] *= np.float32(1e-7)
    if write == "openai_body":
        answer = json.loads(protocols.openai_body(vectors, model="m", encoding_format="float", tokens=1))
        rows = [d["embedding"] for d in answer["data"]]
    else:
        answer = json.loads(getattr(protocols, write)(vectors))
        rows = answer["embeddings"] if write == "texts_body" else answer
    back = np.array(rows, dtype=np.float64).astype(np.float32)  # as a JSON client reads them, then narrows
    np.testing.assert_array_equal(back.view(np.uint32), vectors.view(np.uint32))


def test_answers_take_any_float_array_and_write_float32() -> None:
    vectors = np.arange(6, dtype=np.float64).reshape(2, 3)[:, ::-1] / 3  # float64, not contiguous
    rows = json.loads(protocols.tei_body(vectors))
    np.testing.assert_array_equal(np.array(rows, np.float32), vectors.astype(np.float32))
