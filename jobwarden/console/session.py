"""The console's session: an API token pasted once, kept as a signed cookie.

The cookie holds the token's sha256 (what the tokens table stores, useless as a
credential: authentication takes the token itself) and a per-session CSRF
token, signed with itsdangerous (HMAC-SHA256 over the payload and a timestamp) and
refused after ``console_session_hours``. No session row: every request looks
the token up again, so a revoked token ends its console sessions at once.

Cookie attributes (RFC 6265bis §4.1.2.5-7): HttpOnly, SameSite=Lax (a link
from an alert opens the console logged in; every state change is a POST
carrying the CSRF token), Path=/console, and Secure unless the setting is off
or the request came to a loopback host — a browser drops a Secure cookie set
over plain http://127.0.0.1, which is how tests and a local console run.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Any

from fastapi import Request, Response
from itsdangerous import BadSignature, URLSafeTimedSerializer

from jobwarden.api.access_log import note_tenant
from jobwarden.api.auth import Principal, principal_from
from jobwarden.api.context import settings_of
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence.db import snapshot

COOKIE = "jw_console"
LOGIN_COOKIE = "jw_console_login"
PATH = "/console"
LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1", "[::1]"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsoleSession:
    principal: Principal
    csrf: str


class LoginRequiredError(Exception):
    """No valid session: the route answers with a redirect to the login page."""


def _serializer(request: Request, salt: str) -> URLSafeTimedSerializer:
    # The key is drawn once per app by jobwarden.console.install.
    return URLSafeTimedSerializer(
        request.app.state.console_key, salt=salt, signer_kwargs={"digest_method": hashlib.sha256}
    )


def secure_cookie(request: Request) -> bool:
    return settings_of(request).console_secure_cookie and request.url.hostname not in LOOPBACK


def _set(request: Request, response: Response, name: str, value: str, max_age: int) -> None:
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=PATH,
        httponly=True,
        samesite="lax",
        secure=secure_cookie(request),
    )


def _max_age(request: Request) -> int:
    return int(settings_of(request).console_session_hours * 3600)


def principal_for_hash(request: Request, digest: str) -> Principal | None:
    """The principal of a stored token hash, or None when unknown or revoked."""
    with snapshot(settings_of(request).database_url) as session:
        record = api_store.token_by_hash(session, digest)
    if record is None or record.revoked_at is not None:
        return None
    return principal_from(record)


def start(request: Request, response: Response, digest: str) -> None:
    payload = {"h": digest, "c": secrets.token_urlsafe(24)}
    _set(
        request, response, COOKIE, _serializer(request, "session").dumps(payload), _max_age(request)
    )
    response.delete_cookie(LOGIN_COOKIE, path=PATH)


def end(response: Response) -> None:
    response.delete_cookie(COOKIE, path=PATH)


def current(request: Request) -> ConsoleSession:
    """The request's session; LoginRequiredError when there is none, it is forged or too
    old, or its token was revoked."""
    raw = request.cookies.get(COOKIE)
    if not raw:
        raise LoginRequiredError
    try:
        payload: Any = _serializer(request, "session").loads(raw, max_age=_max_age(request))
    except BadSignature:
        raise LoginRequiredError from None
    if not isinstance(payload, dict) or not all(isinstance(payload.get(k), str) for k in "hc"):
        raise LoginRequiredError
    principal = principal_for_hash(request, payload["h"])
    if principal is None:
        raise LoginRequiredError
    note_tenant(request, principal.tenant)
    return ConsoleSession(principal=principal, csrf=payload["c"])


def new_login_nonce() -> str:
    return secrets.token_urlsafe(24)


def remember_login_nonce(request: Request, response: Response, nonce: str) -> None:
    """Set the login form's CSRF cookie, before any session exists (double submit: the
    same random value in a signed cookie and in the form; a forged form lacks the cookie)."""
    _set(request, response, LOGIN_COOKIE, _serializer(request, "login").dumps(nonce), 900)


def login_nonce_matches(request: Request, submitted: str) -> bool:
    raw = request.cookies.get(LOGIN_COOKIE)
    if not raw or not submitted:
        return False
    try:
        nonce = _serializer(request, "login").loads(raw, max_age=900)
    except BadSignature:
        return False
    return isinstance(nonce, str) and _same_token(nonce, submitted)


def csrf_matches(session: ConsoleSession, submitted: str) -> bool:
    return bool(submitted) and _same_token(session.csrf, submitted)


def _same_token(ours: str, submitted: str) -> bool:
    """Constant-time comparison of a token we issued (ASCII, token_urlsafe) with a form's.

    hmac.compare_digest raises TypeError for a non-ASCII str (a 500 any stranger could
    cause, issue 33): a submitted value that is not ASCII can never be ours anyway.
    """
    return submitted.isascii() and hmac.compare_digest(ours.encode(), submitted.encode())
