"""The token revocation epoch: every API process learns of a revocation at its next request.

Issue 37: API processes keep live tokens' principals in memory
(jobwarden/api/token_cache.py), so a request needs no Postgres lookup for its token.
What makes that safe is one Redis value, the epoch: ``jobwarden tokens revoke`` commits
the revocation, then sets the epoch to a fresh random value; every request reads the
epoch before it trusts its cache, and a cache that sees another epoch than the one it
filled under forgets everything. So the next request on every process after ``revoke``
returns looks the token up, and is 401.

A random value, not a counter: Redis may lose the key (a restart without persistence, a
flush); a counter would then count up through values a cache has already seen. A missing
epoch is set (once, ``SET NX``) to a fresh value by whoever reads it first, which clears
every cache. If Redis cannot be read, the caller looks tokens up as if there were no cache.
"""

from __future__ import annotations

import secrets
import uuid

from redis import Redis
from redis.exceptions import RedisError

from jobwarden.models.errors import RevocationNotAnnouncedError
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence.db import transaction
from jobwarden.tasks.runtime import utcnow


def epoch_key(prefix: str) -> str:
    return f"{prefix}:tokens:revocation_epoch"


def epoch(redis: Redis, prefix: str) -> str | None:
    """The current epoch (set now if Redis lost it), or None when Redis does not answer."""
    key = epoch_key(prefix)
    try:
        value = redis.get(key)
        if value is None:
            redis.set(key, secrets.token_hex(8), nx=True)
            value = redis.get(key)
    except RedisError:
        return None
    if value is None:  # deleted again between the two calls: no epoch to trust
        return None
    return decoded(value)


def decoded(value: bytes | str) -> str:
    """An epoch as Redis answered it."""
    return value.decode() if isinstance(value, bytes) else str(value)


def announce(redis: Redis, prefix: str) -> None:
    """A token was revoked: every cache filled under an older epoch forgets what it holds.

    Raises RedisError when Redis does not take it.
    """
    redis.set(epoch_key(prefix), secrets.token_hex(8))


def revoke(database_url: str, redis: Redis, prefix: str, token_id: uuid.UUID) -> bool:
    """Revoke a live token and announce it; False if no live token has this id.

    The revocation is committed first: a cache that refills between the commit and the
    announcement still forgets at the announcement. It is announced even when the token
    was revoked already, so revoking again repairs an announcement Redis did not take.
    Raises RevocationNotAnnouncedError when Redis does not answer.
    """
    with transaction(database_url) as session:
        revoked = api_store.revoke_token(session, token_id, now=utcnow())
    try:
        announce(redis, prefix)
    except RedisError as exc:
        raise RevocationNotAnnouncedError(
            f"token {token_id} is revoked, but Redis did not take the announcement ({exc})"
        ) from exc
    return revoked
