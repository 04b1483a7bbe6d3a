"""The sentence-embedding service: a Starlette ASGI app.

``POST /embed`` with ``{"texts": ["...", ...]}`` answers
``{"embeddings": [[...], ...]}`` (one float32 vector per text, as JSON
numbers, in the order given); ``GET /healthz`` answers 200 once the model is
loaded in this process (503 before). Every bad request gets a 4xx status and
``{"error": "<what is wrong>"}``; see :func:`parse_texts` and :func:`read_body`.

Settings (environment variables, read by :func:`create_app`):

``SERVICE_DIR``            the output directory of ``export_encoder.py`` (required)
``SERVICE_MAX_BATCH``      texts per request, default 64
``SERVICE_MAX_BODY_BYTES`` request body size, default 1048576 (1 MiB)
``SERVICE_WORKERS``        worker processes on this machine (run.sh sets it), default 1
``SERVICE_THREADS``        threads per request, default max(1, usable cores // SERVICE_WORKERS)
``SERVICE_EMBEDDING``      ``bertembed`` (default) or ``torch`` (the comparison)

Run it with ``run.sh`` (gunicorn, uvicorn workers, ``--preload``); for a quick
try, ``SERVICE_DIR=out uvicorn --factory app:create_app``.

Concurrency: each worker process runs one request's model work at a time, on
a dedicated thread (the event loop keeps accepting, parsing and answering
``/healthz`` meanwhile), with ``SERVICE_THREADS`` threads inside ONNX Runtime
and bertembed. W workers therefore keep at most W x SERVICE_THREADS cores
busy, which the default makes the number of usable cores.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from pipeline import EMBEDDINGS, SentenceEmbedder
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

log = logging.getLogger("service")

DEFAULT_MAX_BATCH = 64
DEFAULT_MAX_BODY_BYTES = 1 << 20

#: JSON names of the Python types json.loads produces.
_JSON_TYPES = {dict: "an object", list: "an array", str: "a string", int: "a number",
               float: "a number", bool: "a boolean", type(None): "null"}


class BadRequest(Exception):
    """A request the service refuses: an HTTP status and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def _json_type(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def parse_texts(body: bytes, max_batch: int) -> list[str]:
    """The texts of an ``/embed`` body, or :class:`BadRequest` saying what is wrong.

    Parameters
    ----------
    body : bytes
        The request body.
    max_batch : int
        Most texts allowed in one request.

    Returns
    -------
    list of str
        At least one and at most ``max_batch`` texts (empty strings allowed).

    Raises
    ------
    BadRequest
        400 when the body is not JSON; 422 when it is JSON but not
        ``{"texts": [str, ...]}`` with 1 to ``max_batch`` valid strings.

    Examples
    --------
    >>> parse_texts(b'{"texts": ["a", "b"]}', max_batch=8)
    ['a', 'b']
    >>> parse_texts(b'{"texts": []}', max_batch=8)
    Traceback (most recent call last):
    ...
    app.BadRequest: 'texts' is empty: send at least one text
    """
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadRequest(400, f"body is not valid JSON: {exc}") from None
    except RecursionError:
        raise BadRequest(400, "body is not valid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise BadRequest(422, f'body must be a JSON object {{"texts": [...]}}, got {_json_type(data)}')
    unknown = sorted(set(data) - {"texts"})
    if unknown:
        raise BadRequest(422, f"unknown field(s) {unknown}: the body has only 'texts'")
    if "texts" not in data:
        raise BadRequest(422, "'texts' is missing: send {\"texts\": [\"...\", ...]}")
    texts = data["texts"]
    if not isinstance(texts, list):
        raise BadRequest(422, f"'texts' must be an array of strings, got {_json_type(texts)}")
    if not texts:
        raise BadRequest(422, "'texts' is empty: send at least one text")
    if len(texts) > max_batch:
        raise BadRequest(422, f"'texts' has {len(texts)} texts, more than the limit of {max_batch} per request")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise BadRequest(422, f"texts[{i}] is {_json_type(text)}, not a string")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise BadRequest(
                422, f"texts[{i}] is not valid Unicode: unpaired surrogate at character {exc.start}"
            ) from None
    return texts


async def read_body(request: Request, limit: int) -> bytes:
    """The request body, or :class:`BadRequest` (413) once it is known to exceed ``limit`` bytes.

    A declared ``Content-Length`` over the limit is refused before reading;
    a chunked body is refused as soon as it grows past the limit. The body
    is not kept past the limit, but it is read to its end (up to 64 times the
    limit) so that the client, still sending, reads the 413 instead of a
    reset connection.
    """
    declared = request.headers.get("content-length")
    too_large = None
    if declared is not None and declared.isdigit() and int(declared) > limit:
        too_large = f"body is {int(declared)} bytes, more than the limit of {limit} bytes"
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if too_large is None and size > limit:
            too_large = f"body is more than the limit of {limit} bytes"
        if too_large is None:
            chunks.append(chunk)
        elif size > 64 * limit:
            break  # stop draining: the connection is closed after the answer
    if too_large is not None:
        raise BadRequest(413, too_large)
    return b"".join(chunks)


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def _threads_per_request() -> int:
    if "SERVICE_THREADS" in os.environ:
        return max(1, int(os.environ["SERVICE_THREADS"]))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cores // max(1, int(os.environ.get("SERVICE_WORKERS", "1"))))


def _setup_logging() -> None:
    """Log to stderr (gunicorn's log), once per process, like gunicorn's own lines."""
    if not log.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[%(asctime)s] [%(process)d] [%(levelname)s] %(message)s",
                                               "%Y-%m-%d %H:%M:%S %z"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def create_app(
    service_dir: str | None = None,
    *,
    max_batch: int | None = None,
    max_body_bytes: int | None = None,
    embedding: str | None = None,
    threads: int | None = None,
) -> Starlette:
    """Build the app; arguments left as None come from the environment (see the module doc).

    The embedding layer and the tokenizer are loaded here (in the gunicorn
    master with ``--preload``: the checkpoint is mapped once, before the
    fork); the encoder session is created at startup, in each worker.

    Examples
    --------
    >>> app = create_app("out/", max_batch=32)  # doctest: +SKIP
    """
    service_dir = service_dir or os.environ.get("SERVICE_DIR")
    if not service_dir:
        raise RuntimeError("set SERVICE_DIR to the output directory of export_encoder.py")
    max_batch = max_batch or int(os.environ.get("SERVICE_MAX_BATCH", DEFAULT_MAX_BATCH))
    max_body = max_body_bytes or int(os.environ.get("SERVICE_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES))
    embedding = embedding or os.environ.get("SERVICE_EMBEDDING", "bertembed")
    if embedding not in EMBEDDINGS:
        raise ValueError(f"SERVICE_EMBEDDING={embedding!r}: choose one of {EMBEDDINGS}")
    _setup_logging()
    threads = threads or _threads_per_request()
    embedder = SentenceEmbedder(service_dir, embedding=embedding, threads=threads)
    log.info("%s embedding layer checked with %d thread(s)", embedding, threads)
    # One model thread per process: requests queue here, not in the cores.
    state: dict[str, Any] = {"executor": None}

    def compute(texts: list[str]) -> tuple[bytes, dict[str, float]]:
        vectors, timings = embedder.embed(texts)
        body = json.dumps({"embeddings": vectors.tolist()}, separators=(",", ":")).encode()
        return body, timings

    async def embed(request: Request) -> Response:
        try:
            texts = parse_texts(await read_body(request, max_body), max_batch)
        except BadRequest as exc:
            return _error(exc.status, exc.message)
        except ClientDisconnect:  # gone before its body arrived: nobody reads the answer
            return _error(400, "the client disconnected before sending the whole body")
        loop = asyncio.get_running_loop()
        body, timings = await loop.run_in_executor(state["executor"], compute, texts)
        timing = ", ".join(f"{name};dur={seconds * 1e3:.3f}" for name, seconds in timings.items())
        return Response(body, media_type="application/json", headers={"Server-Timing": timing})

    async def healthz(request: Request) -> Response:
        if not embedder.ready:
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse({
            "status": "ok", "pid": os.getpid(), "embedding": embedder.step.name,
            "dimension": embedder.dimension, "max_seq_length": embedder.max_seq_length,
            "max_batch": max_batch, "max_body_bytes": max_body, "threads": threads,
        })

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        # In the worker's main thread, the one gunicorn forked from: with
        # threads > 1 this is the fork-after-OpenMP case (the master ran a
        # parallel region in this same thread) that bertembed's fork handler
        # makes safe. Nothing is served yet, so blocking the loop is fine.
        embedder.start()
        state["executor"] = ThreadPoolExecutor(max_workers=1, thread_name_prefix="model")
        log.info("ready: %s embedding, %d thread(s)", embedding, threads)
        yield
        state["executor"].shutdown(wait=True)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return _error(exc.status_code, exc.detail, dict(exc.headers or {}))

    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception("unexpected error on %s %s", request.method, request.url.path)
        return _error(500, "internal error")

    return Starlette(
        routes=[Route("/embed", embed, methods=["POST"]), Route("/healthz", healthz, methods=["GET"])],
        exception_handlers={HTTPException: http_error, Exception: server_error},
        lifespan=lifespan,
    )
