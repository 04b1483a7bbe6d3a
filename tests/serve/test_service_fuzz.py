"""The request parsing and checks under any body, without HTTP or a model: a 4xx, never another exception.

hypothesis writes bodies (``fuzz_bodies``: each route's fields with values of
every kind, numbers JSON's writers never write, keys twice, unpaired
surrogates, spoilt bytes) for :func:`~bertembed.serve.protocols.parse_embed_body`
and :func:`~bertembed.serve.protocols.parse_openai_body`, and values for the
checks the server runs after them (``check_dimensions``, ``check_token_ids``,
the ``X-Bertembed-Unknown`` and ``Content-Type`` headers) and for the body
writers. The only exception allowed is :class:`~bertembed.serve.protocols.BadRequest`
with a 4xx whose error bodies Starlette can write; the kept corpus
(``tests/serve/fuzz_corpus/``) is replayed the same way.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("orjson", reason='the server writes answers with orjson: pip install "bertembed[serve]"')
hypothesis = pytest.importorskip("hypothesis", reason='needs hypothesis: pip install "bertembed[test]"')
from fuzz_bodies import (  # noqa: E402
    CONTENT_TYPES,
    JSON_VALUES,
    MAX_CORPUS_BODY,
    MODEL,
    TEXT,
    Obj,
    bodies,
    check_refusal,
    corpus,
    dump,
)
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

from bertembed.serve import protocols  # noqa: E402

MAX_BATCH = 8
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PARSERS = {"embed": protocols.parse_embed_body, "openai": protocols.parse_openai_body}


def _parse(route: str, body: bytes) -> protocols.EmbedRequest | None:
    """The parsed request, or None after checking the refusal."""
    try:
        request = PARSERS[route](body, MAX_BATCH)
    except protocols.BadRequest as exc:
        check_refusal(exc)
        return None
    assert request.shape == ("openai" if route == "openai" else ("texts" if b'"texts"' in body else "tei"))
    assert (request.texts is None) != (request.ids is None)
    assert 1 <= request.count
    for text in request.texts or []:
        text.encode("utf-8")  # the tokenizer gets valid Unicode
    assert all(ids and all(type(i) is int for i in ids) for ids in request.ids or [])
    assert request.dimensions is None or (type(request.dimensions) is int and request.dimensions >= 1)
    assert request.encoding_format in protocols.ENCODING_FORMATS
    assert request.direction in ("right", "left")
    return request


def _then(request: protocols.EmbedRequest) -> None:
    """What the server checks next, on the parsed request: dimensions, token ids, the headers."""
    for full, trained in ((8, []), (8, [4, 2]), (384, [256])):
        try:
            protocols.check_dimensions(request, full, trained, MODEL)
        except protocols.BadRequest as exc:
            check_refusal(exc)
    if request.ids is not None:
        try:
            protocols.check_token_ids("input", request.ids, vocab_size=50)
            assert all(0 <= i < 50 for ids in request.ids for i in ids)
        except protocols.BadRequest as exc:
            check_refusal(exc)


@FUZZ
@given(bodies("embed"))
@example(b'{"inputs": [[1, %s]]}' % (b"9" * 5000))
@example(b'{"inputs": "a", "dimensions": -%s}' % (b"9" * 5000))
@example(b'{"inputs": [[1e400]]}')
@example(b'{"inputs": [[101, NaN]]}')
@example(b'{"inputs": "a", "dimensions": Infinity}')
@example(b'{"inputs": []}')
@example(b'{"inputs": [[]]}')
@example(b'{"texts": []}')
@example(b'{"inputs": "a", "inputs": "b"}')
@example(b'\xef\xbb\xbf{"texts": ["a"]}')
@example('{"texts": ["a"]}'.encode("utf-16"))
@example(b'{"texts": ["\xed\xa0\x80"]}')
@example(b'{"inputs": "a", "dimensions": 0}')
@example(b'{"inputs": "a", "\\ud800": 1}')
@example(b"[" * 50000 + b"]" * 50000)
def test_any_embed_body_is_parsed_or_refused_with_a_4xx(body: bytes) -> None:
    request = _parse("embed", body)
    if request is not None:
        _then(request)


@FUZZ
@given(bodies("openai"))
@example(b'{"input": "a", "model": "m", "dimensions": %s}' % (b"9" * 5000))
@example(b'{"input": "a", "model": "m", "encoding_format": false}')
@example(b'{"input": "a", "model": "m", "encoding_format": null}')
@example(b'{"input": "a", "model": "m", "encoding_format": []}')
@example(b'{"input": "a", "model": "m", "dimensions": -Infinity}')
@example(b'{"input": "a", "model": "\\ud800"}')
@example(b'{"input": "a", "model": "m", "\\udbff": 1}')
@example(b'{"input": "a", "model": "m", "user": {"id": 1}}')
@example(b'{"input": [[]], "model": "m"}')
def test_any_openai_body_is_parsed_or_refused_with_a_4xx(body: bytes) -> None:
    request = _parse("openai", body)
    if request is not None:
        _then(request)


@FUZZ
@given(st.sampled_from(["embed", "openai"]), JSON_VALUES)
def test_any_json_value_is_parsed_or_refused_with_a_4xx(route: str, value: object) -> None:
    """Whatever JSON a client sends, as the whole body or as any field."""
    _parse(route, dump(value).encode())
    fields = {"embed": ("inputs", "texts"), "openai": ("input", "model")}[route]
    for key in (*fields, *protocols.TEI_FIELDS, *protocols.OPENAI_FIELDS):
        base = Obj([("input", "a"), ("model", MODEL)] if route == "openai" else [("inputs", "a")])
        body = Obj([(k, v) for k, v in base if k != key] + [(key, value)])
        request = _parse(route, dump(body).encode())
        if request is not None:
            _then(request)


@FUZZ
@given(
    st.lists(
        st.lists(st.one_of(st.integers(), st.integers(-(10**4000), 10**4000)), min_size=1, max_size=4), max_size=4
    ),
    st.integers(1, 2**40),
)
def test_token_ids_of_any_size_are_checked_with_a_4xx(ids: list[list[int]], vocab_size: int) -> None:
    try:
        protocols.check_token_ids("inputs", ids, vocab_size)
    except protocols.BadRequest as exc:
        check_refusal(exc)
        assert exc.error_type == "Tokenizer" and len(exc.message) < 200
    else:
        assert all(0 <= i < vocab_size for row in ids for i in row)


@FUZZ
@given(st.one_of(JSON_VALUES, st.integers(-(10**4000), 10**4000)), st.sampled_from(["tei", "openai"]))
def test_dimensions_of_any_kind_are_checked_with_a_4xx(dimensions: object, shape: str) -> None:
    """Even a value the parser would not let through (the request is a plain dataclass)."""
    request = protocols.EmbedRequest(shape, texts=["a"], dimensions=dimensions)  # type: ignore[arg-type]
    for full, trained in ((384, []), (384, [256, 128])):
        try:
            protocols.check_dimensions(request, full, trained, MODEL)
        except protocols.BadRequest as exc:
            check_refusal(exc)
            assert exc.status == (400 if shape == "openai" else 422)
        else:
            assert dimensions is None or dimensions == full or (trained and 1 <= dimensions <= full)


@FUZZ
@given(st.one_of(st.none(), TEXT), st.sampled_from(["texts", "tei", "openai"]))
def test_the_unknown_header_is_read_or_refused_with_a_4xx(value: str | None, shape: str) -> None:
    try:
        assert protocols.parse_unknown_header(value, shape) in (None, *protocols.UNKNOWN_RULES)
    except protocols.BadRequest as exc:
        check_refusal(exc)


@FUZZ
@given(CONTENT_TYPES)
@example("application/x-www-form-urlencoded")
@example("multipart/form-data; boundary=x")
def test_any_content_type_is_taken_or_refused_with_415(value: str | None) -> None:
    try:
        protocols.check_content_type(value)
    except protocols.BadRequest as exc:
        check_refusal(exc, statuses=range(415, 416))


VECTORS = hnp.arrays(
    np.float32,
    hnp.array_shapes(min_dims=2, max_dims=2, min_side=1, max_side=5),
    elements=st.floats(width=32, allow_subnormal=True),
)


@FUZZ
@given(VECTORS, st.sampled_from(["texts", "tei", "float", "base64"]))
def test_the_writers_write_vectors_that_read_back_or_refuse_non_finite_ones(vectors: np.ndarray, how: str) -> None:
    try:
        if how in ("float", "base64"):
            body = protocols.openai_body(vectors, model=MODEL, encoding_format=how, tokens=3)
        else:
            body = (protocols.texts_body if how == "texts" else protocols.tei_body)(vectors)
    except protocols.BadRequest as exc:
        assert not np.isfinite(vectors).all()
        check_refusal(exc, statuses=range(424, 425))
        assert exc.error_type == "Backend"
        return
    answer = json.loads(body, parse_constant=lambda name: pytest.fail(f"{name} in an answer"))
    if how == "base64":
        rows = [np.frombuffer(base64.b64decode(d["embedding"]), "<f4") for d in answer["data"]]
    elif how == "float":
        rows = [d["embedding"] for d in answer["data"]]
    else:
        rows = answer["embeddings"] if how == "texts" else answer
    back = np.array(rows, dtype=np.float64).astype(np.float32)
    np.testing.assert_array_equal(back.view(np.uint32), vectors.view(np.uint32))


@pytest.mark.parametrize("path", corpus("embed") + corpus("openai"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_kept_corpus_is_parsed_or_refused_with_a_4xx(path: Path) -> None:
    request = _parse(path.parent.name, path.read_bytes())
    if path.name.startswith("valid-"):
        assert request is not None
    elif path.name.startswith("regression-"):
        assert request is None, "every regression body is refused by the parser itself"
    if request is not None:
        _then(request)


def test_the_kept_corpus_is_kept() -> None:
    assert len(corpus("embed")) >= 20 and len(corpus("openai")) >= 10
    assert all(len(p.read_bytes()) <= MAX_CORPUS_BODY for p in corpus("embed") + corpus("openai"))
