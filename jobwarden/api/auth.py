"""API tokens: the tenant comes from the caller's credential, never from the body.

The token, its principal and the lookup every door shares live in
jobwarden/tasks/humans/principals.py (no FastAPI there: the CLI resolves tokens too); this
module is the HTTP side: the bearer dependency, the scope check and token creation.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool

from jobwarden.api.access_log import note_tenant
from jobwarden.api.context import runtime_of, settings_of
from jobwarden.api.problems import ProblemError
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence.db import transaction
from jobwarden.tasks.heartbeat import Attendance, ask_attendance, attendance
from jobwarden.tasks.humans import revocations
from jobwarden.tasks.humans.principals import (
    LAST_USE_RESOLUTION,
    TOKEN_PREFIX,
    Principal,
    Scope,
    principal_from,
    principal_of,
    secret_hash,
)
from jobwarden.tasks.runtime import utcnow

if TYPE_CHECKING:
    from jobwarden.api.token_cache import TokenCache

# The shared token names are re-exported for the routes and the existing imports.
__all__ = [
    "LAST_USE_RESOLUTION",
    "MAX_TOKEN_NAME",
    "TOKEN_PREFIX",
    "EpochRead",
    "NewToken",
    "Principal",
    "Scope",
    "authenticate",
    "authorize",
    "bearer",
    "create_token",
    "new_token",
    "principal_from",
    "principal_of",
    "read_for_submit",
    "require",
    "secret_hash",
]


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


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
bearer = HTTPBearer(auto_error=False, description="An API token: `jobwarden tokens create`")


def _unauthenticated(detail: str) -> ProblemError:
    return ProblemError(401, "unauthenticated", detail)


@dataclass(frozen=True, slots=True)
class EpochRead:
    """The revocation epoch as a route already read it, in a Redis trip of its own."""

    epoch: str | None


def read_for_submit(request: Request) -> tuple[EpochRead | None, Attendance | None]:
    """The submit route's one Redis trip: the revocation epoch (when the token cache is
    on) and the operations' queue's heartbeats, which the answer's no-worker advice
    needs. Read apart they were two trips: 5 % and 8-16 % of a submission's instructions,
    measured (docs/scaling.md).

    Redis not answering: (None, None), and each is read again on its own path, which says
    what failed; the epoch missing (Redis lost it): read again by ``authenticate``, which
    sets it.
    """
    settings = settings_of(request)
    redis = runtime_of(request).redis
    cached = getattr(request.app.state, "token_cache", None) is not None
    try:
        with redis.pipeline(transaction=False) as pipe:
            if cached:
                pipe.get(revocations.epoch_key(settings.key_prefix))
            ask_attendance(pipe, settings.key_prefix, settings.queue)
            answers = pipe.execute()
    except RedisError:
        return None, None
    try:
        seen: Attendance | None = attendance(answers[-2], answers[-1])
    except (ValueError, OverflowError):
        seen = None  # read again by the advice, which says so in the log
    if not cached:
        return None, seen
    if answers[0] is None:
        return None, seen
    return EpochRead(revocations.decoded(answers[0])), seen


def authenticate(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None,
    read: EpochRead | None = None,
) -> Principal:
    """The principal of a bearer token; 401 for a missing, unknown or revoked one.

    With the app's token cache (jobwarden/api/token_cache.py, None when off), a token
    looked up since the last revocation anywhere is answered from memory; the revocation
    epoch is read first, in Redis, so a revoked token is looked up (and refused) by the
    next request. Redis not answering: the token is looked up, as without a cache.
    ``read``: the epoch as the route already read it this request (``read_for_submit``).
    """
    if credentials is None or not credentials.credentials:
        raise _unauthenticated("send Authorization: Bearer <token>")
    token = credentials.credentials
    if not token.startswith(TOKEN_PREFIX):
        raise _unauthenticated("the bearer token is not a jobwarden API token")
    settings = settings_of(request)
    cache: TokenCache | None = getattr(request.app.state, "token_cache", None)
    digest = secret_hash(token)
    epoch = None
    if cache is not None:
        epoch = (
            read.epoch
            if read is not None
            else revocations.epoch(runtime_of(request).redis, settings.key_prefix)
        )
        cached = cache.get(digest, epoch) if epoch is not None else None
        if cached is not None:
            return cached
    principal = principal_of(settings.database_url, token)
    # Unknown and revoked read alike: a caller learns nothing about which tokens exist.
    if principal is None:
        raise _unauthenticated("the API token is unknown or revoked")
    if cache is not None and epoch is not None:
        cache.put(digest, principal, epoch)
    return principal


def authorize(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None,
    scope: Scope,
    read: EpochRead | None = None,
) -> Principal:
    """The principal of the request's token, which must hold ``scope`` (blocking I/O: call
    it from a worker thread). Missing, unknown or revoked token: 401 with
    ``WWW-Authenticate: Bearer``; a valid token without the scope: 403. ``read``: as
    ``authenticate``'s."""
    principal = authenticate(request, credentials, read)
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


def require(scope: Scope) -> Callable[..., Awaitable[Principal]]:
    """A FastAPI dependency: the principal of the request's token, which must hold ``scope``
    (``authorize``, in a worker thread)."""

    async def dependency(
        request: Request,
        credentials: HTTPAuthorizationCredentials | None = Depends(bearer),  # noqa: B008 - FastAPI's idiom
    ) -> Principal:
        return await run_in_threadpool(authorize, request, credentials, scope)

    dependency.__name__ = f"require_{scope.value}"
    return dependency
