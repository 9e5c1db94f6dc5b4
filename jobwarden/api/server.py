"""Slow clients are bounded: a request must arrive whole within api_read_timeout_seconds.

uvicorn (0.30-0.55) bounds only the idle time between requests (``timeout_keep_alive``);
a client sending one header line or one body byte a second holds a connection, and a
worker's memory for it, for as long as it likes. This protocol keeps uvicorn's HTTP/1.1
parser (httptools, from uvicorn[standard]) and adds one timer per request: armed when a
connection opens and after each response, disarmed when the request's last byte arrives.
When it fires while the request is still arriving, the connection is closed: with a 408
(RFC 9110 section 15.5.9, and ``Connection: close``) if nothing has been answered yet,
else by closing it, which the app sees as the client's disconnect.

What it costs: it uses the protocol's documented hooks (connection_made,
on_message_complete, on_response_complete, connection_lost) and its ``transport``,
``loop`` and ``cycle`` attributes, which are not a public API; tests/integration/
test_api_slow_clients.py pins the behaviour against a real uvicorn server, so an
upgrade that moves them fails there, not in production. A reverse proxy in front
(nginx ``client_header_timeout`` / ``client_body_timeout``) does the same job too.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from jobwarden.config.settings import get_settings
from jobwarden.observability.logs import get_logger

log = get_logger("jobwarden.api")

_TIMED_OUT = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
    b"content-length: 35\r\nconnection: close\r\n\r\nthe request did not arrive in time\n"
)


class BoundedReadProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a whole-request read deadline (see the module)."""

    # None: JOBWARDEN_API_READ_TIMEOUT_SECONDS. A subclass may fix it (the tests do).
    read_timeout: float | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.read_timeout is None:
            self.read_timeout = get_settings().api_read_timeout_seconds
        self._read_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_complete(self) -> None:
        self._disarm()  # the request is whole; the app may take as long as it needs
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request on this connection gets its own deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        assert self.read_timeout is not None
        self._read_deadline = self.loop.call_later(self.read_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._read_deadline is not None:
            self._read_deadline.cancel()
            self._read_deadline = None

    def _too_slow(self) -> None:
        self._read_deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        between = cycle is None or cycle.response_complete  # headers (or nothing) arriving
        if not between and not cycle.more_body:
            return  # read whole (a pipelined request): the app is answering it
        log.info(
            "api_slow_client_dropped",
            client=f"{self.client[0]}:{self.client[1]}" if self.client else None,
            read_timeout_seconds=self.read_timeout,
            during="headers" if between else "body",
        )
        if between:
            self.transport.write(_TIMED_OUT)
        self.transport.close()
