"""The API's token cache: a live token is answered from memory, and forgotten by every
API process at its next request once ``jobwarden tokens revoke`` has returned (the
revocation epoch in Redis, jobwarden/tasks/humans/revocations.py). A revocation Redis
did not hear of holds once the cached lookup is JOBWARDEN_API_TOKEN_CACHE_SECONDS old.
On by default.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator

import httpx
import pytest
from redis import Redis

from jobwarden.api.app import create_app
from jobwarden.api.auth import Principal, Scope, create_token
from jobwarden.api.token_cache import TokenCache
from jobwarden.config.settings import get_settings
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence.db import transaction
from jobwarden.tasks.humans import revocations
from jobwarden.tasks.runtime import utcnow
from tests.api_server import serving
from tests.integration.test_cli import _cli

TTL = 5.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def clock() -> Clock:
    return Clock()


@pytest.fixture(scope="module")
def api(database_url: str, clock: Clock) -> Iterator[str]:
    app = create_app(get_settings().model_copy(update={"api_token_cache_seconds": TTL}))
    assert isinstance(app.state.token_cache, TokenCache)
    app.state.token_cache.clock = clock
    with serving(app) as url:
        yield url


def _post(api: str, bearer: str) -> int:
    answer = httpx.post(
        f"{api}/v1/operations",
        content=json.dumps({"provider": "sandbox", "command": {"kind": "export"}}),
        headers={
            "Authorization": f"Bearer {bearer}",
            "Idempotency-Key": secrets.token_hex(8),
            "Content-Type": "application/json",
        },
        timeout=30,
    )
    return answer.status_code


def _revoke(database_url: str, token_id: uuid.UUID) -> None:
    with transaction(database_url) as session:
        assert api_store.revoke_token(session, token_id, now=utcnow())


def test_a_revoked_token_stops_working_once_its_cached_lookup_is_older_than_the_bound(
    api: str, database_url: str, clock: Clock
) -> None:
    made = create_token(database_url, tenant="cache", name="c", scopes=[Scope.submit])
    assert _post(api, made.token) == 201  # looked up, and kept until clock + TTL
    _revoke(database_url, made.token_id)
    clock.now += TTL - 0.5
    assert _post(api, made.token) == 201  # inside the bound: answered from memory
    clock.now += 0.5
    assert _post(api, made.token) == 401  # the bound reached: looked up again, revoked


def test_a_token_revoked_before_its_first_use_is_refused_at_once(
    api: str, database_url: str
) -> None:
    made = create_token(database_url, tenant="cache", name="c", scopes=[Scope.submit])
    _revoke(database_url, made.token_id)
    assert _post(api, made.token) == 401
    assert _post(api, made.token) == 401  # a refusal is never kept


def test_use_does_not_extend_a_cached_lookup() -> None:
    clock = Clock()
    cache = TokenCache(TTL, clock=clock)
    principal = Principal(tenant="t", token_id=uuid.uuid4(), name="n", scopes=frozenset())
    assert cache.get("digest", "e1") is None
    cache.put("digest", principal, "e1")
    for _ in range(4):
        clock.now += TTL / 5
        assert cache.get("digest", "e1") is principal
    clock.now += TTL / 5
    assert cache.get("digest", "e1") is None


def test_another_epoch_empties_the_cache_and_a_lookup_from_before_it_is_not_kept() -> None:
    cache = TokenCache(TTL, clock=Clock())
    principal = Principal(tenant="t", token_id=uuid.uuid4(), name="n", scopes=frozenset())
    assert cache.get("digest", "e1") is None
    cache.put("digest", principal, "e1")
    assert cache.get("digest", "e2") is None  # a revocation since: looked up again
    cache.put("digest", principal, "e1")  # a lookup that read the epoch before it
    assert cache.get("digest", "e2") is None


def test_the_cache_is_on_by_default(database_url: str) -> None:
    assert get_settings().api_token_cache_seconds > 0
    assert isinstance(create_app().state.token_cache, TokenCache)


def test_a_token_revoked_with_tokens_revoke_is_refused_by_the_next_request_on_every_process(
    database_url: str,
) -> None:
    # Two API processes' worth of caches: two apps, each with its own TokenCache, and a
    # real clock (nothing expires during the test: the epoch alone must refuse the token).
    settings = get_settings()
    assert settings.api_token_cache_seconds >= 5
    first, second = create_app(settings), create_app(settings)
    assert first.state.token_cache is not second.state.token_cache
    made = create_token(database_url, tenant="cache", name="e", scopes=[Scope.submit])
    with serving(first) as one, serving(second) as two:
        for api in (one, two, one, two):  # the second use on each is answered from memory
            assert _post(api, made.token) == 201
        done = _cli("tokens", "revoke", str(made.token_id))
        assert done.returncode == 0, done.stderr
        assert _post(one, made.token) == 401
        assert _post(two, made.token) == 401


def test_when_redis_lost_the_epoch_every_cache_is_emptied(database_url: str) -> None:
    settings = get_settings()
    app = create_app(settings)
    made = create_token(database_url, tenant="cache", name="l", scopes=[Scope.submit])
    redis = Redis.from_url(settings.redis_url)
    epoch = revocations.epoch_key(settings.key_prefix)
    try:
        redis.delete(epoch)  # the cache fills under the epoch a lost one is replaced with
        with serving(app) as api:
            assert _post(api, made.token) == 201
            assert _post(api, made.token) == 201  # from memory
            _revoke(database_url, made.token_id)  # in Postgres only: nobody is told
            redis.delete(epoch)  # Redis lost it
            # A counter would restart at values caches have seen; a fresh random one not.
            assert _post(api, made.token) == 401
    finally:
        redis.close()
