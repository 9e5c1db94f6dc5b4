"""JOBWARDEN_API_TOKEN_CACHE_SECONDS: a live token is answered from memory for at most
that long after its lookup, so a revoked token stops working within the bound; off by
default (every request looks its token up, a revocation takes effect at once).
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator

import httpx
import pytest

from jobwarden.api.app import create_app
from jobwarden.api.auth import Principal, Scope, create_token
from jobwarden.api.token_cache import TokenCache
from jobwarden.config.settings import get_settings
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence.db import transaction
from jobwarden.tasks.runtime import utcnow
from tests.api_server import serving

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
    cache.put("digest", principal)
    for _ in range(4):
        clock.now += TTL / 5
        assert cache.get("digest") is principal
    clock.now += TTL / 5
    assert cache.get("digest") is None


def test_the_cache_is_off_by_default(database_url: str) -> None:
    assert get_settings().api_token_cache_seconds == 0
    assert create_app().state.token_cache is None
