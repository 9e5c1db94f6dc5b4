"""The provider HTTP edge: the only module that imports httpx.

It turns a request into an HttpObservation (status, lower-cased headers,
parsed JSON body or a body problem, or a transport failure) and never raises
for network trouble: a failed status read is an observation, not a crash.
Secrets are read from the environment or a file at call time and never logged.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import ssl
import urllib.parse
from pathlib import Path

import httpx

from jobwarden.models.actions import ProviderRequest
from jobwarden.models.contract import ProviderContract
from jobwarden.models.errors import GiveUpError
from jobwarden.models.plugins import OutboundRequest, ProviderPlugin
from jobwarden.models.signals import HttpObservation, RawResponse, TransportFailure

MAX_BODY_BYTES = 50 * 1024 * 1024


def traceparent(trace_id: str) -> str:
    return f"00-{trace_id}-{secrets.token_hex(8)}-01"


def _secret(contract: ProviderContract) -> str | None:
    auth = contract.auth
    if auth is None:
        return None
    if auth.secret_env:
        value = os.environ.get(auth.secret_env)
        if value:
            return value.strip()
    if auth.secret_file:
        try:
            return Path(auth.secret_file).read_text().strip()
        except OSError:
            pass
    # Name the variable, never a value.
    raise GiveUpError(
        f"provider {contract.name}: no credential in "
        f"{auth.secret_env or auth.secret_file or 'the configured source'}"
    )


def secret_forms(contract: ProviderContract) -> tuple[str, ...]:
    """The credential as a provider might echo it back: plain, base64, URL-encoded.

    Excerpts are scrubbed by these values (invariant 9: by value, not only by key
    name). Empty when the contract has no credential or it cannot be read.
    """
    try:
        secret = _secret(contract)
    except GiveUpError:
        return ()
    if not secret:
        return ()
    raw = secret.encode("utf-8", "surrogatepass")
    forms = {
        secret,
        base64.b64encode(raw).decode(),
        base64.urlsafe_b64encode(raw).decode(),
        base64.b64encode(raw).decode().rstrip("="),
        urllib.parse.quote(secret, safe=""),
        urllib.parse.quote_plus(secret),
    }
    # Very short values would redact ordinary words; a credential is never that short.
    return tuple(sorted((f for f in forms if len(f) >= 8), key=len, reverse=True))


def auth_headers(contract: ProviderContract) -> dict[str, str]:
    secret = _secret(contract)
    if secret is None or contract.auth is None:
        return {}
    if contract.auth.scheme == "bearer":
        return {contract.auth.header: f"Bearer {secret}"}
    return {contract.auth.header: secret}


def _failure(exc: httpx.HTTPError) -> TransportFailure:
    if isinstance(exc, httpx.ConnectTimeout):
        return TransportFailure.connect_timeout
    if isinstance(exc, httpx.ReadTimeout | httpx.WriteTimeout | httpx.PoolTimeout):
        return TransportFailure.read_timeout
    if isinstance(exc, httpx.ConnectError):
        text = str(exc).lower()
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, ssl.SSLError) or "ssl" in text or "certificate" in text:
            return TransportFailure.tls
        if "name or service not known" in text or "nodename" in text or "getaddrinfo" in text:
            return TransportFailure.dns
        if "refused" in text:
            return TransportFailure.connect_refused
        return TransportFailure.connect_refused
    if isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError | httpx.WriteError):
        return TransportFailure.connection_reset
    return TransportFailure.protocol


class ProviderClient:
    """One pooled httpx.Client per provider, created in the worker process."""

    def __init__(self, plugins: dict[str, ProviderPlugin] | None = None) -> None:
        self._clients: dict[str, httpx.Client] = {}
        self.plugins = plugins or {}

    def _client(self, contract: ProviderContract) -> httpx.Client:
        client = self._clients.get(contract.name)
        if client is None:
            client = httpx.Client(
                timeout=httpx.Timeout(contract.limits.request_timeout_seconds),
                follow_redirects=False,
                limits=httpx.Limits(max_connections=20, max_keepalive_connections=10),
            )
            self._clients[contract.name] = client
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def send(
        self, contract: ProviderContract, request: ProviderRequest, *, trace_id: str
    ) -> RawResponse:
        """Send one request; every outcome, including network failure, is returned."""
        method, url = request.method, request.url
        all_headers = {
            "traceparent": traceparent(trace_id),
            "x-jobwarden-trace-id": trace_id,
            "accept": "application/json",
            **contract.extra_headers,
            **auth_headers(contract),
            **request.headers,
        }
        content = None
        if request.json_body is not None:
            content = json.dumps(request.json_body, separators=(",", ":")).encode()
            all_headers["content-type"] = "application/json"
        plugin = self.plugins.get(contract.name)
        if plugin is not None:
            # Signing and similar provider code sees the final request, secrets included.
            prepared = plugin.prepare_request(
                OutboundRequest(method=method, url=url, headers=all_headers, body=content)
            )
            method, url, all_headers, content = (
                prepared.method,
                prepared.url,
                dict(prepared.headers),
                prepared.body,
            )
        try:
            response = self._client(contract).request(
                method, url, headers=all_headers, content=content
            )
        except httpx.HTTPError as exc:
            return RawResponse(
                observation=HttpObservation(
                    status_code=None,
                    headers={},
                    body=None,
                    body_problem=None,
                    transport_failure=_failure(exc),
                ),
                content=b"",
                content_type=None,
                provider_request_id=None,
            )
        raw = response.content[:MAX_BODY_BYTES]
        lowered = {k.lower(): v for k, v in response.headers.items()}
        body: object | None = None
        problem: str | None = None
        ctype = lowered.get("content-type")
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                problem = "malformed_json"
        return RawResponse(
            observation=HttpObservation(
                status_code=response.status_code,
                headers=lowered,
                body=body,
                body_problem=problem,
                transport_failure=None,
            ),
            content=raw,
            content_type=ctype,
            provider_request_id=lowered.get("x-request-id") or lowered.get("request-id"),
        )
