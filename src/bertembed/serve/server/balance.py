"""Spreading connections over the workers: the least-loaded worker accepts first.

Every worker waits on the one listening socket, and the kernel wakes them all
when a client connects; whichever runs first accepts. That is usually the
worker that is already running (it just answered a request), so keep-alive
clients that connect together used to land on one worker of two, and the
service ran on one core while the other idled.

The master keeps a board in shared memory (:class:`Board`): one slot per
worker, holding how many connections that worker has open (-1: a free slot).
It gives each worker its slot before the fork (gunicorn's ``pre_fork`` hook,
:mod:`.hooks`) and frees it when the worker exits. A worker that holds more
connections than the least-loaded live worker leaves a waiting connection to
it for up to :data:`YIELD_S`, then accepts anyway (the other may be stuck):
the listening socket stays readable meanwhile, so that worker's event loop
keeps coming round, at most that long per connection, and only while a
connection waits. Without a board (gunicorn run without the hooks), every
worker accepts as before.
"""

from __future__ import annotations

import mmap
import time

#: Slots on the board: the most workers one master can run at once (gunicorn's TTIN adds workers).
SLOTS = 256
#: How long a busier worker leaves a waiting connection to the least-loaded one.
YIELD_S = 0.005
#: A slot without a worker.
FREE = -1
_WIDTH = 8  # bytes per slot (a signed 64-bit count)


class Board:
    """Open connections per worker, in memory shared by the master and every worker it forks.

    Examples
    --------
    >>> board = Board(4)
    >>> first, second = board.claim(), board.claim()
    >>> board.add(first, 3)
    >>> board.counts()
    [3, 0]
    >>> board.busier(first), board.busier(second)
    (True, False)
    >>> board.release(first)
    >>> board.counts()
    [0]
    """

    def __init__(self, slots: int = SLOTS) -> None:
        # An anonymous shared mapping: a forked worker writes into the same pages the master reads.
        self._map = mmap.mmap(-1, slots * _WIDTH)
        self._counts = memoryview(self._map).cast("q")
        for i in range(slots):
            self._counts[i] = FREE

    def claim(self) -> int:
        """A free slot, now live with no connections (called by the master before a fork)."""
        for i, value in enumerate(self._counts):
            if value == FREE:
                self._counts[i] = 0
                return i
        raise RuntimeError(f"more than {len(self._counts)} workers at once")

    def release(self, slot: int) -> None:
        """Free `slot` (its worker exited)."""
        self._counts[slot] = FREE

    def add(self, slot: int, change: int) -> None:
        """Change the open connections of the worker in `slot` (only that worker writes its slot)."""
        self._counts[slot] = max(0, self._counts[slot] + change)

    def counts(self) -> list[int]:
        """The open connections of every live worker."""
        return [value for value in self._counts if value != FREE]

    def busier(self, slot: int) -> bool:
        """Whether the worker in `slot` holds more connections than the least-loaded live worker."""
        live = self.counts()
        return bool(live) and self._counts[slot] > min(live)


#: The master's board (made by :func:`board`; a forked worker inherits it).
_board: Board | None = None
#: This worker's slot (set after the fork), and since when it has left a waiting connection to another.
_slot: int | None = None
_yielding_since: float | None = None


def board() -> Board:
    """The master's board, made on first use (in the master, before the first fork)."""
    global _board
    if _board is None:
        _board = Board()
    return _board


def join(slot: int | None) -> None:
    """Called in a worker after the fork: `slot` is its place on the board (None: no board)."""
    global _slot, _yielding_since
    _slot, _yielding_since = slot, None


def accepted() -> None:
    """This worker accepted a connection."""
    if _board is not None and _slot is not None:
        _board.add(_slot, 1)


def closed() -> None:
    """One of this worker's connections closed."""
    if _board is not None and _slot is not None:
        _board.add(_slot, -1)


def should_wait(now: float | None = None) -> bool:
    """Whether this worker should leave the waiting connection to a less-loaded worker for now.

    True while it is busier than the least-loaded worker, for at most
    :data:`YIELD_S` per waiting connection.
    """
    global _yielding_since
    if _board is None or _slot is None or not _board.busier(_slot):
        _yielding_since = None
        return False
    now = time.monotonic() if now is None else now
    if _yielding_since is None:
        _yielding_since = now
    if now - _yielding_since < YIELD_S:
        return True
    _yielding_since = None  # the least-loaded worker did not take it: accept it here
    return False
