"""The request and response shapes the service speaks: its own, Text Embeddings Inference's, OpenAI's.

Pure functions of bytes and dicts (no HTTP, no model), each refusal a
:class:`BadRequest` with the status, the message, and what the protocol's
error body needs:

- ``POST /embed`` (and ``POST /``): the service's own ``{"texts": [...]}``
  (answer ``{"embeddings": [...]}``), or Text Embeddings Inference's
  ``{"inputs": ..., "normalize", "truncate", "truncation_direction",
  "prompt_name", "dimensions"}`` (answer: a bare list of vectors). Errors are
  ``{"error": message, "error_type": kind}`` (TEI's shape; ``error_type``
  is one of :data:`TEI_ERROR_TYPES`, spelled as TEI sends them).
- ``POST /v1/embeddings``: OpenAI's ``{"input", "model", "encoding_format",
  "dimensions", "user"}``; errors are
  ``{"error": {"message", "type", "param", "code"}}``.

Every refusal is a 4xx :class:`BadRequest`, whatever the body: JSON is read
strictly (:func:`parse_json`: UTF-8 only, a leading byte-order mark ignored;
``NaN`` and ``Infinity``, a key twice in one object, an integer of more
digits than Python reads, or nesting deeper than it recurses are 400s), a
body whose ``Content-Type`` is not JSON is a 415 (:func:`check_content_type`),
an empty input is TEI's ``Empty`` 400, and a message quotes a client's
value only shortened and escaped (:func:`show`), so that every error body
can be written.

One choice of this service's is a request header, on every route, so that
the bodies stay exactly each protocol's (OpenAI refuses unknown body fields;
other servers ignore unknown headers): :data:`UNKNOWN_HEADER`, what a trimmed
embedding layer does with a token it does not keep, ``error`` (a 422 naming
every such input, code ``token_not_kept``: :func:`not_kept`) or ``unk`` (the
unknown token's row).
"""

from __future__ import annotations

import base64
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import orjson

from .artifact import UNKNOWN_RULES

#: JSON names of the Python types json.loads produces.
_JSON_TYPES = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "a number",
    float: "a number",
    bool: "a boolean",
    type(None): "null",
}
#: Fields of a TEI ``/embed`` body.
TEI_FIELDS = ("inputs", "normalize", "truncate", "truncation_direction", "prompt_name", "dimensions")
#: Fields of an OpenAI ``/v1/embeddings`` body.
OPENAI_FIELDS = ("input", "model", "encoding_format", "dimensions", "user")
ENCODING_FORMATS = ("float", "base64")
#: TEI's kinds of error, as its server writes them in ``error_type`` (its OpenAPI schema's enum;
#: clients generated from that schema refuse any other spelling).
TEI_ERROR_TYPES = ("Unhealthy", "Backend", "Overloaded", "Validation", "Tokenizer", "Empty")
#: The request header choosing what a trimmed embedding layer does with a token it does not keep.
UNKNOWN_HEADER = "X-Bertembed-Unknown"
#: Uncovered inputs a ``token_not_kept`` message names one by one (the others are counted).
LISTED_UNCOVERED = 10
#: Media types taken as JSON besides ``application/json`` and ``*/*+json``: what clients send when
#: they are not told (curl's ``-d``, wget's ``--post-data``, Python's urllib and PowerShell send
#: form-urlencoded; a browser's ``fetch`` with a string body sends text/plain). The body must be
#: JSON all the same.
JSON_ALIKE = ("application/x-www-form-urlencoded", "text/plain")
#: Digits an integer of a body may have when the interpreter sets no limit of its own (Python's
#: default; reading a longer one costs time quadratic in its length).
MAX_INT_DIGITS = 4300
#: Characters of an error message (and of OpenAI's ``param``): the rest is cut.
MAX_MESSAGE = 4000
MAX_PARAM = 100
#: Characters of a client's string quoted in a message.
SHOWN_CHARS = 60


class BadRequest(Exception):
    """A request the service refuses: HTTP status, message, and the protocol details of the error body.

    Parameters
    ----------
    status : int
        HTTP status.
    message : str
        What is wrong, for the client.
    error_type : str
        TEI's kind, one of :data:`TEI_ERROR_TYPES`.
    param, code : str, optional
        OpenAI's ``param`` (the field at fault) and ``code``.

    The message and ``param`` are made writable whatever they quote: an
    unpaired surrogate is escaped (``\\ud800``), and a message longer than
    :data:`MAX_MESSAGE` characters is cut. TEI answers its kind ``Empty``
    with 400, so ``error_type="Empty"`` with another status is a
    programming error (:class:`ValueError`), like a kind TEI does not have.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        error_type: str = "Validation",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        if error_type not in TEI_ERROR_TYPES:
            raise ValueError(f"error_type {error_type!r} is not one of TEI's {TEI_ERROR_TYPES}")
        if error_type == "Empty" and status != 400:
            raise ValueError(f"TEI answers error_type 'Empty' with 400, not {status}")
        message = _writable(message, MAX_MESSAGE)
        super().__init__(message)
        self.status, self.message = status, message
        self.error_type, self.code = error_type, code
        self.param = None if param is None else _writable(param, MAX_PARAM)


def _writable(text: str, limit: int) -> str:
    """``text`` with unpaired surrogates escaped (UTF-8 can write it) and cut to ``limit`` characters."""
    if len(text) > limit:
        text = f"{text[: limit - 40]}... ({len(text) - limit + 40} more characters)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@dataclass
class EmbedRequest:
    """What any of the three shapes asks for.

    Attributes
    ----------
    shape : {"texts", "tei", "openai"}
        Which protocol the answer follows.
    texts : list of str, optional
        Text inputs (``ids`` is None then).
    ids : list of list of int, optional
        Token-id inputs: the model's own ids, without special tokens.
    normalize : bool or None
        None: as the model's sentence-transformers pipeline (its Normalize module).
    truncate : bool or None
        None: the service's setting (``SERVICE_AUTO_TRUNCATE``).
    direction : {"right", "left"}
    prompt_name, dimensions, model : optional
    encoding_format : {"float", "base64"}
    unknown : {"error", "unk"} or None
        The :data:`UNKNOWN_HEADER` choice; None: the embedding layer's rule.
    """

    shape: str
    texts: list[str] | None = None
    ids: list[list[int]] | None = None
    normalize: bool | None = None
    truncate: bool | None = None
    direction: str = "right"
    prompt_name: str | None = None
    dimensions: int | None = None
    model: str | None = None
    encoding_format: str = "float"
    unknown: str | None = None

    @property
    def count(self) -> int:
        """Number of inputs."""
        return len(self.texts if self.texts is not None else self.ids or [])


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type ("an array", "a string", ...)."""
    return _JSON_TYPES.get(type(value), type(value).__name__)


def show(value: Any) -> str:
    """A client's value as a message quotes it: a string (repr, its first :data:`SHOWN_CHARS`
    characters), an integer of up to 30 digits, true, false or null as themselves; anything else by
    its JSON type (an array is not printed: it may be large or nested deeply).

    Examples
    --------
    >>> show("Up"), show(-3), show(10**40), show(True), show([1, [2]]), show(1.5)
    ("'Up'", '-3', 'an integer of 41 digits', 'true', 'an array', 'a number')
    """
    if isinstance(value, str):
        if len(value) <= SHOWN_CHARS:
            return repr(value)
        return f"{value[:SHOWN_CHARS]!r}... ({len(value)} characters)"
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        digits = len(str(abs(value)))
        return str(value) if digits <= 30 else f"an integer of {digits} digits"
    return json_type(value)


def _show_names(names: list[str]) -> str:
    """Field names as a list: ``['foo', 'bar']`` (the first ten; the others counted)."""
    shown = ", ".join(show(name) for name in names[:10])
    return f"[{shown}{f', and {len(names) - 10} more' if len(names) > 10 else ''}]"


def _no_constant(name: str) -> Any:
    raise BadRequest(400, f"body is not valid JSON: {name} is not a JSON value (JSON numbers are finite)")


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise BadRequest(400, f"body has the key {show(key)} twice in one object: which one counts is unclear")
            seen.add(key)
    return obj


def _bounded_int(digits: str) -> int:
    """An integer of the body, where the interpreter sets no limit on the digits it reads."""
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer has more than {MAX_INT_DIGITS} digits")
    return int(digits)


def parse_json(body: bytes) -> Any:
    """The body as JSON, read strictly, or :class:`BadRequest` (400).

    The body must be UTF-8 (RFC 8259's rule; a leading byte-order mark is
    ignored, as it allows). What Python's reader would take but JSON has
    not is refused: ``NaN``, ``Infinity`` and ``-Infinity``. So are a key
    twice in one object (which one counts differs from reader to reader:
    TEI's refuses it, Python's keeps the last), an integer of more digits
    than Python converts (4300 by default: ``sys.get_int_max_str_digits``),
    and nesting deeper than Python's reader recurses.

    Examples
    --------
    >>> parse_json(b'{"texts": ["a"]}')
    {'texts': ['a']}
    >>> parse_json(b'{"inputs": NaN}')
    Traceback (most recent call last):
    ...
    bertembed.serve.protocols.BadRequest: body is not valid JSON: NaN is not a JSON value (JSON numbers are finite)
    """
    limit = getattr(sys, "get_int_max_str_digits", lambda: 0)()
    try:
        text = body.decode("utf-8")
        return json.loads(
            text[1:] if text.startswith("\ufeff") else text,
            parse_constant=_no_constant,
            object_pairs_hook=_object,
            parse_int=None if limit else _bounded_int,
        )
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(400, f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest(400, "body is not valid JSON: nested too deeply") from None
    except ValueError:  # an integer too long to convert (the interpreter's limit, or ours)
        raise BadRequest(
            400, f"body has an integer of more than {limit or MAX_INT_DIGITS} digits: no field takes one"
        ) from None


def _check_text(name: str, index: int, text: Any, status: int = 422, *, indexed: bool = True) -> str:
    label = f"{name}[{index}]" if indexed else f"'{name}'"
    if not isinstance(text, str):
        raise BadRequest(status, f"{label} is {json_type(text)}, not a string", param=name)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(
            status, f"{label} is not valid Unicode: unpaired surrogate at character {exc.start}", param=name
        ) from None
    return text


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_ids(name: str, ids: list[Any], label: str) -> list[int]:
    if not ids:
        raise BadRequest(400, f"{label} is an empty list of token ids", error_type="Empty", param=name)
    for k, value in enumerate(ids):
        if not _is_int(value):
            raise BadRequest(422, f"{label}[{k}] is {json_type(value)}, not a token id", param=name)
    return ids


def parse_inputs(name: str, value: Any, max_batch: int) -> tuple[list[str] | None, list[list[int]] | None]:
    """A string, a list of strings, a list of token ids, or a list of such lists: (texts, None) or (None, ids).

    Examples
    --------
    >>> parse_inputs("input", "a", 8)
    (['a'], None)
    >>> parse_inputs("input", [[1, 2], [3]], 8)
    (None, [[1, 2], [3]])
    """
    if isinstance(value, str):
        return [_check_text(name, 0, value)], None
    if not isinstance(value, list):
        raise BadRequest(
            422, f"'{name}' must be a string or an array of strings or token ids, got {json_type(value)}", param=name
        )
    if not value:
        raise BadRequest(400, f"'{name}' is empty: send at least one input", error_type="Empty", param=name)
    if all(_is_int(v) for v in value):  # one list of token ids
        return None, [_check_ids(name, value, name)]
    if len(value) > max_batch:
        raise BadRequest(
            422,
            f"'{name}' has {len(value)} inputs, more than the limit of {max_batch} per request",
            param=name,
        )
    if isinstance(value[0], list):
        lists = []
        for k, item in enumerate(value):
            if not isinstance(item, list):
                raise BadRequest(422, f"{name}[{k}] is {json_type(item)}, not an array of token ids", param=name)
            lists.append(_check_ids(name, item, f"{name}[{k}]"))
        return None, lists
    return [_check_text(name, k, text) for k, text in enumerate(value)], None


def check_token_ids(name: str, ids: list[list[int]], vocab_size: int) -> None:
    """Every id is a row of the token table, or :class:`BadRequest` naming the first that is not."""
    for k, row in enumerate(ids):
        bad = next((j for j, v in enumerate(row) if not 0 <= v < vocab_size), None)
        if bad is not None:
            raise BadRequest(
                422,
                f"{name}[{k}][{bad}] = {show(row[bad])} is not a token id of this model (0 to {vocab_size - 1})",
                error_type="Tokenizer",
                param=name,
            )


def _optional(data: dict[str, Any], key: str, kind: type, label: str, status: int = 422) -> Any:
    """``data[key]`` if it is a ``kind``; None if absent or null; else :class:`BadRequest`."""
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest(status, f"'{key}' must be {label}, got {json_type(value)}", param=key)
    if kind is str:
        _check_text(key, 0, value, status, indexed=False)
    return value


def _dimensions(data: dict[str, Any], status: int) -> int | None:
    """``dimensions``: absent, null, or a positive integer."""
    dimensions = data.get("dimensions")
    if dimensions is not None and (not _is_int(dimensions) or dimensions < 1):
        raise BadRequest(status, f"'dimensions' must be a positive integer, got {show(dimensions)}", param="dimensions")
    return dimensions


def parse_embed_body(body: bytes, max_batch: int) -> EmbedRequest:
    """A ``POST /embed`` body: the service's ``{"texts": [...]}`` or TEI's ``{"inputs": ...}``.

    Examples
    --------
    >>> parse_embed_body(b'{"texts": ["a", "b"]}', max_batch=8).texts
    ['a', 'b']
    >>> request = parse_embed_body(b'{"inputs": "a", "truncation_direction": "Left"}', max_batch=8)
    >>> request.shape, request.texts, request.direction
    ('tei', ['a'], 'left')
    """
    data = parse_json(body)
    if not isinstance(data, dict):
        raise BadRequest(
            422, f'body must be a JSON object {{"inputs": ...}} or {{"texts": [...]}}, got {json_type(data)}'
        )
    if "texts" in data:
        unknown = sorted(set(data) - {"texts"})
        if unknown:
            raise BadRequest(422, f"unknown field(s) {_show_names(unknown)}: a body with 'texts' has no other field")
        texts = data["texts"]
        if not isinstance(texts, list):
            raise BadRequest(422, f"'texts' must be an array of strings, got {json_type(texts)}")
        if not texts:
            raise BadRequest(400, "'texts' is empty: send at least one text", error_type="Empty")
        if len(texts) > max_batch:
            raise BadRequest(422, f"'texts' has {len(texts)} texts, more than the limit of {max_batch} per request")
        return EmbedRequest("texts", texts=[_check_text("texts", k, t) for k, t in enumerate(texts)])
    unknown = sorted(set(data) - set(TEI_FIELDS))
    if unknown:
        raise BadRequest(
            422,
            f'unknown field(s) {_show_names(unknown)}: send {{"texts": [...]}} or {{"inputs": ...}} '
            f"with {list(TEI_FIELDS)}",
        )
    if "inputs" not in data:
        raise BadRequest(422, '\'inputs\' is missing: send {"inputs": "..."} or {"texts": ["...", ...]}')
    texts, ids = parse_inputs("inputs", data["inputs"], max_batch)
    direction = _optional(data, "truncation_direction", str, "'Right' or 'Left'")
    if direction is not None and direction.lower() not in ("right", "left"):
        raise BadRequest(422, f"'truncation_direction' must be 'Right' or 'Left', got {show(direction)}")
    dimensions = _dimensions(data, 422)
    return EmbedRequest(
        "tei",
        texts=texts,
        ids=ids,
        normalize=True if data.get("normalize") is None else _optional(data, "normalize", bool, "true or false"),
        truncate=_optional(data, "truncate", bool, "true or false"),
        direction=(direction or "right").lower(),
        prompt_name=_optional(data, "prompt_name", str, "a prompt name"),
        dimensions=dimensions,
    )


def parse_openai_body(body: bytes, max_batch: int) -> EmbedRequest:
    """A ``POST /v1/embeddings`` body (OpenAI's embeddings API).

    Examples
    --------
    >>> request = parse_openai_body(b'{"input": ["a"], "model": "m", "encoding_format": "base64"}', max_batch=8)
    >>> request.texts, request.model, request.encoding_format
    (['a'], 'm', 'base64')
    """
    data = parse_json(body)
    if not isinstance(data, dict):
        raise BadRequest(400, f'body must be a JSON object {{"input": ..., "model": ...}}, got {json_type(data)}')
    unknown = sorted(set(data) - set(OPENAI_FIELDS))
    if unknown:
        raise BadRequest(400, f"Unrecognized request argument(s) supplied: {_show_names(unknown)}", param=unknown[0])
    for key in ("input", "model"):
        if key not in data:
            raise BadRequest(400, f"'{key}' is a required property", param=key)
    if not isinstance(data["model"], str):
        raise BadRequest(400, f"'model' must be a string, got {json_type(data['model'])}", param="model")
    _check_text("model", 0, data["model"], 400, indexed=False)
    try:
        texts, ids = parse_inputs("input", data["input"], max_batch)
    except BadRequest as exc:
        exc.status = 400
        raise
    encoding = data.get("encoding_format", "float")  # null is not a format either (OpenAI's schema: a string)
    if not isinstance(encoding, str) or encoding not in ENCODING_FORMATS:
        raise BadRequest(
            400, f"'encoding_format' must be 'float' or 'base64', got {show(encoding)}", param="encoding_format"
        )
    dimensions = _dimensions(data, 400)
    _optional(data, "user", str, "a string", 400)
    return EmbedRequest(
        "openai", texts=texts, ids=ids, model=data["model"], encoding_format=encoding, dimensions=dimensions
    )


def parse_unknown_header(value: str | None, shape: str) -> str | None:
    """The :data:`UNKNOWN_HEADER` value (any case; None when absent), or :class:`BadRequest`
    (400 on OpenAI's route, else 422).

    Examples
    --------
    >>> parse_unknown_header("UNK", "tei"), parse_unknown_header(None, "openai")
    ('unk', None)
    """
    if value is None:
        return None
    choice = value.strip().lower()
    if choice not in UNKNOWN_RULES:
        raise BadRequest(
            400 if shape == "openai" else 422,
            f"header {UNKNOWN_HEADER} must be 'error' or 'unk', got {show(value)}",
        )
    return choice


def check_content_type(value: str | None) -> None:
    """A request's ``Content-Type`` says its body is JSON, or may be; else :class:`BadRequest` (415).

    Taken: none at all, ``application/json`` and any ``*/*+json`` (TEI's
    server takes these two), and :data:`JSON_ALIKE`, what clients send when
    they are not told: ``curl -d '{...}'`` (the documentation's commands)
    sends ``application/x-www-form-urlencoded``, a browser's ``fetch`` with a
    string body ``text/plain``. Parameters (``charset=...``) are not
    looked at: the body is read as UTF-8 JSON all the same. Refused: every
    other type (``multipart/form-data``, ``application/xml``,
    ``application/octet-stream``, ...), whose body is not JSON.

    Examples
    --------
    >>> check_content_type("application/json; charset=utf-8"), check_content_type(None)
    (None, None)
    >>> try:
    ...     check_content_type("multipart/form-data; boundary=x")
    ... except BadRequest as exc:
    ...     print(exc.status, exc.message.partition(": send")[0])
    415 Content-Type 'multipart/form-data; boundary=x' is not JSON
    """
    if value is None:
        return
    media = value.split(";", 1)[0].strip().lower()
    if not media or media == "application/json" or media in JSON_ALIKE:
        return
    kind, slash, subtype = media.partition("/")
    if kind and slash and subtype.endswith("+json") and "/" not in subtype:
        return
    raise BadRequest(
        415, f"Content-Type {show(value)} is not JSON: send the JSON body with 'Content-Type: application/json'"
    )


class UncoveredInput(Protocol):
    """An input with a token a trimmed layer does not keep (the pipeline's ``Uncovered``)."""

    @property
    def index(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def token_id(self) -> int: ...
    @property
    def token(self) -> str: ...


def not_kept(
    name: str,
    inputs: Sequence[UncoveredInput],
    count: int,
    *,
    kept_rows: int,
    vocab_size: int,
    unknown_token: str | None,
) -> BadRequest:
    """The 422 (code ``token_not_kept``) for inputs with tokens the trimmed embedding layer does not keep.

    It names each input as ``name[i]`` with its first such token, its id and
    position (the first :data:`LISTED_UNCOVERED`; the others are counted), and
    says how to be served: without those tokens, or, when the layer keeps the
    unknown token's row (``unknown_token``), with ``X-Bertembed-Unknown: unk``.

    Examples
    --------
    >>> from types import SimpleNamespace as U
    >>> exc = not_kept("input", [U(index=1, position=2, token_id=7, token="zeb")], 2,
    ...                kept_rows=40, vocab_size=100, unknown_token=None)
    >>> exc.status, exc.code, exc.message[:60]
    (422, 'token_not_kept', "input[1] has the token 'zeb' (id 7, position 2 of its ids), ")
    """
    listed = [
        f"{name}[{u.index}] has the token {u.token!r} (id {u.token_id}, position {u.position} of its ids)"
        for u in inputs[:LISTED_UNCOVERED]
    ]
    more = len(inputs) - len(listed)
    rows = f"(it keeps {kept_rows} of {vocab_size} token rows)"
    if len(inputs) == 1:
        what = f"{listed[0]}, which this service's trimmed embedding layer does not keep {rows}"
        fix = "send the input without it"
    else:
        tail = f"; and {more} more input{'s' if more > 1 else ''} {'have' if more > 1 else 'has'} one" if more else ""
        what = (
            f"{'; '.join(listed)}{tail}: {len(inputs)} of {count} inputs have a token this service's trimmed "
            f"embedding layer does not keep {rows}"
        )
        fix = "send those inputs without such tokens"
    if unknown_token is not None:
        fix += f", or with the header '{UNKNOWN_HEADER}: unk' to embed such tokens as {unknown_token!r}"
    return BadRequest(422, f"{what}; {fix}", param=name, code="token_not_kept")


def check_dimensions(request: EmbedRequest, full: int, trained: list[int], model: str) -> None:
    """``dimensions`` is accepted for models trained for reduced sizes (Matryoshka), up to the full size;
    otherwise only the full size itself."""
    wanted = request.dimensions
    if wanted is None or wanted == full:
        return
    if not _is_int(wanted) or wanted < 1:
        raise BadRequest(
            400 if request.shape == "openai" else 422,
            f"'dimensions' must be a positive integer, got {show(wanted)}",
            param="dimensions",
        )
    if not trained:
        raise BadRequest(
            400 if request.shape == "openai" else 422,
            f"model '{model}' was not trained for reduced dimensions (Matryoshka): it returns {full} dimensions; "
            f"leave 'dimensions' out or set it to {full}",
            param="dimensions",
        )
    if wanted > full:
        raise BadRequest(
            400 if request.shape == "openai" else 422,
            f"'dimensions' is {show(wanted)}, more than the model's {full}",
            param="dimensions",
        )


#: orjson writes a float32 array as the shortest JSON numbers that read back as the same float32
#: values: 20 to 25 times faster than ``json.dumps(array.tolist())``, whose float64 digits make the
#: answer about 1.8 times longer (32 x 384 values: 0.34 ms and 131 KB against 7.7 ms and 237 KB).
_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def _vectors(vectors: np.ndarray) -> np.ndarray:
    """What orjson serialises natively: a C-contiguous float32 array, every value finite.

    orjson would write NaN and infinity as ``null``, which no client reads as
    a vector: such an answer is TEI's ``Backend`` error (424) instead, naming
    the first input it concerns.
    """
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    finite = np.isfinite(vectors)
    if not finite.all():
        row = int(np.argmin(finite.all(axis=tuple(range(1, vectors.ndim))))) if vectors.ndim > 1 else 0
        raise BadRequest(
            424,
            f"the model computed a value that is not a finite number (NaN or infinity) for input {row}",
            error_type="Backend",
        )
    return vectors


def texts_body(vectors: np.ndarray) -> bytes:
    """``{"embeddings": [[...], ...]}``: each float32 value as the JSON number that reads back exactly.

    Examples
    --------
    >>> texts_body(np.array([[0.1, -2.0]], np.float32))
    b'{"embeddings":[[0.1,-2.0]]}'
    """
    return orjson.dumps({"embeddings": _vectors(vectors)}, option=_NUMPY)


def tei_body(vectors: np.ndarray) -> bytes:
    """TEI's answer: a bare list of vectors."""
    return orjson.dumps(_vectors(vectors), option=_NUMPY)


def openai_body(vectors: np.ndarray, *, model: str, encoding_format: str, tokens: int) -> bytes:
    """OpenAI's answer: ``{"object": "list", "data": [...], "model", "usage"}``; base64 is little-endian float32.

    Examples
    --------
    >>> import numpy as np
    >>> json.loads(openai_body(np.ones((1, 2), np.float32), model="m", encoding_format="base64", tokens=3))["data"]
    [{'object': 'embedding', 'index': 0, 'embedding': 'AACAPwAAgD8='}]
    """
    vectors = _vectors(vectors)
    if encoding_format == "base64":
        rows: list[Any] = [base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in vectors]
    else:
        rows = list(vectors)
    data = [{"object": "embedding", "index": k, "embedding": row} for k, row in enumerate(rows)]
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return orjson.dumps({"object": "list", "data": data, "model": model, "usage": usage}, option=_NUMPY)


def tei_error(exc: BadRequest) -> dict[str, Any]:
    """TEI's error body."""
    return {"error": exc.message, "error_type": exc.error_type}


_OPENAI_TYPES = {401: "authentication_error", 404: "invalid_request_error", 429: "rate_limit_error"}


def openai_error(exc: BadRequest) -> dict[str, Any]:
    """OpenAI's error body (``type`` "server_error" for a 5xx and for TEI's ``Backend`` and ``Unhealthy``)."""
    server = exc.status >= 500 or exc.error_type in ("Backend", "Unhealthy")
    kind = _OPENAI_TYPES.get(exc.status, "server_error" if server else "invalid_request_error")
    return {"error": {"message": exc.message, "type": kind, "param": exc.param, "code": exc.code}}
