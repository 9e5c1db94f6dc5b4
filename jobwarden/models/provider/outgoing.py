"""A provider request as it leaves: its headers and body bytes, and the create as shown.

The provider edge sends what ``outgoing_headers`` and ``outgoing_body`` build, and the
approval (console, ``jobwarden show``, the HTTP API, MCP) shows what ``shown_create``
builds from the very same functions and ``requests.create_request``: what a human
approves cannot drift from what is sent (invariant 13). Only the credential differs:
the edge passes the real one, the display a placeholder, so no process needs the
secret to show a request, and none shows it.

``request_digest`` is that rendering's digest: an approval binds it, and the create step
renders the request it is about to send the same way and refuses to send on any
difference (``approval_stale``). One rendering, one digest, so what is shown, what is
approved and what is checked before the send cannot disagree.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from jobwarden.models import canonical
from jobwarden.models.actions import ProviderRequest
from jobwarden.models.contracts.contract import AuthSpec, ProviderContract
from jobwarden.models.contracts.references import ImmutableReference
from jobwarden.models.history.excerpts import REDACTED, names_a_secret, redacted, scrub_text
from jobwarden.models.operation import Operation
from jobwarden.models.provider.requests import StepContext, create_request

# The create's companion header (Repeatability-First-Sent) carries the first send's time,
# which no approval can know: it is shown as this, and is not part of the fingerprint.
FIRST_SENT_LATER: Final = "(the time of the first send, as an IMF-fixdate)"
# W3C traceparent's parent id is new for every request (provider_edge.traceparent).
NEW_PER_REQUEST: Final = "(new per request)"
# Added by the HTTP client itself, below anything jobwarden decides.
TRANSPORT_HEADERS: Final = ("host", "content-length", "connection")


def credential_header(auth: AuthSpec | None, secret: str) -> dict[str, str]:
    """The contract's credential header carrying ``secret`` (the real one, or REDACTED)."""
    if auth is None:
        return {}
    if auth.scheme == "bearer":
        return {auth.header: f"Bearer {secret}"}
    return {auth.header: secret}


def outgoing_body(request: ProviderRequest) -> bytes | None:
    """The body bytes as sent: compact JSON, keys in the order the request holds them."""
    if request.json_body is None:
        return None
    return json.dumps(request.json_body, separators=(",", ":")).encode()


def outgoing_headers(
    contract: ProviderContract,
    request: ProviderRequest,
    *,
    traceparent: str,
    trace_id: str,
    credential: Mapping[str, str],
) -> dict[str, str]:
    """Every header jobwarden sets on ``request``; later entries win, as the edge needs:
    the request's own (its idempotency token) over the credential over the contract's."""
    headers = {
        "traceparent": traceparent,
        "x-jobwarden-trace-id": trace_id,
        "accept": "application/json",
        # Only gzip is inflated (with the body's bound); asking for it keeps others away.
        "accept-encoding": "gzip",
        **contract.extra_headers,
        **credential,
        **request.headers,
    }
    if request.json_body is not None:
        headers["content-type"] = "application/json"
    return headers


@dataclass(frozen=True, slots=True, kw_only=True)
class ShownRequest:
    """A request as an approver reads it: nothing secret, nothing cut."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]  # in the order they are sent
    body: str | None  # the bytes as sent, as text; a secret-named value redacted
    fingerprint: str
    # Where the credential comes from (``env:NAME``, ``file:PATH``): its reference, never
    # its value; None when the contract sends none.
    credential_from: str | None = None
    # The companion header carrying the first send's time (Repeatability-First-Sent), if
    # any: shown as it is, digested as FIRST_SENT_LATER (no approval can know the time).
    first_sent_header: str | None = None
    transport_headers: tuple[str, ...] = TRANSPORT_HEADERS  # the HTTP client adds these
    # The command's immutable references (the commit, the digest that will be deployed),
    # named apart so an approver need not find them in the body. Not in the digest: they
    # are read from the command, which the fingerprint in the digest already binds.
    references: tuple[ImmutableReference, ...] = ()

    @property
    def digest(self) -> str:
        return request_digest(self)


def credential_reference(auth: AuthSpec | None) -> str | None:
    """The credential's reference (the environment variable, then the file), never its value."""
    if auth is None:
        return None
    parts = [f"env:{auth.secret_env}"] if auth.secret_env else []
    if auth.secret_file:
        parts.append(f"file:{auth.secret_file}")
    return " | ".join(parts) or None


def request_digest(shown: ShownRequest) -> str:
    """sha256 (hex) of a shown request: what an approval binds (DESIGN invariant 13).

    Over the method, the absolute URL, every header jobwarden sets (names lower-cased and
    sorted: RFC 9110 section 5.1, names are case-insensitive, and their order carries no
    meaning between different names), the body bytes as sent, the command's fingerprint
    and the credential's reference, as RFC 8785 JSON. Secrets are not in it: the rendering
    holds only placeholders. What no approval can know (traceparent's parent id, new per
    request; the first send's time) is digested as its placeholder, so it never makes an
    approval stale.
    """
    material = {
        "method": shown.method.upper(),
        "url": shown.url,
        "headers": sorted(
            [name.lower(), FIRST_SENT_LATER if name == shown.first_sent_header else value]
            for name, value in shown.headers
        ),
        "body": shown.body,
        "fingerprint": shown.fingerprint,
        "credential_from": shown.credential_from,
    }
    return hashlib.sha256(canonical.dumps(material)).hexdigest()


def _shown_header(name: str, value: str, credential: str | None, secrets: Sequence[str]) -> str:
    if name == credential:
        return value  # already the placeholder: the scheme stays readable
    if names_a_secret(name):
        return REDACTED
    return scrub_text(value, secrets)


def shown_create(
    ctx: StepContext,
    op: Operation,
    *,
    user_agent: str,
    secrets: Sequence[str] = (),
    request: ProviderRequest | None = None,
) -> ShownRequest:
    """The create ``op`` will send, built by ``create_request`` and the edge's own header
    and body functions; the credential a placeholder, secret-named values and the
    credential's forms (``secrets``) redacted.

    ``request``: the create the step is about to send (the step renders it to check its
    digest against the approval's); None, the one ``create_request`` builds now.

    A provider plugin's ``prepare_request`` (signing) runs only at send time, on the real
    credential: what it adds is not shown.
    """
    request = request or create_request(ctx, op)
    spec = ctx.contract.create
    if spec.first_sent_header and spec.first_sent_header not in request.headers:
        request = replace(
            request, headers={**request.headers, spec.first_sent_header: FIRST_SENT_LATER}
        )
    auth = ctx.contract.auth
    headers = outgoing_headers(
        ctx.contract,
        request,
        traceparent=f"00-{op.trace_id}-{NEW_PER_REQUEST}-01",
        trace_id=op.trace_id,
        credential=credential_header(auth, REDACTED),
    )
    if not any(name.lower() == "user-agent" for name in headers):
        headers["user-agent"] = user_agent  # the client's default, unless a contract's wins
    credential = auth.header if auth is not None else None
    command_spec = ctx.contract.command
    references = command_spec.schema.references(op.command) if command_spec is not None else ()
    body = outgoing_body(replace(request, json_body=redacted(request.json_body, secrets)))
    return ShownRequest(
        method=request.method,
        url=scrub_text(request.url, secrets),
        headers=tuple(
            (name, _shown_header(name, value, credential, secrets))
            for name, value in headers.items()
        ),
        body=scrub_text(body.decode(), secrets) if body is not None else None,
        fingerprint=op.request_fingerprint,
        credential_from=credential_reference(auth),
        first_sent_header=spec.first_sent_header,
        references=tuple(
            replace(reference, value=scrub_text(reference.value, secrets))
            for reference in references
        ),
    )
