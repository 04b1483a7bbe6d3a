"""The access log cannot be forged, proxy headers are not believed by default, and /info lists the limits."""

from __future__ import annotations

import socket
import time

import pytest
from service_helpers import Server, skip_without_service_packages

pytestmark = [pytest.mark.heavy]
skip_without_service_packages()
import httpx  # noqa: E402

from bertembed.serve import settings  # noqa: E402


def _raw(server: Server, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(request)
        return sock.recv(65536)


def _log_after(server: Server, marker: str, timeout: float = 10.0) -> list[str]:
    """The log's lines that contain `marker`, once one is there."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        lines = [line for line in server.log().splitlines() if marker in line]
        if lines:
            return lines
        time.sleep(0.1)
    pytest.fail(f"no log line with {marker!r}")


def test_a_request_line_cannot_forge_a_log_line(server: Server) -> None:
    forged = '/health%0A[2026-01-01 00:00:00 +0000] [1] [INFO] 6.6.6.6:1 "GET /forged HTTP/1.1" 200 0B 0.1ms'
    answer = _raw(server, f"GET {forged.replace(' ', '%20')}-marker1 HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    assert answer.startswith(b"HTTP/1.1 404")
    lines = _log_after(server, "marker1")
    assert len(lines) == 1 and "\\x0a" in lines[0], lines
    assert not any(line.startswith("[2026-01-01") for line in server.log().splitlines())


def test_x_forwarded_for_is_not_believed_by_default(server: Server) -> None:
    answer = httpx.get(f"{server.url}/healthz?marker2", headers={"X-Forwarded-For": "6.6.6.6"}, timeout=10)
    assert answer.status_code == 200
    time.sleep(0.5)
    lines = [line for line in server.log().splitlines() if "/healthz" in line]
    assert lines and not any("6.6.6.6" in line for line in lines)


def test_info_lists_every_limit(server: Server) -> None:
    info = httpx.get(f"{server.url}/info", timeout=10).json()
    limits = info["limits"]
    assert set(limits) == {s.name for s in settings.SETTINGS if s.limit}
    # The tests' server runs with small request limits (service_helpers); the others are the defaults.
    assert limits["max_batch"] == 32 and info["max_client_batch_size"] == 32
    assert limits["header_timeout_s"] == settings.BY_NAME["header_timeout_s"].default
    assert info["max_concurrent_requests"] == limits["max_concurrent_requests"]
    assert limits["max_connections"] >= 8
