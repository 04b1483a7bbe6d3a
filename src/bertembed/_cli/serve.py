"""``bertembed serve OUT_DIR``: an artifact of ``bertembed export`` as an HTTP server.

The artifact is loaded once in a child process, as a worker would load it,
before gunicorn starts (:mod:`bertembed.serve.server.check`): a missing,
truncated or corrupt file is one ``bertembed: error:`` line naming the file
and exit status 1, not a worker crash loop on a bound port. Then this
process becomes the gunicorn master (:mod:`bertembed.serve.server.run`).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from .common import CLIError, positive_int

#: The packages ``bertembed serve`` runs on (the ``serve`` extra).
NEEDED = ("gunicorn", "uvicorn", "uvicorn_worker", "starlette", "orjson", "onnxruntime", "tokenizers")
#: What each option sets for the app (environment variables of bertembed.serve.server.app).
SETTINGS = {
    "threads": "SERVICE_THREADS",
    "max_batch_tokens": "SERVICE_MAX_BATCH_TOKENS",
    "max_wait_ms": "SERVICE_MAX_WAIT_MS",
    "max_request_tokens": "SERVICE_MAX_REQUEST_TOKENS",
    "batch_size": "SERVICE_BATCH_SIZE",
    "api_key": "BERTEMBED_API_KEY",
}


def cmd_serve(args: argparse.Namespace) -> int:
    """Check the artifact and the packages, then exec gunicorn."""
    if sys.platform == "win32":
        raise CLIError("bertembed serve runs gunicorn, which needs a POSIX system (Linux, macOS)")
    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        raise CLIError(f"bertembed serve needs {', '.join(missing)}: pip install 'bertembed[serve]'")
    from ..serve.server.check import ArtifactError, check_artifact
    from ..serve.server.run import serve

    if not args.no_check:
        try:
            check_artifact(args.out_dir)
        except ArtifactError as exc:
            raise CLIError(str(exc)) from None
    settings = {env: str(value) for key, env in SETTINGS.items() if (value := getattr(args, key)) is not None}
    if args.api_key is not None and not args.api_key:
        raise CLIError("--api-key is empty")
    serve(args.out_dir, host=args.host, port=args.port, workers=args.workers, settings=settings)
    return 0  # pragma: no cover - serve() replaces this process


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Register ``serve`` on the subcommand parsers ``sub``."""
    p = sub.add_parser(
        "serve",
        help="serve an artifact of 'bertembed export' over HTTP (OpenAI, TEI; extra 'serve')",
        description="Serve OUT_DIR (the output of 'bertembed export') with gunicorn and uvicorn workers: "
        'POST /v1/embeddings (OpenAI), POST /embed and / (Text Embeddings Inference, or {"texts": [...]}), '
        "GET /v1/models, /info, /health, /healthz, /metrics. More settings are environment variables "
        "(see the server page of the documentation).",
    )
    p.add_argument("out_dir", metavar="OUT_DIR", help="the artifact directory")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=positive_int, default=8080, help="port to listen on (default 8080)")
    p.add_argument(
        "--workers", type=positive_int, default=1, help="worker processes (default 1, its encoder on every core)"
    )
    p.add_argument(
        "--api-key",
        default=os.environ.get("BERTEMBED_API_KEY"),
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' on every route but /health, /healthz and /ping "
        "(default: $BERTEMBED_API_KEY; none: no key)",
    )
    p.add_argument("--threads", type=positive_int, help="ONNX Runtime threads per worker (default: cores / workers)")
    p.add_argument("--batch-size", type=positive_int, help="most texts in one encoder call (default 32)")
    p.add_argument("--max-batch-tokens", type=positive_int, help="most padded tokens in one encoder call")
    p.add_argument("--max-request-tokens", type=positive_int, help="most tokens in one request")
    p.add_argument("--max-wait-ms", type=float, help="how long the batcher may wait for more requests")
    p.add_argument(
        "--no-check",
        action="store_true",
        help="skip loading the artifact once before the workers start (it takes about as long as a worker's start)",
    )
    p.set_defaults(func=cmd_serve)
