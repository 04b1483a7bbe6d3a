"""``bertembed serve``: the artifact behind gunicorn, with uvicorn workers.

gunicorn runs W uvicorn workers (:class:`.worker.BertembedWorker`, the
``uvicorn-worker`` package's with bertembed's connection limits) and restarts
any that dies. ``--preload`` builds the app in the master: the artifact's
embedding layer is memory-mapped once there, and every worker forked from it
shares the same pages. Each worker then creates its own ONNX Runtime session
and batcher thread (thread pools do not survive a fork).

This process becomes the gunicorn master (``os.execv``): its pid is the
master's, and a signal sent to it reaches gunicorn. The settings reach the
app as environment variables (:mod:`.app` lists them), so a key given with
``--api-key`` is never on gunicorn's command line.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from .worker import ACCEPT_BACKLOG

#: The app factory gunicorn imports in the master.
APP = "bertembed.serve.server.app:create_app()"
#: gunicorn's server hooks (the master's memory before the fork).
HOOKS = "python:bertembed.serve.server.hooks"
#: gunicorn's own settings: seconds before a silent worker is killed, and given to finish on SIGTERM
#: (the connection limits are the worker's: bertembed.serve.server.worker).
WORKER_TIMEOUT = 60
GRACEFUL_TIMEOUT = 10


def gunicorn_argv(out_dir: str | os.PathLike[str], *, host: str, port: int, workers: int) -> list[str]:
    """The command that serves ``out_dir``: ``python -m gunicorn ...``.

    Examples
    --------
    >>> gunicorn_argv("out", host="127.0.0.1", port=8080, workers=1)[3:5]
    ['bertembed.serve.server.app:create_app()', '--preload']
    """
    return [
        sys.executable,
        "-m",
        "gunicorn",
        APP,
        "--preload",
        "--config",
        HOOKS,
        "--workers",
        str(workers),
        "--worker-class",
        "bertembed.serve.server.worker.BertembedWorker",
        "--bind",
        f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
        "--timeout",
        str(WORKER_TIMEOUT),
        "--graceful-timeout",
        str(GRACEFUL_TIMEOUT),
        "--backlog",
        str(ACCEPT_BACKLOG),
        "--no-control-socket",
    ]


def serve(out_dir: str | os.PathLike[str], *, host: str, port: int, workers: int, settings: Mapping[str, str]) -> None:
    """Replace this process with the gunicorn master serving ``out_dir`` (never returns).

    Parameters
    ----------
    settings : mapping
        Environment variables for the app (``SERVICE_*``, ``BERTEMBED_API_KEY``).
    """
    root = str(Path(out_dir).resolve())
    env = {**os.environ, **settings, "SERVICE_DIR": root, "SERVICE_WORKERS": str(workers)}
    argv = gunicorn_argv(root, host=host, port=port, workers=workers)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
