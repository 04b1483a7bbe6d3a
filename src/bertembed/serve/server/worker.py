"""The gunicorn worker class of ``bertembed serve``: uvicorn with the connection limits of :mod:`..settings`.

uvicorn bounds idle keep-alive connections but not a connection that never
finishes its headers (a slowloris client) nor one that never sends a byte:
:class:`GuardedH11Protocol` closes a connection whose request headers are
not complete ``header_timeout_s`` after its first byte (or after the
connection opened), and one whose client stops reading its answer for
``send_timeout_s``. The open connections per worker are bounded by
``max_connections``, below the open-file limit: at the bound, a new connection closes the oldest one that has not
sent a whole request, so idle or slow connections cannot keep new clients
out, and the worker never runs out of descriptors. ``X-Forwarded-For`` is trusted only
from the proxies ``forwarded_allow_ips`` names (none by default).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn_worker import UvicornWorker

from .. import settings
from . import balance

_VALUES = settings.read()
#: The listen backlog (gunicorn's ``--backlog``).
ACCEPT_BACKLOG = 512
#: Connections a worker accepts each time the listening socket wakes it. asyncio accepts as many as
#: its ``backlog`` argument in one go, so the first worker to wake took every pending connection
#: (8 keep-alive clients connecting at once all landed on one of 2 workers); one at a time, the
#: least-loaded worker can take the next (:mod:`.balance`).
ACCEPTS_PER_WAKEUP = 1
logger = logging.getLogger("uvicorn.error")


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with bounds on what a client can hold (see the module doc)."""

    header_timeout: float = float(_VALUES["header_timeout_s"])
    send_timeout: float = float(_VALUES["send_timeout_s"])
    max_connections: int = int(_VALUES["max_connections"] or settings.default_max_connections())

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._opened = self.loop.time()
        self._header_timer: asyncio.TimerHandle | None = None
        self._write_timer: asyncio.TimerHandle | None = None
        self._arm_header_timer()
        self._make_room()

    def _make_room(self) -> None:
        """At the connection limit, close the oldest connection that has not sent a whole request (else this one).

        A flood of idle or slow connections then cannot keep a new client
        out, and the worker never runs out of file descriptors.
        """
        closing = sum(1 for c in self.connections if c.transport is not None and c.transport.is_closing())
        if len(self.connections) - closing <= self.max_connections:
            return
        idle: list[GuardedH11Protocol] = [c for c in self.connections if c is not self and _idle(c)]  # type: ignore[misc]
        victim = min(idle, key=lambda c: c._opened) if idle else self
        victim.transport.close()

    def _arm_header_timer(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._header_timeout)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            # Headers still incomplete: nothing of a request reached the app; close without an answer.
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.conn.their_state is h11.IDLE:
            self._arm_header_timer()
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:
            self._disarm_header_timer()

    def pause_writing(self) -> None:
        """The client stopped reading: its answer may wait `send_timeout` seconds, then the connection drops."""
        super().pause_writing()
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(self.send_timeout, self._write_timeout)

    def resume_writing(self) -> None:
        super().resume_writing()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _write_timeout(self) -> None:
        self._write_timer = None
        self.transport.abort()  # the unread answer is dropped with the connection

    def connection_lost(self, exc: Exception | None) -> None:
        balance.closed()
        self._disarm_header_timer()
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None
        super().connection_lost(exc)


def _idle(connection: Any) -> bool:
    """Whether a connection has no request in progress: none received, or its answer sent."""
    if not isinstance(connection, GuardedH11Protocol) or connection.conn.their_state is not h11.IDLE:
        return False
    if connection.transport is None or connection.transport.is_closing():
        return False  # already being let go
    return connection.cycle is None or bool(connection.cycle.response_complete)


class _Listener:
    """gunicorn's listening socket as given to asyncio, whose ``listen()`` keeps :data:`ACCEPT_BACKLOG`
    and whose ``accept()`` leaves a waiting connection to a less-loaded worker.

    asyncio calls ``listen(n)`` with the same ``n`` it accepts per wake-up
    (:data:`ACCEPTS_PER_WAKEUP`); the kernel's queue of connections waiting
    to be accepted stays as long as gunicorn made it. ``accept()`` says "none
    waiting" (asyncio's ``BlockingIOError``) while this worker holds more
    connections than the least-loaded one, for a few milliseconds at most
    (:func:`.balance.should_wait`). Everything else is the socket's own.
    """

    def __init__(self, sock: Any) -> None:
        self._sock = sock

    def listen(self, backlog: int = 0) -> None:
        self._sock.listen(ACCEPT_BACKLOG)

    def accept(self) -> tuple[Any, Any]:
        if balance.should_wait():
            raise BlockingIOError  # asyncio: nothing to accept now; the socket wakes the loop again
        accepted = self._sock.accept()
        balance.accepted()
        return accepted

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def _forwarded(value: str) -> Any:
    ips = [ip.strip() for ip in value.split(",") if ip.strip()]
    return ips or None


class _QuietAcceptErrors:
    """The event loop's exception handler, with "out of system resource" reported once a minute.

    asyncio logs every ``accept()`` that fails for lack of descriptors,
    once a second; the
    server keeps working (it closes idle connections), so one line a minute
    with a count says enough.
    """

    def __init__(self, every: float = 60.0) -> None:
        self.every, self.last, self.count = every, float("-inf"), 0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if "out of system resource" not in str(context.get("message", "")):
            loop.default_exception_handler(context)
            return
        self.count += 1
        now = loop.time()
        if now - self.last >= self.every:
            exc = context.get("exception")
            logger.error("accept() failed %d time(s) for lack of file descriptors (%s)", self.count, exc)
            self.last, self.count = now, 0


class BertembedWorker(UvicornWorker):
    """gunicorn's uvicorn worker with bertembed's connection limits (see the module doc)."""

    CONFIG_KWARGS: ClassVar[dict[str, Any]] = {"loop": "asyncio", "http": GuardedH11Protocol}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        values = settings.read()
        # Connections are bounded by GuardedH11Protocol (it closes the oldest idle one), requests by the app
        # (429): uvicorn's own limit would answer 503 while a closed connection is still being let go.
        self.config.limit_concurrency = None
        self.config.timeout_keep_alive = int(values["keep_alive_s"])
        forwarded = _forwarded(values["forwarded_allow_ips"])
        self.config.proxy_headers = forwarded is not None
        self.config.forwarded_allow_ips = forwarded or []
        # What asyncio accepts per wake-up (it passes the same number to listen(): see _Listener).
        self.config.backlog = ACCEPTS_PER_WAKEUP

    async def _serve(self) -> None:
        asyncio.get_running_loop().set_exception_handler(_QuietAcceptErrors())
        self.sockets: list[Any] = [_Listener(sock) for sock in self.sockets]
        await super()._serve()
