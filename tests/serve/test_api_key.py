"""``bertembed serve --api-key`` (``BERTEMBED_API_KEY``): a Bearer key on every route but the probes.

A server of the session's artifact is started with a key; requests without it, with another one or
in another scheme get a 401 in the route's protocol's error shape, the probe routes answer without
it, and OpenAI's SDK with the key gets the same vectors as the open session server.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from service_helpers import MODEL_NAME, Server, serve, skip_without_service_packages

pytestmark = [pytest.mark.heavy]
skip_without_service_packages()
import httpx  # noqa: E402

KEY = "s3cret-Key_with.symbols~"


@pytest.fixture(scope="module")
def keyed(out_dir: Path) -> Iterator[Server]:
    yield from serve(out_dir, "server-keyed.log", BERTEMBED_API_KEY=KEY)


def _post(server: Server, path: str, body: dict, headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(f"{server.url}{path}", json=body, headers=headers or {}, timeout=60)


BODIES = {
    "/embed": {"inputs": ["A sentence."]},
    "/": {"inputs": "A sentence."},
    "/v1/embeddings": {"input": ["A sentence."], "model": MODEL_NAME},
}


@pytest.mark.parametrize("path", list(BODIES))
@pytest.mark.parametrize(
    "authorization",
    [None, "Bearer wrong", f"Bearer {KEY}x", f"bearer{KEY}", f"Basic {KEY}", KEY, f"Bearer  {KEY}", ""],
)
def test_requests_without_the_key_get_401(keyed: Server, path: str, authorization: str | None) -> None:
    headers = {} if authorization is None else {"Authorization": authorization}
    answer = _post(keyed, path, BODIES[path], headers)
    assert answer.status_code == 401, answer.text
    assert answer.headers["www-authenticate"] == "Bearer"
    body = answer.json()
    if path.startswith("/v1/"):
        assert body["error"]["code"] == "invalid_api_key"
        assert body["error"]["type"] == "authentication_error"
        assert body["error"]["message"].startswith("a valid API key is needed")
    else:
        assert body["error_type"] == "Validation"
        assert body["error"].startswith("a valid API key is needed")


@pytest.mark.parametrize("path", ["/v1/models", "/info", "/metrics"])
def test_reading_routes_need_the_key_too(keyed: Server, path: str) -> None:
    assert httpx.get(f"{keyed.url}{path}", timeout=30).status_code == 401
    answer = httpx.get(f"{keyed.url}{path}", headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize("path", ["/health", "/healthz", "/ping"])
def test_probes_stay_open(keyed: Server, path: str) -> None:
    assert httpx.get(f"{keyed.url}{path}", timeout=30).status_code == 200


def test_the_key_gives_the_open_servers_vectors(keyed: Server, server: Server) -> None:
    texts = ["A sentence.", "Another, longer sentence about rivers and bridges."]
    headers = {"Authorization": f"Bearer {KEY}"}
    keyed_answer = _post(keyed, "/embed", {"texts": texts}, headers)
    assert keyed_answer.status_code == 200, keyed_answer.text
    np.testing.assert_array_equal(
        np.array(keyed_answer.json()["embeddings"]),
        np.array(_post(server, "/embed", {"texts": texts}).json()["embeddings"]),
    )


def test_openai_sdk_with_the_key(keyed: Server) -> None:
    openai = pytest.importorskip("openai", reason="pip install -r tests/serve/requirements-clients.txt")
    good = openai.OpenAI(base_url=f"{keyed.url}/v1", api_key=KEY, max_retries=0)
    data = good.embeddings.create(input=["A sentence."], model=MODEL_NAME).data
    assert len(data[0].embedding) == 384
    bad = openai.OpenAI(base_url=f"{keyed.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="a valid API key is needed"):
        bad.embeddings.create(input=["A sentence."], model=MODEL_NAME)


def test_metrics_can_be_left_open(out_dir: Path) -> None:
    for running in serve(out_dir, "server-keyed-metrics.log", BERTEMBED_API_KEY=KEY, SERVICE_METRICS_OPEN="1"):
        assert httpx.get(f"{running.url}/metrics", timeout=30).status_code == 200
        assert httpx.get(f"{running.url}/info", timeout=30).status_code == 401
