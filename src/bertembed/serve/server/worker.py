"""The gunicorn worker class of ``bertembed serve``: uvicorn with the connection limits of :mod:`..settings`.

uvicorn bounds idle keep-alive connections but not a connection that never
finishes its headers (a slowloris client) nor one that never sends a byte:
:class:`GuardedH11Protocol` closes a connection whose request headers are
not complete ``header_timeout_s`` after its first byte (or after the
connection opened, or the previous answer). The number of open connections
per worker is bounded by uvicorn's ``limit_concurrency`` (503 beyond), set
below the open-file limit so that running out of descriptors gives refusals,
not a flood of ``accept()`` errors. ``X-Forwarded-For`` is trusted only
from the proxies ``forwarded_allow_ips`` names (none by default).
"""

from __future__ import annotations

import asyncio
from typing import Any, ClassVar

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn_worker import UvicornWorker

from .. import settings

_VALUES = settings.read()


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request headers take too long."""

    header_timeout: float = float(_VALUES["header_timeout_s"])

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer: asyncio.TimerHandle | None = None
        self._arm_header_timer()

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

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # The next request's headers are timed from its first byte (the keep-alive timer covers the wait).

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)


def _forwarded(value: str) -> Any:
    ips = [ip.strip() for ip in value.split(",") if ip.strip()]
    return ips or None


class BertembedWorker(UvicornWorker):
    """gunicorn's uvicorn worker with bertembed's connection limits (see the module doc)."""

    CONFIG_KWARGS: ClassVar[dict[str, Any]] = {"loop": "asyncio", "http": GuardedH11Protocol}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        values = settings.read()
        self.config.limit_concurrency = values["max_connections"] or settings.default_max_connections()
        self.config.timeout_keep_alive = int(values["keep_alive_s"])
        forwarded = _forwarded(values["forwarded_allow_ips"])
        self.config.proxy_headers = forwarded is not None
        self.config.forwarded_allow_ips = forwarded or []
