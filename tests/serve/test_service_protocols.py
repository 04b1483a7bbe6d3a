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


#: Bodies a hostile or careless client sends, on either route: each is a 400 with this message.
BIG = "9" * 5000
STRICT_JSON = {
    "5000-digit token id": (b'{"inputs": [[101, %s]]}' % BIG.encode(), r"^body has an integer of more than \d+ digits"),
    "5000-digit dimensions": (b'{"inputs": "a", "dimensions": -%s}' % BIG.encode(), r"^body has an integer of more"),
    "NaN": (b'{"inputs": [[101, NaN]]}', r"^body is not valid JSON: NaN is not a JSON value"),
    "Infinity": (b'{"inputs": "a", "dimensions": Infinity}', r"^body is not valid JSON: Infinity is not a JSON"),
    "-Infinity": (b'{"input": [-Infinity]}', r"^body is not valid JSON: -Infinity is not a JSON value"),
    "a key twice": (b'{"inputs": "a", "inputs": [[1]]}', r"^body has the key 'inputs' twice in one object"),
    "a key twice, nested": (b'{"x": [{"a": 1, "a": 2}]}', r"^body has the key 'a' twice in one object"),
    "UTF-16": ('{"inputs": "a"}'.encode("utf-16"), r"^body is not valid JSON: 'utf-8' codec can't decode byte 0xff"),
    "UTF-32": ('{"inputs": "a"}'.encode("utf-32"), r"^body is not valid JSON: 'utf-8' codec can't decode byte 0xff"),
    "an encoded surrogate": (b'{"texts": ["\xed\xa0\x80"]}', r"^body is not valid JSON: 'utf-8' codec can't decode"),
    "nested too deeply": (b"[" * 100000 + b"]" * 100000, r"^body is not valid JSON: nested too deeply$"),
    "two byte-order marks": (b"\xef\xbb\xbf\xef\xbb\xbf{}", r"^body is not valid JSON: Unexpected UTF-8 BOM"),
}


@pytest.mark.parametrize("case", list(STRICT_JSON))
@pytest.mark.parametrize("parse", [protocols.parse_embed_body, protocols.parse_openai_body])
def test_json_is_read_strictly(parse, case: str) -> None:
    body, message = STRICT_JSON[case]
    with pytest.raises(protocols.BadRequest, match=message) as refused:
        parse(body, max_batch=8)
    assert (refused.value.status, refused.value.error_type) == (400, "Validation")


def test_a_byte_order_mark_is_ignored_and_integers_up_to_python_s_limit_are_read() -> None:
    assert protocols.parse_embed_body(b'\xef\xbb\xbf{"texts": ["a"]}', max_batch=8).texts == ["a"]
    request = protocols.parse_embed_body(b'{"inputs": [[%s]]}' % (b"1" * 4300), max_batch=8)
    with pytest.raises(protocols.BadRequest, match=r"^inputs\[0\]\[0\] = an integer of 4300 digits is not a token"):
        protocols.check_token_ids("inputs", request.ids or [], vocab_size=10)


def test_without_the_interpreter_s_digit_limit_integers_are_bounded_all_the_same(monkeypatch) -> None:
    """Python 3.10 before 3.10.7 has no limit (and ``sys.set_int_max_str_digits(0)`` removes it): reading
    a million digits would take minutes, so the reader stops at :data:`protocols.MAX_INT_DIGITS` itself."""
    import sys

    monkeypatch.setattr(sys, "get_int_max_str_digits", lambda: 0, raising=False)
    with pytest.raises(protocols.BadRequest, match=r"^body has an integer of more than 4300 digits"):
        protocols.parse_embed_body(b'{"inputs": [[%s]]}' % (b"7" * 1_000_000), max_batch=8)
    assert protocols.parse_embed_body(b'{"inputs": [[%s]]}' % (b"7" * 4300), max_batch=8).ids == [[int("7" * 4300)]]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"texts": []}', r"^'texts' is empty: send at least one text$"),
        (b'{"inputs": []}', r"^'inputs' is empty: send at least one input$"),
        (b'{"inputs": [[1], []]}', r"^inputs\[1\] is an empty list of token ids$"),
    ],
)
def test_empty_input_is_tei_s_empty_400(body: bytes, message: str) -> None:
    """TEI answers its kind ``Empty`` with 400 (``ErrorType::Empty => StatusCode::BAD_REQUEST``)."""
    with pytest.raises(protocols.BadRequest, match=message) as refused:
        protocols.parse_embed_body(body, max_batch=8)
    assert (refused.value.status, refused.value.error_type) == (400, "Empty")
    with pytest.raises(ValueError, match=r"^TEI answers error_type 'Empty' with 400, not 422$"):
        protocols.BadRequest(422, "no", error_type="Empty")


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b'{"inputs": "a", "dimensions": 0}', 422, r"^'dimensions' must be a positive integer, got 0$"),
        (b'{"inputs": "a", "dimensions": -1}', 422, r"^'dimensions' must be a positive integer, got -1$"),
        (b'{"inputs": "a", "dimensions": "8"}', 422, r"^'dimensions' must be a positive integer, got '8'$"),
        (b'{"inputs": "a", "dimensions": true}', 422, r"^'dimensions' must be a positive integer, got true$"),
        (b'{"inputs": "a", "prompt_name": "\\udfff"}', 422, r"^'prompt_name' is not valid Unicode: unpaired"),
        (
            b'{"inputs": "a", "truncation_direction": "%s"}' % (b"x" * 10000),
            422,
            r"^'truncation_direction' must be 'Right' or 'Left', got 'x{60}'\.\.\. \(10000 characters\)$",
        ),
        (
            b'{"inputs": "a", %s}' % b", ".join(b'"f%d": 1' % k for k in range(12)),
            422,
            r"^unknown field\(s\) \['f0', 'f1', 'f10', 'f11', 'f2', .*'f7', and 2 more\]: send",
        ),
    ],
)
def test_tei_fields_refused(body: bytes, status: int, message: str) -> None:
    with pytest.raises(protocols.BadRequest, match=message) as refused:
        protocols.parse_embed_body(body, max_batch=8)
    assert refused.value.status == status


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ('"encoding_format": false', r"^'encoding_format' must be 'float' or 'base64', got false$"),
        ('"encoding_format": null', r"^'encoding_format' must be 'float' or 'base64', got null$"),
        ('"encoding_format": []', r"^'encoding_format' must be 'float' or 'base64', got an array$"),
        ('"encoding_format": ""', r"^'encoding_format' must be 'float' or 'base64', got ''$"),
        ('"encoding_format": 0', r"^'encoding_format' must be 'float' or 'base64', got 0$"),
        ('"encoding_format": "FLOAT"', r"^'encoding_format' must be 'float' or 'base64', got 'FLOAT'$"),
        ('"dimensions": [[[1]]]', r"^'dimensions' must be a positive integer, got an array$"),
        ('"dimensions": 1.5', r"^'dimensions' must be a positive integer, got a number$"),
        ('"user": 7', r"^'user' must be a string, got a number$"),
        ('"user": "\\ud800"', r"^'user' is not valid Unicode: unpaired surrogate at character 0$"),
    ],
)
def test_openai_fields_refused(fields: str, message: str) -> None:
    body = b'{"input": "a", "model": "m", %s}' % fields.encode()
    with pytest.raises(protocols.BadRequest, match=message) as refused:
        protocols.parse_openai_body(body, max_batch=8)
    assert refused.value.status == 400
    assert protocols.openai_error(refused.value)["error"]["type"] == "invalid_request_error"


def test_openai_optional_fields_may_be_null_or_absent_but_encoding_format_is_a_string() -> None:
    request = protocols.parse_openai_body(b'{"input": "a", "model": "m", "dimensions": null, "user": null}', 8)
    assert (request.dimensions, request.encoding_format) == (None, "float")


def test_what_a_message_quotes_can_always_be_written() -> None:
    """Starlette writes an error body with ``json.dumps(ensure_ascii=False).encode("utf-8")``: a client's
    unpaired surrogate echoed as it is would fail there (a 500); a huge value would make a huge answer."""
    with pytest.raises(protocols.BadRequest) as refused:
        protocols.parse_openai_body(b'{"input": "a", "model": "m", "\\udbff": 1}', max_batch=8)
    assert refused.value.message == "Unrecognized request argument(s) supplied: ['\\udbff']"
    assert refused.value.param == "\\udbff"
    with pytest.raises(protocols.BadRequest, match=r"^'model' is not valid Unicode"):
        protocols.parse_openai_body(b'{"input": "a", "model": "\\ud800"}', max_batch=8)
    echoed = protocols.BadRequest(404, "The model '\ud800" + "m" * 10000 + "' does not exist", param="\ud800" * 200)
    assert echoed.message.startswith("The model '\\ud800mmm") and len(echoed.message) < protocols.MAX_MESSAGE + 40
    assert echoed.message.endswith(" more characters)") and len(echoed.param or "") < 6 * protocols.MAX_PARAM
    for body in (protocols.tei_error(echoed), protocols.openai_error(echoed)):
        json.dumps(body, ensure_ascii=False, allow_nan=False).encode("utf-8")


@pytest.mark.parametrize(
    ("value", "taken"),
    [
        (None, True),
        ("", True),
        ("application/json", True),
        ("Application/JSON; charset=UTF-8", True),
        ("application/json;charset=latin-1", True),  # parameters are not looked at: the body is UTF-8 JSON
        ("application/vnd.api+json", True),
        ("application/x-www-form-urlencoded", True),  # curl -d, wget --post-data, urllib, PowerShell
        ("text/plain;charset=UTF-8", True),  # a browser's fetch() with a string body
        ("multipart/form-data; boundary=----x", False),  # curl -F
        ("application/xml", False),
        ("text/xml", False),
        ("application/octet-stream", False),
        ("application/x-ndjson", False),
        ("application/jsonl", False),
        ("application/json-seq", False),
        ("json", False),
        ("application/json garbage", False),
        ("+json", False),
    ],
)
def test_content_type(value: str | None, taken: bool) -> None:
    if taken:
        assert protocols.check_content_type(value) is None
        return
    with pytest.raises(protocols.BadRequest, match=r"^Content-Type '.*' is not JSON: send the JSON body with") as no:
        protocols.check_content_type(value)
    assert (no.value.status, no.value.error_type) == (415, "Validation")
    assert protocols.openai_error(no.value)["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_vector_that_is_not_finite_is_a_backend_error_not_a_null(bad: float) -> None:
    """orjson writes NaN and infinity as ``null``: the answer would not read back as vectors."""
    vectors = np.ones((3, 4), np.float32)
    vectors[1, 2] = bad
    writers = [
        protocols.texts_body,
        protocols.tei_body,
        lambda v: protocols.openai_body(v, model="m", encoding_format="float", tokens=1),
        lambda v: protocols.openai_body(v, model="m", encoding_format="base64", tokens=1),
    ]
    for write in writers:
        with pytest.raises(protocols.BadRequest, match=r"not a finite number \(NaN or infinity\) for input 1$") as e:
            write(vectors)
        assert (e.value.status, e.value.error_type) == (424, "Backend")
        assert protocols.openai_error(e.value)["error"]["type"] == "server_error"
