"""Request bodies for the server's fuzz tests: hypothesis strategies, the kept corpus, the checks of a refusal.

Imported by ``test_service_fuzz.py`` (the parsing functions, no HTTP) and
``test_service_fuzz_http.py`` (the Starlette app with a stand-in model, and the
real server).

The bodies are written by :func:`dump`, not ``json.dumps``, so that they can
hold what ``json.dumps`` cannot write or would write otherwise: numbers as
raw text (``NaN``, ``1e400``, an integer of 5000 digits: :class:`Raw`),
objects with a key twice (:class:`Obj`, a list of pairs), unpaired
surrogates. Then some bodies are spoilt at the byte level: cut, a byte
changed, a byte-order mark put before, re-encoded as UTF-16, nested deeper.

The corpus (``tests/serve/fuzz_corpus/<route>/<name>``, ``route`` "embed" for
``POST /embed`` or "openai" for ``POST /v1/embeddings``) keeps one body per
file: the bodies that once got a 500 or a wrong answer (``regression-*``),
the ones that reach a branch of their own, and valid ones (``valid-*``,
answered 200; every other body is refused with a 4xx).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from bertembed.serve import protocols

CORPUS = Path(__file__).resolve().parent / "fuzz_corpus"
ROUTES = {"embed": "/embed", "openai": "/v1/embeddings"}
#: The served model's name in the tests (the stand-in's and the real export's).
MODEL = "all-MiniLM-L6-v2"
#: The largest kept body: under the test servers' body limit (``service_helpers.MAX_BODY``, 64 KiB),
#: so that every kept body is parsed.
MAX_CORPUS_BODY = 60 * 1024


class Raw(str):
    """Text written into the body as it is (a number JSON's writers would not write)."""


class Obj(list):  # type: ignore[type-arg]
    """A JSON object as its (key, value) pairs, in order, a key possibly twice."""


def dump(value: Any) -> str:
    """``value`` as JSON text: :class:`Raw` verbatim, :class:`Obj` with its keys as they are."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, Obj):
        return "{" + ", ".join(f"{dump(key)}: {dump(item)}" for key, item in value) + "}"
    if isinstance(value, dict):
        return dump(Obj(value.items()))
    if isinstance(value, list):
        return "[" + ", ".join(dump(item) for item in value) + "]"
    return json.dumps(value)  # strings (surrogates escaped), numbers, true, false, null


def corpus(route: str) -> list[Path]:
    """The kept bodies of one route, by name."""
    return sorted(p for p in (CORPUS / route).iterdir() if p.is_file())


def render(body: dict[str, Any]) -> bytes:
    """An error body as Starlette's ``JSONResponse`` writes it (a 500 if this raises)."""
    return json.dumps(body, ensure_ascii=False, allow_nan=False, indent=None, separators=(",", ":")).encode("utf-8")


def check_refusal(exc: protocols.BadRequest, *, statuses: range = range(400, 500)) -> None:
    """A refusal as the protocols need it: a 4xx, one of TEI's kinds, error bodies that can be written."""
    assert exc.status in statuses, (exc.status, exc.message)
    assert exc.error_type in protocols.TEI_ERROR_TYPES
    assert exc.error_type != "Empty" or exc.status == 400
    assert exc.message and len(exc.message) <= protocols.MAX_MESSAGE
    render(protocols.tei_error(exc))
    render(protocols.openai_error(exc))


# --- strategies -------------------------------------------------------------------------------------

#: Numbers as text: JSON's writers never write the first ones, Python's reader takes them.
RAW_NUMBERS = st.one_of(
    st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1.0", "-0", "0e0", "1E2", "2.5e-400"]),
    st.integers(4295, 4310).map(lambda n: "9" * n),  # around Python's 4300-digit limit
    st.integers(5000, 6000).map(lambda n: "-" + "1" * n),
).map(Raw)
#: Text with the odd characters: unpaired surrogates, NUL, a byte-order mark, right-to-left marks.
TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["\ud800", "a\udfff", "\udbff\udc00", "\x00", "\ufeff", "\u202e", "東京", " ", ""]),
    st.text(st.one_of(st.characters(), st.characters(categories=["Cs"])), max_size=6),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    TEXT,
    RAW_NUMBERS,
)
KEYS = st.one_of(
    st.sampled_from(sorted({"texts", *protocols.TEI_FIELDS, *protocols.OPENAI_FIELDS})),
    TEXT,
)
JSON_VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(st.tuples(KEYS, inner), max_size=3).map(Obj),
    ),
    max_leaves=12,
)
#: Token ids: mostly rows of the stand-in's table (50 rows) and of any real one.
IDS = st.lists(st.one_of(st.integers(0, 45), st.integers(0, 45), st.integers(-3, 60)), max_size=6)
#: Values of the right kind per field (mostly valid), so that the checks past the first are reached.
GOOD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "texts": st.lists(TEXT, min_size=1, max_size=6),
    "inputs": st.one_of(TEXT, st.lists(TEXT, min_size=1, max_size=6), IDS, st.lists(IDS, min_size=1, max_size=4)),
    "normalize": st.one_of(st.none(), st.booleans()),
    "truncate": st.one_of(st.none(), st.booleans()),
    "truncation_direction": st.sampled_from(["Right", "left", "LEFT", "up"]),
    "prompt_name": st.sampled_from(["query", "passage"]),
    "dimensions": st.one_of(st.integers(-2, 10), st.sampled_from([384, 2**63])),
    "model": st.just(MODEL),
    "encoding_format": st.sampled_from(["float", "base64", "FLOAT"]),
    "user": TEXT,
}
GOOD_VALUES["input"] = GOOD_VALUES["inputs"]
#: Values worth trying per field: of the right kind, or any JSON.
FIELD_VALUES = {key: st.one_of(good, good, JSON_VALUES) for key, good in GOOD_VALUES.items()}
OPTIONAL = {
    "embed": [k for k in protocols.TEI_FIELDS if k != "inputs"],
    "openai": ["encoding_format", "dimensions", "user"],
}


@st.composite
def objects(draw: st.DrawFn, route: str) -> Obj:
    """A body object for the route: often a valid one (its required fields, a few optional ones with
    values of the right kind), else any of its fields and others, any values, a key possibly twice."""
    if draw(st.booleans()):
        required = {"embed": [draw(st.sampled_from(["inputs", "texts"]))], "openai": ["input", "model"]}[route]
        optional = [] if required == ["texts"] else draw(st.lists(st.sampled_from(OPTIONAL[route]), unique=True))
        return Obj((key, draw(GOOD_VALUES[key])) for key in required + optional)
    route_keys = st.sampled_from(
        ["texts", *protocols.TEI_FIELDS] if route == "embed" else list(protocols.OPENAI_FIELDS)
    )
    keys = draw(st.lists(st.one_of(route_keys, route_keys, KEYS), max_size=5))
    return Obj((key, draw(FIELD_VALUES.get(key, JSON_VALUES))) for key in keys)


@st.composite
def spoilt(draw: st.DrawFn, body: bytes) -> bytes:
    """``body`` changed at the byte level."""
    how = draw(st.sampled_from(["cut", "byte", "bom", "utf-16", "nest", "as is"]))
    if how == "cut" and body:
        return body[: draw(st.integers(0, len(body) - 1))]
    if how == "byte" and body:
        at = draw(st.integers(0, len(body) - 1))
        return body[:at] + bytes([draw(st.integers(0, 255))]) + body[at + 1 :]
    if how == "bom":
        return b"\xef\xbb\xbf" + body
    if how == "utf-16":
        return body.decode("utf-8", "surrogatepass").encode("utf-16", "surrogatepass")
    if how == "nest":
        depth = draw(st.sampled_from([1, 50, 2000, 20000]))
        return b"[" * depth + body + b"]" * depth
    return body


def bodies(route: str) -> st.SearchStrategy[bytes]:
    """Request bodies for ``route``: its objects, any JSON value, spoilt bodies, any bytes."""
    written = st.one_of(objects(route), objects(route), JSON_VALUES).map(lambda v: dump(v).encode("utf-8"))
    return st.one_of(written, written, written.flatmap(spoilt), st.binary(max_size=64))


#: What a ``Content-Type`` header may be: what clients send, and others.
CONTENT_TYPES = st.one_of(
    st.none(),
    st.sampled_from(
        [
            "application/json",
            "application/json; charset=utf-8",
            "application/x-www-form-urlencoded",
            "text/plain;charset=UTF-8",
            "application/problem+json",
            "multipart/form-data; boundary=x",
            "application/xml",
            "application/octet-stream",
            "",
        ]
    ),
    st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=30),
)
