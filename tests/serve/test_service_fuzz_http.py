"""The server's HTTP layer under any request: never a 500, always the route's protocol's error shape.

The Starlette app is built by ``create_app`` itself, with a stand-in for the
model (:class:`StandIn`: ``SentenceEmbedder`` with a character-level
tokenizer and an encoder that counts token ids, no artifact, no ONNX
Runtime session; everything else is the pipeline's own: fitting ids to the
model's length, truncation, Matryoshka cuts, normalising). hypothesis sends
it requests (``fuzz_bodies``: bodies of every kind, with any
``Content-Type`` and ``X-Bertembed-Unknown`` header) through Starlette's
test client, in process: each answer is a 2xx in its protocol's shape, or a
4xx in its protocol's error shape, and the service logs no error. The kept
corpus (``tests/serve/fuzz_corpus/``) is replayed over the same app, and,
when the packages the real server needs are there, over the running
``bertembed serve`` of ``conftest.py`` (all-MiniLM-L6-v2, two workers), whose
log must hold no traceback.
"""

from __future__ import annotations

import base64
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

for _module in ("orjson", "starlette", "httpx", "onnxruntime", "tokenizers", "hypothesis"):
    pytest.importorskip(_module, reason=f'the server needs {_module}: pip install "bertembed[serve,test]"')
from fuzz_bodies import CONTENT_TYPES, MODEL, ROUTES, TEXT, bodies, corpus  # noqa: E402
from hypothesis import HealthCheck, event, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from bertembed.serve import protocols  # noqa: E402
from bertembed.serve.server import app as app_module  # noqa: E402
from bertembed.serve.server.pipeline import SentenceEmbedder  # noqa: E402

VOCAB = 50
DIMENSION = 8
MAX_SEQ_LENGTH = 12
MAX_BATCH = 8
MAX_BODY = 64 * 1024


class StandIn(SentenceEmbedder):
    """``SentenceEmbedder`` without an artifact: ids are characters, a vector counts its ids.

    Matryoshka-trained for 4 and 2 dimensions (so that ``dimensions`` reaches
    the cut), one prompt ("query"), no trimmed layer.
    """

    def __init__(self, service_dir: Any, **options: Any) -> None:
        self.config = {"sentence": {"pooling": ["mean"]}}
        self.name = MODEL
        self.max_seq_length, self.dimension, self.normalize = MAX_SEQ_LENGTH, DIMENSION, True
        self.prompts, self.default_prompt_name = {"query": "query: "}, None
        self.matryoshka_dims = [4, 2]
        self.prefix, self.suffix, self.pad_id = [1], [2], 0
        self.batch_size, self.max_batch_tokens = 4, 64
        self.step = SimpleNamespace(name="stand-in", vocab_size=VOCAB)
        self.session = None
        self.unk_id = None
        self.embed_threads = 1

    def start(self) -> None:
        self.session = object()

    def tokenize(
        self, texts: Sequence[str], *, prompt_name: str | None = None, truncate: bool = True, direction: str = "right"
    ) -> list[np.ndarray]:
        prompt = self.prompt_text(prompt_name)
        ids = [[3 + ord(c) % (VOCAB - 3) for c in prompt + text] for text in texts]
        return [self._fit(k, row, truncate, direction) for k, row in enumerate(ids)]

    def encode_call(self, seqs: Sequence[np.ndarray]) -> tuple[np.ndarray, dict[str, float]]:
        vectors = np.stack([np.bincount(s % DIMENSION, minlength=DIMENSION) for s in seqs]).astype(np.float32)
        return vectors, {"encoder": 0.0}


class Errors(logging.Handler):
    """The service log's records of level ERROR and above (a 500 logs its traceback there)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def client() -> Iterator[tuple[TestClient, Errors]]:
    patch = pytest.MonkeyPatch()
    for name in list(os.environ):
        if name.startswith("SERVICE_") or name == "BERTEMBED_API_KEY":
            patch.delenv(name)
    patch.setenv("SERVICE_ACCESS_LOG", "0")
    patch.setenv("SERVICE_SHARED_ENCODER", "0")  # no encoder file to share
    patch.setattr(app_module, "SentenceEmbedder", StandIn)
    errors = Errors()
    logging.getLogger("service").addHandler(errors)
    try:
        app = app_module.create_app("stand-in", max_batch=MAX_BATCH, max_body_bytes=MAX_BODY, threads=1)
        with TestClient(app, raise_server_exceptions=True) as test_client:
            yield test_client, errors
    finally:
        logging.getLogger("service").removeHandler(errors)
        patch.undo()


def _content_type_is_checked() -> bool:
    """Whether the app refuses a body whose Content-Type is not JSON (415): ``check_content_type``."""
    return "check_content_type" in Path(app_module.__file__).read_text(encoding="utf-8")


def _check_answer(route: str, headers: dict[str, str], status: int, answer: Any) -> None:
    """A 2xx in the route's protocol's shape, or a 4xx in its error shape."""
    assert 200 <= status < 300 or 400 <= status < 500, (status, answer)
    if 400 <= status < 500:
        if route == "openai":
            assert set(answer) == {"error"} and set(answer["error"]) == {"message", "type", "param", "code"}
            assert answer["error"]["type"] in ("invalid_request_error", "authentication_error")
            assert answer["error"]["message"]
        else:
            assert set(answer) == {"error", "error_type"} and answer["error"]
            assert answer["error_type"] in protocols.TEI_ERROR_TYPES
            assert answer["error_type"] != "Empty" or status == 400
        content_type = headers.get("Content-Type")
        if status == 415:
            assert content_type is not None and _content_type_is_checked()
        elif _content_type_is_checked() and content_type is not None and status != 413:
            protocols.check_content_type(content_type)  # a body of a refused type never got this far
        return
    assert status == 200
    if route == "openai":
        assert answer["object"] == "list" and answer["model"] == MODEL
        for k, item in enumerate(answer["data"]):
            assert item["index"] == k and item["object"] == "embedding"
            if isinstance(item["embedding"], str):
                assert len(base64.b64decode(item["embedding"])) % 4 == 0
            else:
                assert all(isinstance(x, float) for x in item["embedding"])
        assert answer["usage"]["prompt_tokens"] == answer["usage"]["total_tokens"] >= len(answer["data"]) * 2
        return
    vectors = answer["embeddings"] if isinstance(answer, dict) else answer
    assert isinstance(vectors, list) and 1 <= len(vectors) <= MAX_BATCH
    assert all(1 <= len(v) <= DIMENSION and all(isinstance(x, float) for x in v) for v in vectors)


def _send(client: tuple[TestClient, Errors], route: str, body: bytes, headers: dict[str, str]) -> int:
    test_client, errors = client
    errors.records.clear()  # this request's only
    answer = test_client.post(ROUTES[route], content=body, headers=headers)
    assert answer.headers["content-type"] == "application/json", answer.text
    _check_answer(route, headers, answer.status_code, answer.json())
    assert not errors.records, [r.getMessage() for r in errors.records]
    return answer.status_code


#: X-Bertembed-Unknown: mostly absent (any other value is a 4xx), else a rule or anything.
HEADER_VALUES = st.one_of(st.none(), st.none(), st.none(), st.sampled_from(["error", "unk", "UNK", " error "]), TEXT)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, bytes, dict[str, str]]:
    route = draw(st.sampled_from(sorted(ROUTES)))
    body = draw(bodies(route))
    headers = {}
    content_type = draw(CONTENT_TYPES)
    if content_type is not None:
        headers["Content-Type"] = content_type
    unknown = draw(HEADER_VALUES)
    if unknown is not None and unknown.isascii() and unknown.isprintable():  # what HTTP can carry
        headers[protocols.UNKNOWN_HEADER] = unknown
    return route, body, headers


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
@example(("embed", b'{"inputs": [[1, %s]]}' % (b"9" * 5000), {"Content-Type": "application/json"}))
@example(("openai", b'{"input": "a", "model": "\\ud800"}', {}))
@example(("openai", b'{"input": "a", "model": "m", "\\udbff": 1}', {}))
@example(("embed", b'{"inputs": "a", "dimensions": -1}', {}))
@example(("embed", b'{"inputs": "a", "dimensions": 3}', {}))
@example(("openai", b'{"input": "a", "model": "%s"}' % MODEL.encode(), {"Content-Type": "multipart/form-data"}))
@example(("embed", b'{"inputs": "a"}', {"Content-Type": "application/x-www-form-urlencoded"}))
@example(("embed", b'{"inputs": [[0, 49]], "truncate": false}', {protocols.UNKNOWN_HEADER: "unk"}))
def test_any_request_gets_a_2xx_or_a_4xx_in_its_protocol_s_shape(
    client: tuple[TestClient, Errors], request_: tuple[str, bytes, dict[str, str]]
) -> None:
    event(f"{request_[0]} {_send(client, *request_)}")  # --hypothesis-show-statistics: the answers' statuses


@pytest.mark.parametrize("path", corpus("embed") + corpus("openai"), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_kept_corpus_over_http(client: tuple[TestClient, Errors], path: Path) -> None:
    status = _send(client, path.parent.name, path.read_bytes(), {"Content-Type": "application/json"})
    assert (status == 200) == path.name.startswith("valid-"), status


@pytest.mark.parametrize(
    ("content_type", "status"),
    [
        (None, 200),
        ("application/json", 200),
        ("application/x-www-form-urlencoded", 200),  # curl -d, as the documentation's commands send it
        ("text/plain;charset=UTF-8", 200),
        ("multipart/form-data; boundary=x", 415),
        ("application/xml", 415),
    ],
)
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_content_types(client: tuple[TestClient, Errors], route: str, content_type: str | None, status: int) -> None:
    if status == 415 and not _content_type_is_checked():
        pytest.skip("server/app.py does not call protocols.check_content_type yet")
    body = b'{"inputs": "a"}' if route == "embed" else b'{"input": "a", "model": "%s"}' % MODEL.encode()
    headers = {} if content_type is None else {"Content-Type": content_type}
    assert _send(client, route, body, headers) == status


@pytest.mark.heavy
@pytest.mark.parametrize("route", sorted(ROUTES))
def test_the_kept_corpus_over_the_real_server(request: pytest.FixtureRequest, route: str) -> None:
    """Every kept body to ``bertembed serve`` (all-MiniLM-L6-v2): no 5xx; the log has no traceback."""
    import httpx
    from service_helpers import skip_without_service_packages

    skip_without_service_packages()
    server = request.getfixturevalue("server")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for path in corpus(route):
            answer = http.post(ROUTES[route], content=path.read_bytes(), headers={"Content-Type": "application/json"})
            assert answer.status_code < 500, (path.name, answer.text)
            assert (answer.status_code == 200) == path.name.startswith("valid-"), (path.name, answer.text)
            error = answer.json()
            if answer.status_code != 200:
                assert set(error) == ({"error"} if route == "openai" else {"error", "error_type"}), error
    assert "Traceback" not in server.log()
