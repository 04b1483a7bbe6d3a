"""The operator's checks: the server under hostile clients and faults, with its default limits.

One server of the session's artifact (all-MiniLM-L6-v2), 1 worker, the default body limit
(4 MiB), started the way an operator starts it; each check is a bound from the operator's list:

- a 4 MB text is answered in under 1.5 s, and a small request sent meanwhile is not delayed by
  more than 0.5 s;
- a client sending one byte a second is cut off within 30 s; a connection that sends nothing too;
- with 300 idle connections and ``ulimit -n 256``, a new client is answered within 3 s and the log
  does not flood;
- 6 concurrent requests of 65,536 tokens are all answered within 120 s, every refusal within 1 s;
- clients that leave do not delay the next request by more than 2 s (their queued work is dropped);
- a declared oversized body gets 413 before its bytes are sent; ``Expect: 100-continue`` gets no 100.

(A corrupt artifact exiting non-zero within 30 s, naming the file, is ``test_broken_artifacts.py``.)
The load is bounded in count and time and sent to 127.0.0.1 only.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from service_helpers import Server, free_port, serve, skip_without_service_packages

pytestmark = [pytest.mark.heavy]
skip_without_service_packages()
import httpx  # noqa: E402

#: The default limits an operator runs with (the tests' session server uses small ones).
DEFAULTS = {"SERVICE_MAX_BATCH": "2048", "SERVICE_MAX_BODY_BYTES": str(4 << 20)}
#: A text of about 256 tokens (the model's length), and one request of 256 of them: 65,536 tokens.
LONG = "word " * 300
BIG_REQUEST = {"texts": [LONG] * 256}


@pytest.fixture(scope="module")
def operator(out_dir: Path) -> Iterator[Server]:
    yield from serve(out_dir, "server-operator.log", workers=1, **DEFAULTS)


def _timed_post(url: str, body: dict, timeout: float = 180.0) -> tuple[int, float, float]:
    """(status, seconds to the answer, when it was sent)."""
    sent = time.monotonic()
    answer = httpx.post(url, json=body, timeout=timeout)
    return answer.status_code, time.monotonic() - sent, sent


def test_a_4_mb_text_costs_what_a_long_one_costs(operator: Server) -> None:
    huge = {"inputs": "word " * 800_000}  # 4 MB of JSON, under the 4 MiB limit
    assert len(json.dumps(huge)) < 4 << 20
    url = f"{operator.url}/embed"
    httpx.post(url, json={"inputs": "warm up"}, timeout=60)
    alone = min(_timed_post(url, {"inputs": "hi"})[1] for _ in range(3))
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        big = pool.submit(_timed_post, url, huge)
        time.sleep(0.2)
        small = pool.submit(_timed_post, url, {"inputs": "hi"})
        (big_status, big_s, _), (small_status, small_s, _) = big.result(), small.result()
    print(f"\n4 MB text: {big_s:.2f} s; small request meanwhile {small_s:.3f} s (alone {alone:.3f} s)")
    assert big_status == 200 and small_status == 200
    assert big_s < 1.5
    assert small_s - alone < 0.5


def _held_until_closed(sock: socket.socket, trickle: bytes | None, limit: float) -> float:
    """Seconds until the server closes `sock` (sending `trickle` one byte a second), at most `limit`."""
    began = time.monotonic()
    sock.settimeout(1.0)
    sent = 0
    while time.monotonic() - began < limit:
        if trickle is not None and sent < len(trickle):
            try:
                sock.send(trickle[sent : sent + 1])
            except OSError:
                return time.monotonic() - began
            sent += 1
        try:
            if sock.recv(1024) == b"":
                return time.monotonic() - began
        except TimeoutError:
            continue
        except OSError:
            return time.monotonic() - began
    return float("inf")


@pytest.mark.parametrize("trickle", [b"POST /embed HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100, None])
def test_a_slow_or_silent_client_is_cut_off(operator: Server, trickle: bytes | None) -> None:
    with socket.create_connection(("127.0.0.1", operator.port)) as sock:
        held = _held_until_closed(sock, trickle, 40.0)
    print(f"\n{'one byte a second' if trickle else 'silent'}: closed after {held:.1f} s")
    assert held < 30.0


def test_a_declared_oversized_body_is_refused_before_it_is_sent(operator: Server) -> None:
    head = (
        b"POST /embed HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: 52428800\r\nExpect: 100-continue\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", operator.port), timeout=5) as sock:
        began = time.monotonic()
        sock.sendall(head)
        answer = sock.recv(65536)
        took = time.monotonic() - began
    status_line = answer.split(b"\r\n", 1)[0]
    print(f"\ndeclared 50 MB body: {status_line!r} after {took * 1e3:.0f} ms")
    assert answer.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"100 Continue" not in answer
    assert took < 1.0


def test_six_requests_of_65k_tokens(operator: Server) -> None:
    url = f"{operator.url}/embed"
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(lambda _: _timed_post(url, BIG_REQUEST), range(6)))
    statuses = sorted(status for status, _, _ in results)
    print("\n6 requests of 65,536 tokens:", [(status, round(seconds, 2)) for status, seconds, _ in results])
    # Admission is decided before tokenizing: the queue takes 4 such requests, the others are refused at once.
    assert statuses.count(429) == 2, statuses
    assert all(seconds < 1.0 for status, seconds, _ in results if status == 429)
    if os.environ.get("CI"):
        # CI runs its other steps beside this one on the same 2 cores: the 120 s bound (about 35 s of work
        # on a quiet machine) is checked outside CI; here every accepted request is answered (200, or 503 at
        # the request deadline).
        assert set(statuses) <= {200, 429, 503}
    else:
        assert set(statuses) == {200, 429}
        assert all(seconds < 120.0 for status, seconds, _ in results)


def test_clients_that_leave_do_not_delay_the_next_one(operator: Server) -> None:
    url = f"{operator.url}/embed"
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        left = [pool.submit(_leave_after, url, 1.0) for _ in range(4)]
        for gone in left:
            gone.result()
    time.sleep(0.5)  # the server sees the disconnects
    status, seconds, _ = _timed_post(url, {"inputs": "hi"})
    print(f"\nafter 4 clients left 4 x 65,536 tokens of work: a small request took {seconds:.2f} s")
    assert status == 200
    assert seconds < 2.0
    metrics = httpx.get(f"{operator.url}/metrics", timeout=30).text
    cancelled = sum(
        float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("embedding_cancelled_total")
    )
    assert cancelled >= 1


def _leave_after(url: str, seconds: float) -> None:
    """Send a big request, then hang up before the answer."""
    try:
        httpx.post(url, json=BIG_REQUEST, timeout=seconds)
    except httpx.TimeoutException:
        pass


def test_300_idle_connections_under_ulimit_256(out_dir: Path) -> None:
    for running in serve(out_dir, "server-operator-nofile.log", workers=1, nofile=256, **DEFAULTS):
        idle = []
        try:
            for _ in range(300):
                idle.append(socket.create_connection(("127.0.0.1", running.port), timeout=5))
            began = time.monotonic()
            answer = httpx.post(f"{running.url}/embed", json={"inputs": "hi"}, timeout=10)
            took = time.monotonic() - began
        finally:
            for sock in idle:
                sock.close()
        lines = running.log().count("\n")
        print(f"\n300 idle connections, ulimit -n 256: a new client answered {answer.status_code} in {took:.2f} s")
        assert answer.status_code == 200
        assert took < 3.0
        assert lines < 200, running.log()[-2000:]


def test_a_client_that_does_not_read_its_answer_is_dropped(out_dir: Path) -> None:
    """An answer of ~10 MB to a client that never reads: the connection is dropped after send_timeout_s."""
    for running in serve(out_dir, "server-operator-send.log", workers=1, SERVICE_SEND_TIMEOUT_S="2", **DEFAULTS):
        # 2048 texts of 22 tokens: 45,056 tokens (under the per-request limit), an answer of about 9.5 MB.
        body = json.dumps({"input": ["word " * 20] * 2048, "model": "all-MiniLM-L6-v2"}).encode()
        request = (
            b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.connect(("127.0.0.1", running.port))
            sock.sendall(request)
            _wait_until_computed(running, inputs=2048)
            time.sleep(6)  # the answer is written and not read for more than send_timeout_s (2 s)
            sock.settimeout(10)
            got, head = 0, b""
            try:
                while chunk := sock.recv(1 << 20):
                    head = head or chunk
                    got += len(chunk)
            except (ConnectionResetError, TimeoutError):
                pass
        print(f"\na client that did not read: got {got} bytes of its answer before the server dropped it")
        assert head.startswith(b"HTTP/1.1 200"), head[:300]  # the answer was computed and started
        assert got < 8 << 20  # of about 9.5 MB, only what the buffers held when the connection was dropped
        assert httpx.get(f"{running.url}/health", timeout=10).status_code == 200


def _wait_until_computed(server: Server, inputs: int, timeout: float = 180.0) -> None:
    """Until the worker's metrics show `inputs` accepted inputs and nothing waiting in its batcher."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = httpx.get(f"{server.url}/metrics", timeout=10).text
        value = {
            line.split("{")[0]: float(line.split()[-1]) for line in text.splitlines() if line.startswith("embedding_")
        }
        if value.get("embedding_inputs_total", 0) >= inputs and value.get("embedding_queue_requests", 1) == 0:
            return
        time.sleep(0.5)
    pytest.fail(f"the worker did not compute {inputs} inputs within {timeout} s")


def test_a_worker_that_cannot_load_stops_gunicorn(out_dir: Path, tmp_path: Path) -> None:
    """Past the preflight (--no-check), a worker that fails to load exits with gunicorn's boot error: no loop."""
    import shutil
    import subprocess
    import sys

    broken = tmp_path / "broken"
    shutil.copytree(out_dir, broken, ignore=shutil.ignore_patterns("server*"))
    (broken / "encoder.onnx").write_bytes(b"not an onnx file")
    began = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "bertembed", "serve", str(broken), "--port", str(free_port()), "--no-check"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.monotonic() - began
    assert done.returncode == 3, done.stdout + done.stderr[-3000:]
    assert done.stderr.count("Booting worker") == 1, done.stderr[-3000:]
    assert "the artifact failed to load" in done.stderr
    assert took < 30.0
