"""API tokens: the tenant comes from the caller's credential, never from the body.

A token is ``jw_`` + secrets.token_urlsafe(32) (256 random bits). Only its sha256
is stored: for a secret of that entropy a fast hash is enough (nothing to brute
force, unlike a password), and it keeps the lookup one indexed equality.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from typing import cast

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from jobwarden.api.access_log import note_tenant
from jobwarden.api.context import settings_of
from jobwarden.api.problems import ProblemError
from jobwarden.models.identity import Author, token_author
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence.api_store import TokenRecord
from jobwarden.models.persistence.db import snapshot, transaction
from jobwarden.tasks.runtime import utcnow

TOKEN_PREFIX = "jw_"
# A use is recorded at most this often per token, so reading is not a write per request.
LAST_USE_RESOLUTION = timedelta(minutes=1)


class Scope(StrEnum):
    submit = "submit"  # POST /v1/operations
    read = "read"  # GET operations, events, escalations
    cancel = "cancel"  # POST /v1/operations/{id}/cancel
    approve = "approve"  # POST /v1/operations/{id}/approvals
    decide = "decide"  # POST /v1/operations/{id}/decisions


@dataclass(frozen=True, slots=True, kw_only=True)
class Principal:
    """The authenticated caller: a token of one tenant with its scopes."""

    tenant: str
    token_id: uuid.UUID
    name: str
    scopes: frozenset[Scope]
    # The tenant's setting: may a token approve an operation its own name submitted?
    allows_self_approval: bool = False

    @property
    def actor(self) -> str:
        """The actor in events and the intake log."""
        return self.author.actor

    @property
    def author(self) -> Author:
        """The principal as the author of a decision (every door hands this to the core)."""
        return token_author(
            self.name, token_id=self.token_id, allows_self_approval=self.allows_self_approval
        )


def principal_from(record: TokenRecord) -> Principal:
    """The principal a live token record names (scopes this version does not know are dropped).

    The caller has checked that the token exists and is not revoked.
    """
    return Principal(
        tenant=record.tenant,
        token_id=record.token_id,
        name=record.name,
        scopes=frozenset(Scope(s) for s in record.scopes if s in Scope.__members__),
        allows_self_approval=record.allows_self_approval,
    )


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def secret_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


# "token:" + name must fit operation_events.actor (200) and intake_log.actor.
MAX_TOKEN_NAME = 190


@dataclass(frozen=True, slots=True, kw_only=True)
class NewToken:
    token_id: uuid.UUID
    token: str  # shown once; only its hash is stored


def create_token(
    database_url: str, *, tenant: str, name: str, scopes: Iterable[Scope | str]
) -> NewToken:
    """Store a new token's hash; the secret is returned once and never again.

    Raises ValueError naming the argument for an empty tenant or name, a name longer
    than MAX_TOKEN_NAME, an unknown scope or no scope at all.
    """
    if not tenant or len(tenant) > 200 or not tenant.isprintable():
        raise ValueError("tenant must be 1 to 200 printable characters")
    if not name or len(name) > MAX_TOKEN_NAME or not name.isprintable():
        raise ValueError(f"name must be 1 to {MAX_TOKEN_NAME} printable characters")
    wanted = []
    for scope in scopes:
        if scope not in Scope.__members__:
            known = ", ".join(s.value for s in Scope)
            raise ValueError(f"unknown scope {scope!r}; known: {known}")
        wanted.append(Scope(scope).value)
    if not wanted:
        raise ValueError("a token needs at least one scope")
    token = new_token()
    token_id = uuid.uuid4()
    with transaction(database_url) as session:
        api_store.insert_token(
            session,
            token_id=token_id,
            tenant=tenant,
            name=name,
            secret_hash=secret_hash(token),
            scopes=sorted(set(wanted)),
            now=utcnow(),
        )
    return NewToken(token_id=token_id, token=token)


# auto_error=False: a missing header is our 401 problem, not FastAPI's plain 403.
_bearer = HTTPBearer(auto_error=False, description="An API token: `jobwarden tokens create`")


def _unauthenticated(detail: str) -> ProblemError:
    return ProblemError(401, "unauthenticated", detail)


def authenticate(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Principal:
    """The principal of a bearer token; 401 for a missing, unknown or revoked one."""
    if credentials is None or not credentials.credentials:
        raise _unauthenticated("send Authorization: Bearer <token>")
    token = credentials.credentials
    if not token.startswith(TOKEN_PREFIX):
        raise _unauthenticated("the bearer token is not a jobwarden API token")
    # The app's TokenCache (jobwarden/api/token_cache.py), or None when it is off.
    cache = getattr(request.app.state, "token_cache", None)
    digest = secret_hash(token)
    cached = cache.get(digest) if cache is not None else None
    if cached is not None:
        return cast(Principal, cached)
    principal = principal_of(settings_of(request).database_url, token)
    # Unknown and revoked read alike: a caller learns nothing about which tokens exist.
    if principal is None:
        raise _unauthenticated("the API token is unknown or revoked")
    if cache is not None:
        cache.put(digest, principal)
    return principal


def principal_of(url: str, token: str) -> Principal | None:
    """The principal of a live token, or None for an unknown or revoked one (every door's lookup).

    A use is recorded at most once per LAST_USE_RESOLUTION.
    """
    digest = secret_hash(token)
    with snapshot(url) as session:
        record = api_store.token_by_hash(session, digest)
    if record is None or record.revoked_at is not None:
        return None
    now = utcnow()
    cutoff = now - LAST_USE_RESOLUTION
    if record.last_used_at is None or record.last_used_at <= cutoff:
        with transaction(url) as session:
            api_store.touch_token(session, record.token_id, now=now, unless_after=cutoff)
    return principal_from(record)


def _cached(request: Request, credentials: HTTPAuthorizationCredentials | None) -> Principal | None:
    """The principal the app's token cache holds for this bearer token, if any (no I/O)."""
    cache = getattr(request.app.state, "token_cache", None)
    if cache is None or credentials is None:
        return None
    token = credentials.credentials
    if not token.startswith(TOKEN_PREFIX):
        return None
    return cast(Principal | None, cache.get(secret_hash(token)))


def require(scope: Scope) -> Callable[..., Awaitable[Principal]]:
    """A FastAPI dependency: the principal of the request's token, which must hold ``scope``.

    Missing, unknown or revoked token: 401 with ``WWW-Authenticate: Bearer``;
    a valid token without the scope: 403.
    """

    async def dependency(
        request: Request,
        credentials: HTTPAuthorizationCredentials | None = Depends(_bearer),  # noqa: B008 - FastAPI's idiom
    ) -> Principal:
        # A cached token is answered on the event loop; a lookup goes to a worker thread.
        principal = _cached(request, credentials)
        if principal is None:
            principal = await run_in_threadpool(authenticate, request, credentials)
        note_tenant(request, principal.tenant)
        if scope not in principal.scopes:
            raise ProblemError(
                403,
                "insufficient_scope",
                f"this route needs the {scope.value!r} scope; the token has "
                f"{sorted(s.value for s in principal.scopes)}",
                required_scope=scope.value,
            )
        return principal

    dependency.__name__ = f"require_{scope.value}"
    return dependency
