"""``examples/server/client.py`` against the session's running server: every way gives the same vectors."""

from __future__ import annotations

import subprocess
import sys

import pytest
from helpers.paths import ROOT
from service_helpers import MODEL_NAME, Server, skip_without_service_packages

CLIENT = ROOT / "examples" / "server" / "client.py"
pytestmark = [
    pytest.mark.heavy,
    pytest.mark.skipif(not CLIENT.is_file(), reason="examples/ is not in this checkout"),
]
skip_without_service_packages()


def test_example_client_runs(server: Server) -> None:
    done = subprocess.run([sys.executable, str(CLIENT), server.url], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"model {MODEL_NAME}: every way gives the same vectors" in done.stdout
    assert "TEI route: 2 vectors of 384" in done.stdout
