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
#: The environment variable that carries the API key to the workers (never on a command line).
API_KEY_ENV = "BERTEMBED_API_KEY"


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
    from ..serve import settings

    given = {s.name: getattr(args, s.name) for s in settings.SETTINGS if s.option}
    environment = settings.environment(given)
    if args.api_key is not None:
        if not args.api_key:
            raise CLIError("--api-key is empty")
        environment[API_KEY_ENV] = args.api_key
    serve(args.out_dir, host=args.host, port=args.port, workers=args.workers, settings=environment)
    return 0  # pragma: no cover - serve() replaces this process


def _default(setting: object) -> str:
    value = getattr(setting, "default", None)
    return "computed" if value is None else "none" if value == "" else str(value)


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
        default=os.environ.get(API_KEY_ENV),
        metavar="KEY",
        help="require 'Authorization: Bearer KEY' on every route but /health, /healthz and /ping "
        f"(default: ${API_KEY_ENV}; none: no key)",
    )
    from ..serve import settings

    limits = p.add_argument_group("limits and tuning (each also an environment variable, listed in GET /info)")
    for setting in settings.SETTINGS:
        if setting.option:
            limits.add_argument(
                setting.flag,
                type=setting.kind if setting.kind is not bool else None,
                metavar="N" if setting.kind in (int, float) else "VALUE",
                help=f"{setting.meaning} ({setting.env}; default {_default(setting)})",
            )
    p.add_argument(
        "--no-check",
        action="store_true",
        help="skip loading the artifact once before the workers start (it takes about as long as a worker's start)",
    )
    p.set_defaults(func=cmd_serve)
