"""The sentence-embedding service: a Starlette ASGI app.

Routes (see README.md, "The API"):

``POST /embed``            ``{"texts": [...]}`` -> ``{"embeddings": [...]}``; or Text Embeddings
                           Inference's ``{"inputs": ..., "normalize", "truncate",
                           "truncation_direction", "prompt_name", "dimensions"}`` -> ``[[...], ...]``
``POST /``                 the same as ``POST /embed`` (TEI's route)
``POST /v1/embeddings``    OpenAI's embeddings API (``input``, ``model``, ``encoding_format``
                           float or base64, ``dimensions``, ``usage`` in the answer)
``GET /v1/models``         OpenAI's model list (``GET /v1/models/{id}`` for one)
``GET /info``              TEI's model and limits; ``GET /health`` (TEI), ``GET /healthz`` (this service)
``GET /metrics``           Prometheus text format: requests and latency per route, batch sizes,
                           tokens, queue depth (per worker, labelled with its pid)

Every bad request gets a 4xx in its protocol's error shape, never a 500; each
request is logged on one line (``SERVICE_ACCESS_LOG=0`` turns it off). With a
trimmed embedding layer (``bertembed export --trim-*``), a request whose
inputs have tokens the layer does not keep gets one 422 (code
``token_not_kept``) naming every such input (``input[i]``, ``inputs[i]`` or
``texts[i]``) with its first such token, when the layer's unknown rule is
"error"; with "unk" such tokens read the unknown token's row. A request may
choose the rule itself with the header ``X-Bertembed-Unknown: unk`` (or
``error``): a header, so that every protocol's body stays as it is.
``/info``'s ``embedding_layer`` says the layer's rule, its kept rows and the
rules a request may choose.

Settings: ``SERVICE_DIR``, the artifact directory (``bertembed export``'s OUT_DIR); when
``BERTEMBED_API_KEY`` is set, every route but ``/health``, ``/healthz`` and ``/ping`` needs
``Authorization: Bearer <key>`` (else 401); every other setting is declared once in
:mod:`bertembed.serve.settings` (``python -m bertembed.serve.settings`` prints them), read by
:func:`create_app` (``bertembed serve`` sets them from its options).

Concurrency: per worker, the event loop reads and checks requests; one
thread tokenizes and writes answers; one thread, the batcher
(:class:`batching.Batcher`), runs the encoder on the sequences of all
concurrent requests, grouped by length. A request alone in its worker that
finds the batcher idle and fits one encoder call (``SERVICE_IMMEDIATE``, on by default) runs
that call on the tokenizing thread, between its tokenizing and its answer,
with no hand-off to the batcher and back. Either way a worker runs one
encoder call at a time: W workers keep at most W x SERVICE_THREADS cores
busy in the encoder, the number of usable cores by default.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import os
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from .. import settings
from ..protocols import (
    UNKNOWN_HEADER,
    BadRequest,
    EmbedRequest,
    check_content_type,
    check_dimensions,
    check_token_ids,
    not_kept,
    openai_body,
    openai_error,
    parse_embed_body,
    parse_openai_body,
    parse_unknown_header,
    tei_body,
    tei_error,
    texts_body,
)
from .batching import Batcher
from .memory import give_back_memory
from .metrics import Metrics
from .pipeline import (
    ARENA_MODES,
    EMBEDDINGS,
    GRAPH_LEVELS,
    SPINNING_MODES,
    InputTooLong,
    SentenceEmbedder,
    TrimmedToken,
    spinning_on,
)

log = logging.getLogger("service")

#: The exit status that makes gunicorn stop instead of starting the worker again (its WORKER_BOOT_ERROR).
WORKER_BOOT_ERROR = 3
#: Characters escaped in the access log (a request line cannot forge a log line).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
#: Routes whose errors take OpenAI's shape.
OPENAI_PREFIX = "/v1/"
#: The routes, as metrics and the access log name them (anything else is "other").
ROUTES = ("/", "/embed", "/v1/embeddings", "/v1/models", "/info", "/health", "/healthz", "/ping", "/metrics")
#: Routes that need no API key: a load balancer's or orchestrator's probes.
OPEN_ROUTES = frozenset({"/health", "/healthz", "/ping"})


class RequireKey:
    """ASGI middleware: with an API key set, a request without ``Authorization: Bearer <key>`` gets a 401.

    The key is compared in constant time (:func:`hmac.compare_digest`); the
    probe routes (:data:`OPEN_ROUTES`, and ``/metrics`` when
    ``metrics_open``) need none. The 401 has the route's protocol's error
    shape and ``WWW-Authenticate: Bearer``.
    """

    def __init__(self, app: Any, key: str, *, metrics_open: bool) -> None:
        self.app = app
        self.expected = f"Bearer {key}".encode()
        self.open = OPEN_ROUTES | ({"/metrics"} if metrics_open else set())

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http" or scope.get("path", "") in self.open:
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), b"")
        if hmac.compare_digest(given, self.expected):
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        exc = BadRequest(
            401,
            "a valid API key is needed: send 'Authorization: Bearer <key>'",
            code="invalid_api_key",
        )
        response = _error(path, exc, {"WWW-Authenticate": "Bearer"})
        await response(scope, receive, send)


async def read_body(request: Request, limit: int, timeout: float) -> bytes:
    """The request body, or :class:`BadRequest`: 413 once it is known to exceed ``limit`` bytes, 408 when
    it takes more than ``timeout`` seconds.

    A declared ``Content-Length`` over the limit is refused before a byte
    of the body is read (so ``Expect: 100-continue`` gets no 100); a chunked
    body is refused as soon as it grows past the limit. The refusal closes
    the connection (``Connection: close``): what the client still sends is
    never read.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise BadRequest(413, f"body is {int(declared)} bytes, more than the limit of {limit} bytes")

    async def read() -> bytes:
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise BadRequest(413, f"body is more than the limit of {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(read(), timeout)
    except asyncio.TimeoutError:
        raise BadRequest(408, f"the body took more than {timeout:g} s to arrive") from None


def _error(path: str, exc: BadRequest, headers: dict[str, str] | None = None) -> JSONResponse:
    """The error in the shape of the route's protocol (a 408 or 413 also closes the connection)."""
    body = openai_error(exc) if path.startswith(OPENAI_PREFIX) else tei_error(exc)
    if exc.status in (408, 413):
        headers = {**(headers or {}), "Connection": "close"}
    return JSONResponse(body, status_code=exc.status, headers=headers)


async def _disconnected(request: Request) -> None:
    """Return when the client has gone away (after its body was read, ASGI's next message is the disconnect)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _escaped(text: str) -> str:
    """`text` with control characters as ``\\xNN`` (the access log's fields)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _timing(stages: dict[str, float]) -> str:
    """The ``Server-Timing`` header: milliseconds of each stage."""
    return ", ".join(f"{name};dur={seconds * 1e3:.3f}" for name, seconds in stages.items())


def _usable_cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _setup_logging() -> None:
    """Log to stderr (gunicorn's log), once per process, like gunicorn's own lines."""
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(
            logging.Formatter("[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s", "%Y-%m-%d %H:%M:%S %z")
        )
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


class AccessLog:
    """ASGI middleware: one log line and one metrics sample per HTTP request.

    The line: client, request line, status, body bytes, milliseconds, and what
    the handler put in ``scope["state"]["log"]`` (inputs, tokens), e.g.
    ``127.0.0.1:50312 "POST /v1/embeddings HTTP/1.1" 200 3112B 14.2ms inputs=2 tokens=17``.
    """

    def __init__(self, app: Any, metrics: Metrics, enabled: bool) -> None:
        self.app, self.metrics, self.enabled = app, metrics, enabled

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[Any]],
        send: Callable[[Any], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        answer = {"status": 500, "bytes": 0}
        scope.setdefault("state", {})

        async def sending(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
            elif message["type"] == "http.response.body":
                answer["bytes"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - began
            path = scope.get("path", "")
            route = path if path in ROUTES else "/v1/models" if path.startswith("/v1/models/") else "other"
            self.metrics.request(route, int(answer["status"]), seconds)
            if self.enabled:
                client = scope.get("client") or ("-", 0)
                extra = " ".join(f"{k}={v}" for k, v in scope["state"].get("log", {}).items())
                log.info(
                    '%s:%s "%s %s HTTP/%s" %d %dB %.1fms%s',
                    _escaped(str(client[0])),
                    client[1],
                    _escaped(scope.get("method", "-")),
                    _escaped(path),
                    scope.get("http_version", "1.1"),
                    answer["status"],
                    answer["bytes"],
                    seconds * 1e3,
                    f" {extra}" if extra else "",
                )


def create_app(
    service_dir: str | None = None,
    *,
    max_batch: int | None = None,
    max_body_bytes: int | None = None,
    embedding: str | None = None,
    threads: int | None = None,
) -> Any:
    """Build the app; arguments left as None come from the environment (see the module doc).

    The embedding layer and the tokenizer are loaded here (in the gunicorn
    master with ``--preload``: the checkpoint is mapped once, before the
    fork); the encoder session and the batcher's thread are started at
    startup, in each worker.

    Examples
    --------
    >>> app = create_app("out/", max_batch=32)  # doctest: +SKIP
    """
    service_dir = service_dir or os.environ.get("SERVICE_DIR")
    if not service_dir:
        raise RuntimeError("set SERVICE_DIR to the artifact directory (bertembed export's OUT_DIR)")
    values = settings.read()
    if max_batch is not None:
        values["max_batch"] = max_batch
    if max_body_bytes is not None:
        values["max_body_bytes"] = max_body_bytes
    if embedding is not None:
        values["embedding"] = embedding
    if threads is not None:
        values["threads"] = threads
    embedding = values["embedding"]
    if embedding not in EMBEDDINGS:
        raise ValueError(f"SERVICE_EMBEDDING={embedding!r}: choose one of {EMBEDDINGS}")
    arena, graph = values["arena"], values["graph_optimization"]
    if arena not in ARENA_MODES or graph not in GRAPH_LEVELS or values["spinning"] not in SPINNING_MODES:
        raise ValueError(
            f"SERVICE_ORT_ARENA must be one of {ARENA_MODES}, SERVICE_GRAPH_OPT one of {sorted(GRAPH_LEVELS)}, "
            f"SERVICE_ORT_SPINNING one of {SPINNING_MODES}"
        )
    _setup_logging()
    max_batch, max_body = values["max_batch"], values["max_body_bytes"]
    threads = values["threads"] or max(1, _usable_cores() // values["workers"])
    embed_threads = values["embed_threads"]
    max_request_tokens, max_queue_tokens = values["max_request_tokens"], values["max_queue_tokens"]
    auto_truncate = values["auto_truncate"]
    api_key = os.environ.get("BERTEMBED_API_KEY") or None
    embedder = SentenceEmbedder(
        service_dir,
        embedding=embedding,
        threads=threads,
        embed_threads=embed_threads,
        batch_size=values["batch_size"],
        max_batch_tokens=values["max_batch_tokens"],
        arena=arena,
        graph_optimization=graph,
        # The workers' threads together, not one worker's, decide whether a spinning thread owns its core.
        spinning="on" if spinning_on(values["spinning"], threads, values["workers"]) else "off",
    )
    immediate = values["immediate"]
    if values["shared_encoder"]:
        try:
            log.info("encoder: %s", embedder.share_encoder(values["encoder_cache"] or None))
        except (OSError, RuntimeError) as exc:
            log.warning("the workers load their own copies of the encoder: %s", _escaped(str(exc)))
    model = values["model_name"] or embedder.name
    #: What /info lists under "limits": every limit setting's value in this worker.
    limits = {s.name: values[s.name] for s in settings.SETTINGS if s.limit}
    limits["max_connections"] = values["max_connections"] or settings.default_max_connections()
    log.info("%s embedding layer checked with %d thread(s)", embedding, embed_threads)
    metrics = Metrics(lambda: batcher.queue())
    batcher = Batcher(
        embedder.encode_call,
        max_batch_tokens=embedder.max_batch_tokens,
        max_texts=embedder.batch_size,
        max_wait=values["max_wait_ms"] / 1e3,
        on_call=metrics.call,
    )
    #: The tokenizer thread pool, the start time, the requests in progress, the tokens admitted but not
    #: yet in the batcher's queue.
    state: dict[str, Any] = {"cpu": None, "started": int(time.time()), "active": 0, "reserved": 0}
    layer = embedder.layer_info()
    unknown_token = None if embedder.unk_id is None else embedder.tokenizer.id_to_token(embedder.unk_id)
    if layer["trimmed"]:
        layer["unknown_header"] = UNKNOWN_HEADER
        log.info(
            "trimmed embedding layer: %d of %d token rows, unknown tokens: %s (a request's %s: %s)",
            layer["kept_rows"],
            layer["vocab_size"],
            "refused (422)" if layer["unknown"] == "error" else f"the row of id {layer['unknown']}",
            UNKNOWN_HEADER,
            "/".join(layer["unknown_rules"]),
        )

    def prepare(request: EmbedRequest) -> list[np.ndarray]:
        """Token ids of the request's inputs (in the tokenizer thread)."""
        truncate = auto_truncate if request.truncate is None else request.truncate
        if request.shape in ("texts", "openai"):
            truncate = True  # sentence-transformers truncates
        name = {"openai": "input", "tei": "inputs"}.get(request.shape, "texts")
        try:
            if request.ids is not None:
                check_token_ids(name, request.ids, embedder.vocab_size)
                seqs = embedder.from_ids(request.ids, truncate=truncate, direction=request.direction)
            else:
                assert request.texts is not None
                seqs = embedder.tokenize(
                    request.texts, prompt_name=request.prompt_name, truncate=truncate, direction=request.direction
                )
            seqs = embedder.resolve_unknown(seqs, request.unknown)
        except TrimmedToken as exc:
            raise not_kept(
                name,
                exc.inputs,
                exc.count,
                kept_rows=layer["kept_rows"],
                vocab_size=layer["vocab_size"],
                unknown_token=unknown_token,
            ) from None
        except InputTooLong as exc:
            raise BadRequest(
                413,
                f'{exc}; send shorter inputs or "truncate": true',
            ) from None
        except KeyError:
            names = sorted(embedder.prompts) or "none"
            message = f"prompt_name {request.prompt_name!r} unknown; the model's prompts: {names}"
            raise BadRequest(422, message) from None
        tokens = sum(len(s) for s in seqs)
        if tokens > max_request_tokens:
            raise BadRequest(
                413, f"the request has {tokens} tokens, more than the limit of {max_request_tokens} per request"
            )
        return seqs

    def prepare_and_run(request: EmbedRequest) -> tuple[list[np.ndarray], bytes | None, dict[str, float]]:
        """Token ids of the request's inputs and, when the batcher is idle and they fit one encoder call,
        the answer's body computed at once and the seconds of each stage (in the tokenizer thread).
        The body is None when the request must go through the batcher."""
        began = time.perf_counter()
        seqs = prepare(request)
        tokenized = time.perf_counter()
        # Only a request alone in its worker: with others in progress the batcher groups them (throughput).
        done = batcher.run_now(seqs) if immediate and state["active"] <= 1 else None
        if done is None:
            return seqs, None, {"tokenize": tokenized - began}
        vectors, stages = done
        body = render(request, vectors, sum(len(s) for s in seqs))
        return seqs, body, {"tokenize": tokenized - began, "batch": time.perf_counter() - tokenized, **stages}

    def render(request: EmbedRequest, vectors: np.ndarray, tokens: int) -> bytes:
        """The answer's body (in the tokenizer thread)."""
        vectors = embedder.finish(vectors, normalize=request.normalize, dimensions=request.dimensions)
        if request.shape == "openai":
            return openai_body(vectors, model=model, encoding_format=request.encoding_format, tokens=tokens)
        return tei_body(vectors) if request.shape == "tei" else texts_body(vectors)

    async def compute(request: Request, parsed: EmbedRequest) -> Response:
        loop = asyncio.get_running_loop()
        began = time.perf_counter()
        check_dimensions(parsed, embedder.dimension, embedder.matryoshka_dims, model)
        parsed.unknown = parse_unknown_header(request.headers.get(UNKNOWN_HEADER), parsed.shape)
        if parsed.unknown == "unk" and "unk" not in layer.get("unknown_rules", ["unk"]):
            raise BadRequest(
                400 if parsed.shape == "openai" else 422,
                f"{UNKNOWN_HEADER}: unk cannot be served: {embedder.unk_refusal()}",
            )
        # Admission before any tokenizing: at most this many tokens (each input's, at most the model's length).
        estimate = min(max_request_tokens, estimated_tokens(parsed))
        waiting = batcher.queue()[1] + state["reserved"]
        if waiting + estimate > max_queue_tokens:
            raise BadRequest(
                429, f"this worker is busy ({waiting} tokens waiting); retry later", error_type="Overloaded"
            )
        state["reserved"] += estimate
        try:
            seqs, answered, stages = await loop.run_in_executor(state["cpu"], prepare_and_run, parsed)
        finally:
            state["reserved"] -= estimate
        tokens = sum(len(s) for s in seqs)
        request.scope["state"]["log"] = {"inputs": len(seqs), "tokens": tokens}
        metrics.inputs(len(seqs), tokens)
        if answered is not None:  # computed at once: the batcher was idle (prepare_and_run)
            return Response(answered, media_type="application/json", headers={"Server-Timing": _timing(stages)})
        tokenized = time.perf_counter()
        future: asyncio.Future[np.ndarray] = loop.create_future()

        def done(vectors: np.ndarray | None, error: BaseException | None) -> None:
            def settle() -> None:
                if future.cancelled():
                    return
                if error is not None:
                    future.set_exception(error)
                else:
                    future.set_result(vectors)  # type: ignore[arg-type]

            loop.call_soon_threadsafe(settle)

        job = batcher.submit(seqs, done)
        vectors = await _until_done(request, future, job, began + values["request_timeout_s"])
        computed = time.perf_counter()
        body = await loop.run_in_executor(state["cpu"], render, parsed, vectors, tokens)
        timings = {"tokenize": tokenized - began, "batch": computed - tokenized, **job.stages}
        return Response(body, media_type="application/json", headers={"Server-Timing": _timing(timings)})

    def estimated_tokens(parsed: EmbedRequest) -> int:
        """At most the tokens the request's inputs make: the model's length per input, less for short ones
        (a token of these tokenizers covers at least one character, or is an id given)."""
        extra = len(embedder.prefix) + len(embedder.suffix) + len(embedder.prompt_text(None) or "")
        sizes = [len(x) for x in (parsed.ids if parsed.ids is not None else parsed.texts or [])]
        return sum(min(embedder.max_seq_length, size + extra) for size in sizes)

    async def _until_done(
        request: Request, future: asyncio.Future[np.ndarray], job: Any, deadline: float
    ) -> np.ndarray:
        """The job's vectors; its queued work is dropped when the client goes away or the deadline passes."""
        gone: asyncio.Future[Any] = asyncio.ensure_future(_disconnected(request))
        waiting: set[asyncio.Future[Any]] = {future, gone}
        try:
            finished, _ = await asyncio.wait(
                waiting, timeout=max(0.0, deadline - time.perf_counter()), return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            gone.cancel()
        if future in finished:
            return future.result()
        batcher.cancel(job)
        future.cancel()
        if gone in finished:
            metrics.cancelled()
            raise ClientDisconnect()
        raise BadRequest(
            503,
            f"the request took more than {values['request_timeout_s']:g} s; its work was dropped, retry later",
            error_type="Overloaded",
        )

    async def admitted(request: Request, parse: Callable[[bytes], EmbedRequest]) -> Response:
        """A request counted against the concurrency limit, read, parsed and computed; errors in its shape."""
        path = request.url.path
        if state["active"] >= values["max_concurrent_requests"]:
            busy = f"this worker has {state['active']} requests in progress; retry later"
            return _error(path, BadRequest(429, busy, error_type="Overloaded"))
        state["active"] += 1
        try:
            body = await read_body(request, max_body, values["body_timeout_s"])
            check_content_type(request.headers.get("content-type"))
            parsed = await asyncio.get_running_loop().run_in_executor(state["cpu"], parse, body)
            return await compute(request, parsed)
        except BadRequest as exc:
            return _error(path, exc)
        except ClientDisconnect:  # gone: nobody reads the answer
            return _error(path, BadRequest(400, "the client disconnected before its answer"))
        finally:
            state["active"] -= 1

    async def embed(request: Request) -> Response:
        return await admitted(request, lambda body: parse_embed_body(body, max_batch))

    def parse_openai(body: bytes) -> EmbedRequest:
        parsed = parse_openai_body(body, max_batch)
        if parsed.model != model:
            raise BadRequest(
                404,
                f"The model '{parsed.model}' does not exist; this service serves '{model}' (GET /v1/models)",
                param="model",
                code="model_not_found",
            )
        return parsed

    async def openai_embeddings(request: Request) -> Response:
        return await admitted(request, parse_openai)

    def model_card() -> dict[str, Any]:
        return {"id": model, "object": "model", "created": state["started"], "owned_by": "bertembed-service"}

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [model_card()]})

    async def one_model(request: Request) -> Response:
        wanted = request.path_params["model"]
        if wanted != model:
            exc = BadRequest(404, f"The model '{wanted}' does not exist", param="model", code="model_not_found")
            return _error(request.url.path, exc)
        return JSONResponse(model_card())

    async def info(request: Request) -> Response:
        sentence = embedder.config["sentence"]
        return JSONResponse(
            {
                "model_id": model,
                "model_sha": None,
                "model_dtype": embedder.config["encoder"].get("dtype", "float32"),
                "model_type": {"embedding": {"pooling": "+".join(sentence["pooling"])}},
                "max_concurrent_requests": values["max_concurrent_requests"],
                "max_input_length": embedder.max_seq_length,
                "max_batch_tokens": embedder.max_batch_tokens,
                "max_batch_requests": None,
                "max_client_batch_size": max_batch,
                "auto_truncate": auto_truncate,
                "tokenization_workers": 1,
                "version": "bertembed-service",
                "sha": None,
                "docker_label": None,
                "dimension": embedder.dimension,
                "normalize": embedder.normalize,
                "prompts": sorted(embedder.prompts),
                "matryoshka_dimensions": embedder.matryoshka_dims,
                "max_request_tokens": max_request_tokens,
                "limits": limits,
                "embedding_layer": layer,
            }
        )

    async def health(request: Request) -> Response:
        if not embedder.ready:  # TEI's answer while its model is not ready
            return _error(request.url.path, BadRequest(503, "unhealthy", error_type="Unhealthy"))
        return Response(status_code=200)

    async def healthz(request: Request) -> Response:
        if not embedder.ready:
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse(
            {
                "status": "ok",
                "pid": os.getpid(),
                "embedding": embedder.step.name,
                "model": model,
                "dimension": embedder.dimension,
                "max_seq_length": embedder.max_seq_length,
                "max_batch": max_batch,
                "max_body_bytes": max_body,
                "threads": threads,
                "max_batch_tokens": embedder.max_batch_tokens,
                "trimmed": layer["trimmed"],
            }
        )

    async def prometheus(request: Request) -> Response:
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4")

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # In the worker's main thread, the one gunicorn forked from: with
        # embed threads > 1 this is the fork-after-OpenMP case (the master ran a
        # parallel region in this same thread) that bertembed's fork handler
        # makes safe. Nothing is served yet, so blocking the loop is fine.
        metrics.reset_worker()
        try:
            embedder.start()
        except BaseException:
            # A worker that cannot load the artifact exits with gunicorn's boot-error status, which
            # stops gunicorn instead of starting the worker again and again.
            log.exception("the worker cannot start: the artifact failed to load")
            os._exit(WORKER_BOOT_ERROR)
        give_back_memory()  # what loading the encoder freed stays in the heap otherwise
        batcher.start()
        state["cpu"] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenize")
        log.info("ready: %s embedding, %d thread(s)", embedding, threads)
        yield
        batcher.stop()
        state["cpu"].shutdown(wait=True)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _error(request.url.path, BadRequest(exc.status_code, exc.detail), dict(exc.headers or {}))

    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _error(request.url.path, BadRequest(500, "internal error", error_type="Backend"))

    app = Starlette(
        routes=[
            Route("/embed", embed, methods=["POST"]),
            Route("/", embed, methods=["POST"]),
            Route("/v1/embeddings", openai_embeddings, methods=["POST"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/models/{model:path}", one_model, methods=["GET"]),
            Route("/info", info, methods=["GET"]),
            Route("/health", health, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
            Route("/ping", health, methods=["GET"]),
            Route("/metrics", prometheus, methods=["GET"]),
        ],
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
    keyed: Any = app if api_key is None else RequireKey(app, api_key, metrics_open=values["metrics_open"])
    return AccessLog(keyed, metrics, values["access_log"])
