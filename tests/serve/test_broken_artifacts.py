"""``bertembed serve`` on a broken artifact: exit 1 within seconds naming the file, the port left free.

Each case copies the session's artifact with one file damaged (truncated, missing, not JSON) and
starts the server on it: the preflight load (``bertembed.serve.server.check``) must refuse it
before gunicorn binds the port or forks a worker, so there is no crash loop.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from service_helpers import free_port, skip_without_service_packages

pytestmark = [pytest.mark.heavy]
skip_without_service_packages()

#: The operator's bound: a broken artifact is refused within this many seconds.
REFUSED_WITHIN = 30.0


def _truncate(size: int) -> Callable[[Path], None]:
    def damage(path: Path) -> None:
        with open(path, "r+b") as fh:
            fh.truncate(size)

    return damage


def _write(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text, encoding="utf-8")


#: case -> (the file, relative to the artifact; what is done to it; the message's pattern).
CASES = {
    "encoder truncated": ("encoder.onnx", _truncate(100_000), r"encoder\.onnx: cannot be served: InvalidProtobuf"),
    "encoder missing": ("encoder.onnx", Path.unlink, r"encoder\.onnx: cannot be served: .*(NoSuchFile|No such file)"),
    "layer truncated": (
        "embeddings/model.safetensors",
        _truncate(1000),
        r"embeddings/model\.safetensors: cannot be served: CheckpointError: .*truncated",
    ),
    "tokenizer missing": ("tokenizer/tokenizer.json", Path.unlink, r"tokenizer/tokenizer\.json: cannot be served"),
    "tokenizer not JSON": ("tokenizer/tokenizer.json", _write("{"), r"tokenizer/tokenizer\.json: cannot be served"),
    "manifest not JSON": (
        "service.json",
        _write("{"),
        r"service\.json: cannot be served: ValueError: .*not valid JSON",
    ),
    "manifest missing": ("service.json", Path.unlink, r"service\.json: cannot be served: .*no such file"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_broken_artifact_is_refused_before_any_worker(out_dir: Path, tmp_path: Path, case: str) -> None:
    name, damage, message = CASES[case]
    broken = tmp_path / "broken"
    shutil.copytree(out_dir, broken, ignore=shutil.ignore_patterns("server*"))
    damage(broken / name)
    port = free_port()
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bertembed", "serve", str(broken), "--port", str(port)],
        capture_output=True,
        text=True,
        timeout=REFUSED_WITHIN + 30,
    )
    took = time.monotonic() - began
    assert done.returncode == 1, done.stdout + done.stderr
    assert took < REFUSED_WITHIN, took
    assert done.stderr.startswith("bertembed: error: "), done.stderr
    assert str(broken / name) in done.stderr or name in done.stderr
    assert re.search(message, done.stderr), done.stderr
    assert "Booting worker" not in done.stdout + done.stderr
    with socket.socket() as s:  # the port was never bound, so it is free
        s.bind(("127.0.0.1", port))
