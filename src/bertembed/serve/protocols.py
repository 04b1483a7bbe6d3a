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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import orjson

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
#: Its values: refuse the inputs with such tokens (422), or read the unknown token's row.
UNKNOWN_VALUES = ("error", "unk")
#: Uncovered inputs a ``token_not_kept`` message names one by one (the others are counted).
LISTED_UNCOVERED = 10


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
        super().__init__(message)
        self.status, self.message = status, message
        self.error_type, self.param, self.code = error_type, param, code


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


def parse_json(body: bytes) -> Any:
    """The body as JSON, or :class:`BadRequest` (400).

    Examples
    --------
    >>> parse_json(b'{"texts": ["a"]}')
    {'texts': ['a']}
    """
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(400, f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest(400, "body is not valid JSON: nested too deeply") from None


def _check_text(name: str, index: int, text: Any) -> str:
    if not isinstance(text, str):
        raise BadRequest(422, f"{name}[{index}] is {json_type(text)}, not a string", param=name)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(
            422, f"{name}[{index}] is not valid Unicode: unpaired surrogate at character {exc.start}", param=name
        ) from None
    return text


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_ids(name: str, ids: list[Any], label: str) -> list[int]:
    if not ids:
        raise BadRequest(422, f"{label} is an empty list of token ids", error_type="Empty", param=name)
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
        raise BadRequest(422, f"'{name}' is empty: send at least one input", error_type="Empty", param=name)
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
                f"{name}[{k}][{bad}] = {row[bad]} is not a token id of this model (0 to {vocab_size - 1})",
                error_type="Tokenizer",
                param=name,
            )


def _optional(data: dict[str, Any], key: str, kind: type, label: str) -> Any:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequest(422, f"'{key}' must be {label}, got {json_type(value)}", param=key)
    return value


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
            raise BadRequest(422, f"unknown field(s) {unknown}: a body with 'texts' has no other field")
        texts = data["texts"]
        if not isinstance(texts, list):
            raise BadRequest(422, f"'texts' must be an array of strings, got {json_type(texts)}")
        if not texts:
            raise BadRequest(422, "'texts' is empty: send at least one text", error_type="Empty")
        if len(texts) > max_batch:
            raise BadRequest(422, f"'texts' has {len(texts)} texts, more than the limit of {max_batch} per request")
        return EmbedRequest("texts", texts=[_check_text("texts", k, t) for k, t in enumerate(texts)])
    unknown = sorted(set(data) - set(TEI_FIELDS))
    if unknown:
        raise BadRequest(
            422, f'unknown field(s) {unknown}: send {{"texts": [...]}} or {{"inputs": ...}} with {list(TEI_FIELDS)}'
        )
    if "inputs" not in data:
        raise BadRequest(422, '\'inputs\' is missing: send {"inputs": "..."} or {"texts": ["...", ...]}')
    texts, ids = parse_inputs("inputs", data["inputs"], max_batch)
    direction = _optional(data, "truncation_direction", str, "'Right' or 'Left'")
    if direction is not None and direction.lower() not in ("right", "left"):
        raise BadRequest(422, f"'truncation_direction' must be 'Right' or 'Left', got {direction!r}")
    dimensions = _optional(data, "dimensions", int, "a positive integer")
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
        raise BadRequest(400, f"Unrecognized request argument(s) supplied: {unknown}", param=unknown[0])
    for key in ("input", "model"):
        if key not in data:
            raise BadRequest(400, f"'{key}' is a required property", param=key)
    if not isinstance(data["model"], str):
        raise BadRequest(400, f"'model' must be a string, got {json_type(data['model'])}", param="model")
    try:
        texts, ids = parse_inputs("input", data["input"], max_batch)
    except BadRequest as exc:
        exc.status = 400
        raise
    encoding = data.get("encoding_format") or "float"
    if encoding not in ENCODING_FORMATS:
        raise BadRequest(
            400, f"'encoding_format' must be 'float' or 'base64', got {encoding!r}", param="encoding_format"
        )
    dimensions = data.get("dimensions")
    if dimensions is not None and (not _is_int(dimensions) or dimensions < 1):
        raise BadRequest(400, f"'dimensions' must be a positive integer, got {dimensions!r}", param="dimensions")
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
    if choice not in UNKNOWN_VALUES:
        raise BadRequest(
            400 if shape == "openai" else 422,
            f"header {UNKNOWN_HEADER} must be 'error' or 'unk', got {value!r}",
        )
    return choice


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
            f"'dimensions' is {wanted}, more than the model's {full}",
            param="dimensions",
        )


#: orjson writes a float32 array as the shortest JSON numbers that read back as the same float32
#: values: 20 to 25 times faster than ``json.dumps(array.tolist())``, whose float64 digits make the
#: answer about 1.8 times longer (32 x 384 values: 0.34 ms and 131 KB against 7.7 ms and 237 KB).
_NUMPY = orjson.OPT_SERIALIZE_NUMPY


def _vectors(vectors: np.ndarray) -> np.ndarray:
    """What orjson serialises natively: a C-contiguous float32 array."""
    return np.ascontiguousarray(vectors, dtype=np.float32)


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
    if encoding_format == "base64":
        rows: list[Any] = [base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in vectors]
    else:
        rows = list(_vectors(vectors))
    data = [{"object": "embedding", "index": k, "embedding": row} for k, row in enumerate(rows)]
    usage = {"prompt_tokens": tokens, "total_tokens": tokens}
    return orjson.dumps({"object": "list", "data": data, "model": model, "usage": usage}, option=_NUMPY)


def tei_error(exc: BadRequest) -> dict[str, Any]:
    """TEI's error body."""
    return {"error": exc.message, "error_type": exc.error_type}


_OPENAI_TYPES = {401: "authentication_error", 404: "invalid_request_error", 429: "rate_limit_error"}


def openai_error(exc: BadRequest) -> dict[str, Any]:
    """OpenAI's error body."""
    kind = _OPENAI_TYPES.get(exc.status, "server_error" if exc.status >= 500 else "invalid_request_error")
    return {"error": {"message": exc.message, "type": kind, "param": exc.param, "code": exc.code}}
