"""The edge's transport: one wall-clock deadline per request, bodies read with a bound.

httpx bounds each socket read by its timeout, so a provider dripping one byte per
second never trips it. This module rebuilds httpx's HTTP transport on httpcore's
public API (ConnectionPool, NetworkBackend) with a backend whose every socket
operation is cut to what is left of the current request's deadline: connect, TLS,
headers and body together. Only tasks.provider_edge uses it; nothing above the edge
sees httpx or httpcore.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
import logging
import ssl
import time
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterator
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


# httpcore's exceptions as httpx's, most specific first (the transport contract).
_MAPPED: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.NetworkError, httpx.NetworkError),
)


def _as_httpx(exc: Exception) -> Exception:
    for source, target in _MAPPED:
        if isinstance(exc, source):
            mapped = target(str(exc))
            mapped.__cause__ = exc
            return mapped
    return exc


def _chunks(stream: Any) -> Iterator[bytes]:
    """A response body's raw chunks, httpcore's errors raised as httpx's."""
    try:
        yield from stream
    except Exception as exc:
        raise _as_httpx(exc) from exc


class DeadlineTransport:
    """httpx's HTTP transport, rebuilt on httpcore's public API with the deadline backend.

    The edge sends through ``exchange`` on httpcore's pool directly: it needs the status,
    the headers and the raw body, and httpx's request and response models around them
    cost more CPU than the exchange itself (issue 12). What httpx.Client added is added by
    the edge (Host, Content-Length, keep-alive, a User-Agent); there is no cookie jar, so a
    provider cannot plant a cookie for later requests.

    Proxies come from HTTP_PROXY / HTTPS_PROXY / ALL_PROXY / NO_PROXY, read once,
    as httpx would; .netrc is not read (credentials go only where the contract says).
    """

    def __init__(self, limits: httpx.Limits) -> None:
        self._limits = limits
        self._ssl = httpx.create_ssl_context()
        self._proxies = urllib.request.getproxies()
        self._pools: dict[str | None, httpcore.ConnectionPool] = {}

    def _pool(self, url: httpx.URL) -> httpcore.ConnectionPool:
        proxy_url = None
        if self._proxies and not urllib.request.proxy_bypass(url.host):
            proxy_url = self._proxies.get(url.scheme) or self._proxies.get("all")
        pool = self._pools.get(proxy_url)
        if pool is None:
            proxy = None
            if proxy_url is not None:
                parts = urllib.parse.urlsplit(proxy_url)
                auth = None
                if parts.username is not None:
                    user = urllib.parse.unquote(parts.username)
                    auth = (user, urllib.parse.unquote(parts.password or ""))
                bare = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
                proxy = httpcore.Proxy(url=bare, auth=auth)
            pool = httpcore.ConnectionPool(
                ssl_context=self._ssl,
                proxy=proxy,
                max_connections=self._limits.max_connections,
                max_keepalive_connections=self._limits.max_keepalive_connections,
                keepalive_expiry=self._limits.keepalive_expiry,
                network_backend=_DeadlineBackend(),
            )
            self._pools[proxy_url] = pool
        return pool

    @contextlib.contextmanager
    def exchange(
        self,
        method: str,
        url: httpx.URL,
        headers: list[tuple[bytes, bytes]],
        content: bytes | None,
        timeout: float,
    ) -> Iterator[tuple[int, list[tuple[bytes, bytes]], Iterator[bytes]]]:
        """Send one request; yields (status, raw headers, raw body chunks) until closed.

        Raises httpx's exceptions for httpcore's (the edge classifies those).
        """
        core = httpcore.Request(
            method=method,
            url=httpcore.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=headers,
            content=content or b"",
            extensions={
                "timeout": {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
            },
        )
        try:
            answer = self._pool(url).handle_request(core)
        except Exception as exc:
            raise _as_httpx(exc) from exc
        try:
            yield answer.status, answer.headers, _chunks(answer.stream)
        finally:
            answer.close()

    def close(self) -> None:
        for pool in self._pools.values():
            pool.close()
        self._pools.clear()


# -- reading answers ---------------------------------------------------------------------


def decoded_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Lower-cased names to values, a repeated header joined with ", ", as httpx reads them.

    One encoding for all of them, as httpx chooses it: ASCII, else UTF-8, else ISO-8859-1
    (which decodes any byte, so a hostile header never raises here).
    """
    encoding = "iso-8859-1"
    for candidate in ("ascii", "utf-8"):
        try:
            for name, value in raw:
                name.decode(candidate)
                value.decode(candidate)
        except UnicodeDecodeError:
            continue
        encoding = candidate
        break
    out: dict[str, str] = {}
    for name, value in raw:
        key, text = name.lower().decode(encoding), value.decode(encoding)
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


class DeadlinePassedError(Exception):
    """The deadline passed between two chunks of a body."""


def read_body(
    encoding: str, chunks: Iterator[bytes], limit: int, deadline: float
) -> tuple[bytes, str | None]:
    """At most ``limit + 1`` bytes of the (decoded) body, and a problem if any.

    ``encoding``: the answer's Content-Encoding; ``chunks``: its raw body as it arrives.

    Chunks are counted as they arrive, so memory stays near ``limit`` whatever the
    provider sends; a gzip body is inflated with the same bound (a small bomb
    cannot expand past it). More than ``limit`` bytes is ``too_large``, and the
    first ``limit + 1`` are kept so a size check downstream trips too.
    """
    encoding = encoding.strip().lower()
    inflate = None
    if encoding in ("gzip", "x-gzip"):
        inflate = zlib.decompressobj(zlib.MAX_WBITS | 16)
    elif encoding not in ("", "identity"):
        return b"", "undecodable"  # only gzip is asked for (accept-encoding)
    room = limit + 1
    # BytesIO hands its buffer over in getvalue() without a copy: one body in memory, not two.
    buffer = io.BytesIO()
    try:
        for chunk in chunks:
            if time.monotonic() >= deadline:
                raise DeadlinePassedError
            left = room - buffer.tell()
            data = chunk if inflate is None else inflate.decompress(chunk, left)
            buffer.write(data[:left])
            if buffer.tell() >= room:
                return buffer.getvalue(), "too_large"
        if inflate is not None:
            buffer.write(inflate.flush()[: room - buffer.tell()])
            if buffer.tell() >= room:
                return buffer.getvalue(), "too_large"
    except zlib.error:
        return buffer.getvalue(), "undecodable"
    return buffer.getvalue(), None
