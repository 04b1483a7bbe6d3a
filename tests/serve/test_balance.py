"""Connections spread over the workers (bertembed.serve.server.balance)."""

from __future__ import annotations

import http.client
import json
from collections import Counter

import pytest
from service_helpers import serve, skip_without_service_packages

from bertembed.serve.server import balance

skip_without_service_packages()


def test_board_counts_each_workers_connections_and_frees_slots():
    board = balance.Board(3)
    a, b = board.claim(), board.claim()
    assert (a, b) == (0, 1)
    board.add(a, 2)
    board.add(b, 1)
    assert board.counts() == [2, 1]
    assert board.busier(a) and not board.busier(b)
    board.add(a, -5)  # never below zero
    assert board.counts() == [0, 1]
    board.release(b)
    assert board.counts() == [0]
    assert board.claim() == 1  # the freed slot is reused
    board.claim()
    with pytest.raises(RuntimeError, match="more than 3 workers at once"):
        board.claim()


def test_a_busier_worker_yields_for_a_bounded_time(monkeypatch):
    board = balance.Board(2)
    mine, other = board.claim(), board.claim()
    monkeypatch.setattr(balance, "_board", board)
    balance.join(mine)
    try:
        assert not balance.should_wait(now=0.0)  # equal: accept
        balance.accepted()
        assert board.counts() == [1, 0]
        assert balance.should_wait(now=1.0)  # busier: leave it to the other
        assert balance.should_wait(now=1.0 + balance.YIELD_S / 2)
        assert not balance.should_wait(now=1.0 + balance.YIELD_S * 1.01)  # the other did not take it
        assert balance.should_wait(now=2.0)  # the next waiting connection: a new bound
        board.add(other, 1)
        assert not balance.should_wait(now=2.001)  # the other took one: equal again
        balance.closed()
        assert board.counts() == [0, 1]
    finally:
        balance.join(None)


def test_without_a_board_every_worker_accepts(monkeypatch):
    monkeypatch.setattr(balance, "_board", None)
    balance.join(None)
    assert not balance.should_wait()
    balance.accepted()  # nothing to count, no error
    balance.closed()


def _pid(connection: http.client.HTTPConnection) -> int:
    connection.request("GET", "/healthz")
    answer = connection.getresponse()
    assert answer.status == 200
    return int(json.loads(answer.read())["pid"])


@pytest.mark.parametrize("burst", [True, False], ids=["connect-together", "connect-one-by-one"])
def test_keep_alive_clients_spread_over_the_workers(out_dir, burst):
    """8 keep-alive clients, 2 workers: each worker holds 4 (the kernel wakes both workers for every
    connection, and without the board the worker that just answered took nearly all)."""
    for server in serve(out_dir, f"balance-{burst}.log", workers=2):
        connections = [http.client.HTTPConnection("127.0.0.1", server.port, timeout=30) for _ in range(8)]
        try:
            if burst:
                for c in connections:
                    c.connect()
                pids = [_pid(c) for c in connections]
            else:
                pids = []
                for c in connections:  # each connects and is answered before the next connects
                    pids.append(_pid(c))
            for c in connections:  # each connection stays with its worker
                assert _pid(c) == pids[connections.index(c)]
        finally:
            for c in connections:
                c.close()
        held = Counter(pids)
        assert set(held) == set(server.workers())
        assert sorted(held.values()) == [4, 4], held


def test_docstring_examples():
    import doctest

    result = doctest.testmod(balance)
    assert result.attempted > 0 and result.failed == 0
