"""The edge's transport: one wall-clock deadline per request, bodies read with a bound.

httpx bounds each socket read by its timeout, so a provider dripping one byte per
second never trips it. The edge sends with an ``httpx.Client`` on httpx's own
``HTTPTransport`` (request framing, header decoding, exception mapping and proxies
stay httpx's); the one thing changed is the network backend under its httpcore pool
(httpcore's public extension point), which cuts every socket operation to what is
left of the current request's deadline: connect, TLS, headers and body together.
Why not httpcore's pool directly (issue 12): it saved 0.2-0.6 ms CPU per send, a few
per cent of a poll, and scripts/bench_poll.py held its targets either way (issue 19,
item 4), while it re-implemented httpx. tasks.provider.edge uses this module, and so does
tasks.humans.notifications: a tenant's webhook receiver is as much a stranger as a provider.
"""

from __future__ import annotations

import contextlib
import contextvars
import http.cookiejar
import io
import logging
import ssl
import time
import urllib.request
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpcore
import httpx

# httpcore's DEBUG trace prints response headers (a provider may echo a credential
# there) and h11's errors quote the offending header value, Authorization included.
# No level set on the root logger may turn them on; an operator who needs them sets
# these loggers explicitly and accepts what they print.
for _name in ("httpx", "httpcore", "httpcore.connection", "httpcore.http11", "httpcore.proxy"):
    logging.getLogger(_name).setLevel(logging.WARNING)

_deadline: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "jobwarden_request_deadline", default=None
)


# -- the whole-request deadline -----------------------------------------------------------


@contextlib.contextmanager
def request_deadline(seconds: float) -> Iterator[float]:
    """Bound every socket operation in the block (this thread's requests) by one deadline."""
    deadline = time.monotonic() + seconds
    token = _deadline.set(deadline)
    try:
        yield deadline
    finally:
        _deadline.reset(token)


def _bounded(timeout: float | None, exc: type[Exception]) -> float | None:
    """The per-operation timeout, cut to what is left of the request's deadline."""
    deadline = _deadline.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise exc("the whole-request deadline passed")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    """A socket whose every read and write stops at the current request's deadline.

    httpcore bounds each read by the timeout, so a provider dripping one byte per
    second never trips it; bounding every socket operation by what is left of one
    deadline bounds the whole exchange, headers included.
    """

    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, bounded))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._inner = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> httpcore.NetworkStream:
        # Name resolution inside is bounded by the system resolver, not by this timeout.
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._inner.connect_tcp(host, port, bounded, local_address, socket_options)
        )

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Any = None
    ) -> httpcore.NetworkStream:
        bounded = _bounded(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, bounded, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class _DeadlineHTTPTransport(httpx.HTTPTransport):
    """httpx's own HTTP transport, its pool's connections opened on the deadline backend."""

    def __init__(self, limits: httpx.Limits, proxy: httpx.Proxy | None) -> None:
        super().__init__(limits=limits, proxy=proxy)
        # httpx builds its pool without a network_backend argument. Its pools (ConnectionPool
        # and the HTTPProxy / SOCKSProxy subclasses) open every connection through this one
        # attribute, so replacing it here is the whole change; the guard fails loudly at
        # start-up if httpx or httpcore ever rename it (test_provider_transport pins it).
        pool = getattr(self, "_pool", None)
        if not isinstance(pool, httpcore.ConnectionPool) or not isinstance(
            getattr(pool, "_network_backend", None), httpcore.NetworkBackend
        ):
            raise RuntimeError("httpx.HTTPTransport no longer holds an httpcore pool we can bound")
        pool._network_backend = _DeadlineBackend()


class DeadlineTransport(httpx.BaseTransport):
    """httpx's HTTP transport with the whole-request deadline, routed through a proxy or not.

    Proxies come from HTTP_PROXY / HTTPS_PROXY / ALL_PROXY / NO_PROXY, read once, and
    this transport, not httpx's own proxy mounts, picks the route, so a proxied
    connection is bounded by the same deadline as a direct one.
    """

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._proxies = urllib.request.getproxies()
        self._routes: dict[str | None, _DeadlineHTTPTransport] = {}

    def _route(self, url: httpx.URL) -> _DeadlineHTTPTransport:
        proxy_url = None
        if self._proxies and not urllib.request.proxy_bypass(url.host):
            proxy_url = self._proxies.get(url.scheme) or self._proxies.get("all")
        route = self._routes.get(proxy_url)
        if route is None:
            proxy = None if proxy_url is None else httpx.Proxy(proxy_url)
            route = self._routes[proxy_url] = _DeadlineHTTPTransport(self._limits, proxy)
        return route

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self._route(request.url).handle_request(request)

    def close(self) -> None:
        for route in self._routes.values():
            route.close()
        self._routes.clear()


def new_client(
    limits: httpx.Limits, user_agent: str, transport: DeadlineTransport | None = None
) -> httpx.Client:
    """A pooled client for one provider: no redirect followed, no cookie kept.

    ``trust_env=False``: the proxy variables are read by DeadlineTransport alone.
    ``transport``: the one to send through (a new one for ``limits`` by default).
    """
    return httpx.Client(
        transport=transport or DeadlineTransport(limits),
        follow_redirects=False,
        trust_env=False,
        # A provider cannot plant a cookie for later requests: the jar refuses every one.
        cookies=http.cookiejar.CookieJar(http.cookiejar.DefaultCookiePolicy(allowed_domains=[])),
        headers={"User-Agent": user_agent},
    )


class DirectSender:
    """``new_client``'s requests, sent straight to its transport (issue 37).

    What ``httpx.Client.send`` adds around ``transport.handle_request`` is, for the edge,
    work without effect on every poll: an auth flow with no auth, a redirect loop that
    follows nothing, request and response hooks there are none of, and a cookie jar
    that refuses every cookie yet parses each answer's headers into it (about 0.13 ms
    of a poll's CPU, measured). This sends the same request, built as the client
    builds it (its default headers merged under the caller's, the timeout as the
    request's extension), through the same transport, and returns the transport's
    response with its request set; the client is kept for what holds it: the OTel
    httpx instrumentation wraps its transport's ``handle_request``, which this calls.

    What it does not do: attach the request to a ``RequestError`` (the edge classifies
    by type and never reads it) or time the answer (``elapsed``; nothing reads it).
    tests/integration/test_provider_sender.py pins the parity against ``httpx.Client``:
    the same bytes on the wire, the same timeouts, the same errors.
    """

    def __init__(self, limits: httpx.Limits, user_agent: str) -> None:
        self._transport = DeadlineTransport(limits)
        # The client owns the transport (closes it) and is what the instrumentation wraps.
        self.client = new_client(limits, user_agent, self._transport)
        self._timeouts: dict[float, dict[str, float | None]] = {}

    def build_request(
        self,
        method: str,
        url: httpx.URL,
        *,
        headers: dict[str, str],
        content: bytes | None,
        timeout: float,
    ) -> httpx.Request:
        """As ``httpx.Client.build_request`` builds it (no base URL, params or cookies)."""
        merged = httpx.Headers(self.client.headers)
        merged.update(headers)
        extension = self._timeouts.get(timeout)
        if extension is None:
            extension = self._timeouts[timeout] = httpx.Timeout(timeout).as_dict()
        return httpx.Request(
            method, url, content=content, headers=merged, extensions={"timeout": extension}
        )

    def send(self, request: httpx.Request) -> httpx.Response:
        """The answer with its body unread (``iter_raw``, then ``close``)."""
        response = self._transport.handle_request(request)
        response.request = request
        return response

    def close(self) -> None:
        self.client.close()


# -- reading answers ---------------------------------------------------------------------


class DeadlinePassedError(Exception):
    """The deadline passed between two chunks of a body."""


@dataclass(slots=True)
class BodyState:
    """What reading a body found wrong, set by ``decoded_chunks`` (None: nothing)."""

    problem: str | None = None


def decoded_chunks(
    encoding: str, chunks: Iterator[bytes], limit: int, deadline: float, state: BodyState
) -> Iterator[bytes]:
    """The (decoded) body as it arrives, at most ``limit + 1`` bytes; ``state`` says why
    it stopped early (``too_large``, ``undecodable``).

    ``encoding``: the answer's Content-Encoding; ``chunks``: its raw body as it arrives.
    Chunks are counted as they arrive, so whoever consumes them holds what it chooses,
    whatever the provider sends; a gzip body is inflated with the same bound (a small
    bomb cannot expand past it). Raises DeadlinePassedError between two chunks.
    """
    encoding = encoding.strip().lower()
    inflate = None
    if encoding in ("gzip", "x-gzip"):
        inflate = zlib.decompressobj(zlib.MAX_WBITS | 16)
    elif encoding not in ("", "identity"):
        state.problem = "undecodable"  # only gzip is asked for (accept-encoding)
        return
    room, seen = limit + 1, 0
    try:
        for chunk in chunks:
            if time.monotonic() >= deadline:
                raise DeadlinePassedError
            data = chunk if inflate is None else inflate.decompress(chunk, room - seen)
            data = data[: room - seen]
            seen += len(data)
            if data:
                yield data
            if seen >= room:
                state.problem = "too_large"
                return
        if inflate is not None:
            data = inflate.flush()[: room - seen]
            seen += len(data)
            if data:
                yield data
            if seen >= room:
                state.problem = "too_large"
    except zlib.error:
        state.problem = "undecodable"


def read_body(
    encoding: str, chunks: Iterator[bytes], limit: int, deadline: float
) -> tuple[bytes, str | None]:
    """At most ``limit + 1`` bytes of the (decoded) body, and a problem if any.

    More than ``limit`` bytes is ``too_large``, and the first ``limit + 1`` are kept so a
    size check downstream trips too (``decoded_chunks`` says how the bound holds).
    """
    state = BodyState()
    # BytesIO hands its buffer over in getvalue() without a copy: one body in memory, not two.
    buffer = io.BytesIO()
    for data in decoded_chunks(encoding, chunks, limit, deadline, state):
        buffer.write(data)
    return buffer.getvalue(), state.problem
