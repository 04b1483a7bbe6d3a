"""The service driven by the clients users already have, each called as its documentation says.

The ``openai`` SDK (its default base64 encoding and ``encoding_format="float"``), ``langchain-openai``'s
``OpenAIEmbeddings``, ``huggingface_hub``'s ``InferenceClient.feature_extraction`` (Text Embeddings
Inference's protocol), the TEI clients ``tei-client`` and ``text-embeddings-inference-client`` (generated
from TEI's OpenAPI schema; it runs in an environment of its own, ``.ci/tei-client.sh``) and a plain
TEI-style JSON client, against the session's running service (2 workers). Every result must equal the
service's own ``POST /embed {"texts"}`` answer for the same texts, exactly: the same float32 values,
whatever the encoding. (The same text sent with other texts may differ in the last bits: the encoder
call it lands in has another shape.) The clients are pinned in ``tests/serve/requirements-clients.txt``;
a test skips when its client is missing.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess

import numpy as np
import pytest
from service_helpers import MODEL_NAME, Server, skip_without_service_packages

pytestmark = [pytest.mark.heavy]
skip_without_service_packages()
import httpx  # noqa: E402

LONG = " ".join(f"Sentence number {i} talks about rivers, bridges and the weather." for i in range(60))
TEXTS = ["A short sentence.", "東京は日本の首都です。", "", "🚀 emoji 👍🏽 e\u0301", LONG]


@pytest.fixture(scope="module")
def own(server: Server) -> np.ndarray:
    """The service's own answer for TEXTS, float32 (what every client must get)."""
    return server.embed(TEXTS).astype(np.float32)


def _exact(got: object, expected: np.ndarray) -> None:
    """Bit for bit the same float32 values (JSON carries each as the shortest number that reads back as it)."""
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float32), np.asarray(expected, dtype=np.float32))


def test_openai_sdk_default_base64(server: Server, own: np.ndarray) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="not-needed")
    answer = client.embeddings.create(input=TEXTS, model=MODEL_NAME)
    assert [d.index for d in answer.data] == list(range(len(TEXTS)))
    assert answer.model == MODEL_NAME
    _exact([d.embedding for d in answer.data], own)
    tokens = sum(len(t) for t in _token_ids(server, TEXTS))
    assert answer.usage.prompt_tokens == answer.usage.total_tokens == tokens


def test_openai_sdk_float(server: Server, own: np.ndarray) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="not-needed")
    answer = client.embeddings.create(input=TEXTS[0], model=MODEL_NAME, encoding_format="float")
    _exact([answer.data[0].embedding], server.embed(TEXTS[:1]))


def test_openai_wire_base64_is_little_endian_float32(server: Server, own: np.ndarray) -> None:
    body = {"input": TEXTS, "model": MODEL_NAME, "encoding_format": "base64"}
    answer = httpx.post(f"{server.url}/v1/embeddings", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    rows = [np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in answer.json()["data"]]
    _exact(rows, own)


def test_openai_sdk_models_and_errors(server: Server) -> None:
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="not-needed")
    assert [m.id for m in client.models.list()] == [MODEL_NAME]
    assert client.models.retrieve(MODEL_NAME).id == MODEL_NAME
    with pytest.raises(openai.NotFoundError, match=r"The model 'text-embedding-3-small' does not exist"):
        client.embeddings.create(input="a", model="text-embedding-3-small")
    with pytest.raises(openai.BadRequestError, match=r"was not trained for reduced dimensions \(Matryoshka\)"):
        client.embeddings.create(input="a", model=MODEL_NAME, dimensions=128)
    # The full size is accepted as a no-op.
    full = client.embeddings.create(input="a", model=MODEL_NAME, dimensions=384)
    assert len(full.data[0].embedding) == 384
    answer = httpx.post(f"{server.url}/v1/embeddings", json={"input": "a"}, timeout=30)
    assert answer.status_code == 400
    assert answer.json() == {
        "error": {
            "message": "'model' is a required property",
            "type": "invalid_request_error",
            "param": "model",
            "code": None,
        }
    }


def _token_ids(server: Server, texts: list[str]) -> list[list[int]]:
    """The model's token ids of each text, with the special tokens (the tokenizer file, as the service reads it)."""
    from tokenizers import Tokenizer

    service = server.service_json()
    tokenizer = Tokenizer.from_file(str(server.out_dir / service["sentence"]["tokenizer_dir"] / "tokenizer.json"))
    tokenizer.enable_truncation(max_length=256)
    tokenizer.no_padding()
    return [e.ids for e in tokenizer.encode_batch(texts)]


def test_openai_token_id_inputs(server: Server, own: np.ndarray) -> None:
    """Token arrays are the model's own ids, without the special tokens the service adds."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="not-needed")
    texts = [t for t in TEXTS if t]  # an empty list of ids is refused (an empty text is not)
    ids = [row[1:-1] for row in _token_ids(server, texts)]
    answer = client.embeddings.create(input=ids, model=MODEL_NAME)
    _exact([d.embedding for d in answer.data], server.embed(texts))
    single = client.embeddings.create(input=ids[0], model=MODEL_NAME)
    _exact([single.data[0].embedding], server.embed(TEXTS[:1]))


def test_langchain_openai_embeddings(server: Server, own: np.ndarray) -> None:
    langchain_openai = pytest.importorskip("langchain_openai")
    # check_embedding_ctx_length=False: send the texts, not tiktoken's ids of another vocabulary
    # (langchain's advice for servers of non-OpenAI models).
    embeddings = langchain_openai.OpenAIEmbeddings(
        model=MODEL_NAME, base_url=f"{server.url}/v1", api_key="not-needed", check_embedding_ctx_length=False
    )
    _exact(embeddings.embed_documents(TEXTS), own)
    _exact([embeddings.embed_query(TEXTS[1])], server.embed(TEXTS[1:2]))


def test_huggingface_hub_feature_extraction(server: Server, own: np.ndarray, monkeypatch: pytest.MonkeyPatch) -> None:
    huggingface_hub = pytest.importorskip("huggingface_hub")
    # The tests run with HF_HUB_OFFLINE=1 (nothing may come from the Hub), which huggingface_hub
    # applies to every URL; this service is local. (A deployment does not set it.)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    client = huggingface_hub.InferenceClient(server.url)
    _exact(client.feature_extraction(TEXTS), own)
    one = client.feature_extraction(TEXTS[0])
    assert one.shape == (1, 384)
    _exact(one, server.embed(TEXTS[:1]))
    cut = client.feature_extraction(TEXTS[-1], truncate=True, truncation_direction="right", normalize=True)
    _exact(cut, server.embed(TEXTS[-1:]))


def test_tei_json_client(server: Server, own: np.ndarray) -> None:
    """TEI's protocol by hand: bare lists back, POST / routed like /embed, /info, /health, TEI's errors."""
    for path in ("/embed", "/"):
        answer = httpx.post(f"{server.url}{path}", json={"inputs": TEXTS}, timeout=60)
        assert answer.status_code == 200, answer.text
        _exact(answer.json(), own)
    one = httpx.post(f"{server.url}/embed", json={"inputs": TEXTS[0], "normalize": True}, timeout=60).json()
    _exact(one, server.embed(TEXTS[:1]))
    raw = httpx.post(f"{server.url}/embed", json={"inputs": TEXTS[0], "normalize": False}, timeout=60).json()
    assert abs(np.linalg.norm(raw[0]) - 1) > 1e-3  # the pooled vector, not normalised
    np.testing.assert_allclose(np.array(raw[0]) / np.linalg.norm(raw[0]), one[0], rtol=0, atol=1e-6)
    info = httpx.get(f"{server.url}/info", timeout=30).json()
    assert (info["model_id"], info["max_input_length"], info["auto_truncate"]) == (MODEL_NAME, 256, True)
    assert httpx.get(f"{server.url}/health", timeout=30).status_code == 200
    bad = httpx.post(f"{server.url}/embed", json={"inputs": []}, timeout=30)
    assert bad.status_code == 400  # TEI answers its kind Empty with 400
    assert bad.json() == {"error": "'inputs' is empty: send at least one input", "error_type": "Empty"}


def test_tei_client(server: Server, own: np.ndarray) -> None:
    """``tei-client``'s HttpClient: /info parsed into its model, embeddings, health."""
    tei_client = pytest.importorskip("tei_client")
    client = tei_client.HttpClient(server.url, timeout=60)
    info = client.info()
    assert (info.server_model_id, info.max_input_length) == (MODEL_NAME, 256)
    assert info.server_model_type == tei_client.ModelType.Embedding
    assert info.server_model_metadata is not None and info.server_model_metadata.pooling == "mean"
    assert client.health()
    _exact(client.embed(TEXTS, truncate=True), own)
    _exact(client.embed(TEXTS[0]), server.embed(TEXTS[:1]))


#: Drives text-embeddings-inference-client in its own environment; prints what it got as JSON.
_GENERATED_CLIENT = """
import json, sys
from text_embeddings_inference_client import Client
from text_embeddings_inference_client.api.text_embeddings_inference import embed, health
from text_embeddings_inference_client.models import EmbedRequest
url, texts, long_text = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
client = Client(base_url=url, timeout=60, raise_on_unexpected_status=True)
many = embed.sync(client=client, json_body=EmbedRequest(inputs=texts))
one = embed.sync(client=client, json_body=EmbedRequest(inputs=texts[0]))
refused = embed.sync_detailed(client=client, json_body=EmbedRequest(inputs=long_text, truncate=False))
print(json.dumps({
    "many": many, "one": one, "status": int(refused.status_code), "error": refused.parsed.error,
    "error_type": refused.parsed.error_type.value, "health": int(health.sync_detailed(client=client).status_code),
}))
"""


def test_text_embeddings_inference_client(server: Server, own: np.ndarray) -> None:
    """The client generated from TEI's OpenAPI schema: embeddings, and a refusal parsed into its ErrorResponse.

    Its ErrorResponse takes ``error_type`` only as TEI's server spells it (``Validation``, ...).
    """
    python = os.environ.get("BERTEMBED_TEI_CLIENT_PYTHON")
    if not python:
        pytest.skip("BERTEMBED_TEI_CLIENT_PYTHON not set (.ci/tei-client.sh makes its environment)")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    done = subprocess.run(
        [python, "-c", _GENERATED_CLIENT, server.url, json.dumps(TEXTS), LONG],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    _exact(got["many"], own)
    _exact(got["one"], server.embed(TEXTS[:1]))
    assert (got["status"], got["error_type"], got["health"]) == (413, "Validation", 200)
    assert re.match(r"input 0 has \d+ tokens, more than the model's 256", got["error"]), got["error"]


def test_truncation_direction(server: Server) -> None:
    """Left truncation keeps a long text's last tokens: equal to those tokens sent as ids."""
    ids = _token_ids(server, [LONG])[0]
    full = _full_ids(server, LONG)
    assert len(full) > 254
    left = httpx.post(
        f"{server.url}/embed", json={"inputs": LONG, "truncate": True, "truncation_direction": "Left"}, timeout=60
    ).json()
    tail = httpx.post(f"{server.url}/embed", json={"inputs": [full[-254:]]}, timeout=60).json()
    right = httpx.post(f"{server.url}/embed", json={"inputs": [ids[1:-1]]}, timeout=60).json()
    _exact(left, np.asarray(tail, dtype=np.float32))
    assert not np.allclose(left, right, atol=1e-3)


def _full_ids(server: Server, text: str) -> list[int]:
    from tokenizers import Tokenizer

    service = server.service_json()
    tokenizer = Tokenizer.from_file(str(server.out_dir / service["sentence"]["tokenizer_dir"] / "tokenizer.json"))
    tokenizer.no_truncation()
    return tokenizer.encode(text, add_special_tokens=False).ids


def test_metrics_and_access_log(server: Server) -> None:
    def count(text: str, route: str) -> int:
        total = 0
        for line in text.splitlines():
            match = re.match(r'embedding_requests_total\{worker="\d+",route="([^"]+)",status="200"\} (\d+)$', line)
            if match and match.group(1) == route:
                total += int(match.group(2))
        return total

    # Each worker answers with its own counters: ask on one keep-alive connection.
    with httpx.Client(base_url=server.url, timeout=60) as http:
        before = http.get("/metrics")
        assert before.headers["content-type"].startswith("text/plain; version=0.0.4")
        for _ in range(3):
            assert http.post("/v1/embeddings", json={"input": ["a", "b"], "model": MODEL_NAME}).status_code == 200
        after = http.get("/metrics").text
    assert count(after, "/v1/embeddings") == count(before.text, "/v1/embeddings") + 3
    for name in (
        "embedding_request_duration_seconds_bucket",
        "embedding_batch_size_bucket",
        "embedding_batch_tokens_bucket",
        "embedding_tokens_total",
        "embedding_queue_requests",
        "embedding_queue_tokens",
    ):
        assert re.search(rf"^{name}\{{worker=", after, re.MULTILINE), name
    for line in after.splitlines():  # the exposition format: comments or `name{labels} value`
        assert line.startswith("# ") or re.match(r"^[a-z_]+\{[^}]*\} [0-9.e+-]+$", line), line
    assert re.search(r'"POST /v1/embeddings HTTP/1.1" 200 \d+B [0-9.]+ms inputs=2 tokens=6$', server.log(), re.M)
