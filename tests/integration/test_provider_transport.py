"""The edge's transport: httpx's own client and transport, bounded by one deadline per
request on every route; no redirect followed; failures classified by exception type."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest

from jobwarden.demo.sandbox.server import SandboxServer
from jobwarden.models.actions import ProviderRequest, RequestPurpose
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.provider.signals import TransportFailure
from jobwarden.tasks.provider import transport as provider_transport
from jobwarden.tasks.provider.edge import ProviderClient, transport_failure

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"


def _contract(url: str, *, timeout: float = 5.0) -> Any:
    base = load_contract(SHIPPED / "sandbox.toml")
    limits = dataclasses.replace(base.limits, request_timeout_seconds=timeout)
    return dataclasses.replace(base, base_url=url, base_url_env=None, auth=None, limits=limits)


def _get(url: str) -> ProviderRequest:
    return ProviderRequest(purpose=RequestPurpose.status, method="GET", url=url)


@contextlib.contextmanager
def _serving(handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_every_route_opens_its_connections_on_the_deadline_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The one private name the transport relies on (httpx's pool, httpcore's backend
    # attribute): if a release renames either, this fails before any drip test does.
    monkeypatch.setenv("HTTP_PROXY", "http://user:pass@127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "direct.test")
    transport = provider_transport.DeadlineTransport(httpx.Limits())
    try:
        for url in ("http://direct.test/x", "http://proxied.test/x", "https://direct.test/x"):
            route = transport._route(httpx.URL(url))
            assert isinstance(route, httpx.HTTPTransport)
            pool = route._pool
            assert isinstance(pool, httpcore.ConnectionPool)
            assert isinstance(pool._network_backend, provider_transport._DeadlineBackend), url
        assert isinstance(
            transport._route(httpx.URL("http://proxied.test/x"))._pool, httpcore.HTTPProxy
        )
    finally:
        transport.close()


def test_a_proxy_url_with_credentials_authenticates_to_the_proxy_and_keeps_them_off_the_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str, dict[str, str]]] = []

    class Proxy(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with _serving(Proxy) as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.replace("http://", "http://ops:p%40ss@"))
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        client = ProviderClient()
        try:
            raw = client.send(
                _contract("http://provider.invalid"),
                _get("http://provider.invalid/v1/jobs/j1"),
                trace_id="a" * 32,
            )
        finally:
            client.close()
    assert raw.observation.status_code == 200
    [(target, headers)] = seen
    assert target == "http://provider.invalid/v1/jobs/j1"
    assert headers["proxy-authorization"] == "Basic " + base64.b64encode(b"ops:p@ss").decode()
    assert headers["host"] == "provider.invalid" and "authorization" not in headers


def test_a_proxied_answer_ends_at_the_whole_request_deadline_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The sandbox answers a forward proxy's absolute-URL request as if it were the host.
    with SandboxServer() as proxy:
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        contract = _contract("http://provider.invalid", timeout=1.5)
        client = ProviderClient()
        try:
            create = ProviderRequest(
                purpose=RequestPurpose.create,
                method="POST",
                url="http://provider.invalid/v1/jobs",
                headers={"Idempotency-Key": secrets.token_hex(8)},
                json_body={
                    "behaviour": {"hostile_status": "drip_headers", "drip_interval_seconds": 0.1}
                },
            )
            body = client.send(contract, create, trace_id="a" * 32).observation.body
            assert isinstance(body, dict), body
            started = time.monotonic()
            raw = client.send(
                contract, _get(f"http://provider.invalid/v1/jobs/{body['id']}"), trace_id="a" * 32
            )
            elapsed = time.monotonic() - started
        finally:
            client.close()
    assert raw.observation.transport_failure is TransportFailure.read_timeout
    assert 1.4 <= elapsed < 1.5 + 1.0


def test_a_redirect_is_an_observation_and_is_never_followed() -> None:
    # Invariant 10: a Location is followed only by the core, after the origin check.
    elsewhere: list[str] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            elsewhere.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with _serving(Elsewhere) as target:

        class Redirect(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                self.send_response(307)
                self.send_header("Location", f"{target}/stolen")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        with _serving(Redirect) as url:
            client = ProviderClient()
            try:
                raw = client.send(_contract(url), _get(f"{url}/v1/jobs/j1"), trace_id="a" * 32)
            finally:
                client.close()
    assert raw.observation.status_code == 307
    assert raw.observation.headers["location"] == f"{target}/stolen"
    assert elsewhere == []


def test_a_name_that_does_not_resolve_is_a_dns_failure() -> None:
    client = ProviderClient()
    try:
        raw = client.send(
            _contract("http://provider.invalid"),
            _get("http://provider.invalid/v1/jobs/x"),
            trace_id="a" * 32,
        )
    finally:
        client.close()
    assert raw.observation.transport_failure is TransportFailure.dns


def test_tls_spoken_to_a_plain_http_server_is_a_tls_failure() -> None:
    class Plain(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    with _serving(Plain) as url:
        secure = url.replace("http://", "https://")
        client = ProviderClient()
        try:
            raw = client.send(_contract(secure), _get(f"{secure}/v1/jobs/x"), trace_id="a" * 32)
        finally:
            client.close()
    assert raw.observation.transport_failure is TransportFailure.tls


def _chained(message: str, cause: BaseException) -> httpx.ConnectError:
    """httpx.ConnectError as httpx raises it: from httpcore's, from the socket's error."""
    core = httpcore.ConnectError(str(cause))
    core.__cause__ = cause
    outer = httpx.ConnectError(message)
    outer.__cause__ = core
    return outer


@pytest.mark.parametrize(
    ("exc", "failure"),
    [
        # The words do not decide: a refusal whose text mentions SSL is still a refusal.
        (
            _chained("ssl certificate proxy said no", ConnectionRefusedError(111, "refused")),
            TransportFailure.connect_refused,
        ),
        # Any resolver error is DNS, whatever its wording (EAI_AGAIN included).
        (
            _chained(
                "[Errno -3] Temporary failure in name resolution",
                socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"),
            ),
            TransportFailure.dns,
        ),
        (
            _chained("handshake failed", ssl.SSLCertVerificationError(1, "verify failed")),
            TransportFailure.tls,
        ),
        (httpx.ConnectTimeout("timed out"), TransportFailure.connect_timeout),
        (httpx.PoolTimeout("timed out"), TransportFailure.read_timeout),
        (httpx.RemoteProtocolError("peer closed"), TransportFailure.connection_reset),
        (httpx.LocalProtocolError("illegal header"), TransportFailure.protocol),
    ],
)
def test_failures_are_classified_by_the_exception_chain_not_its_message(
    exc: Exception, failure: TransportFailure
) -> None:
    assert transport_failure(exc) is failure
