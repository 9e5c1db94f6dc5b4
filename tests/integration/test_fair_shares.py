"""Fair shares in the shared limiter's Lua script, against the real Redis on an injected
clock: the script is its pure twin's equal (models/provider/fair_shares.py), a tenant
asking a hundred times as often cannot starve another, and the counters the metrics read."""

from __future__ import annotations

import heapq
import itertools
import os
import random
import secrets
from collections.abc import Callable, Iterator

import pytest
from redis import Redis

from jobwarden.models.contracts.contract import RateLimit
from jobwarden.models.provider.fair_shares import Ask, FairState, rank, share_bound, take
from jobwarden.tasks.provider.rate_limits import Token, share_counts, take_from

T0 = 1_800_000_000.0
FOLLOW_UP = rank(follow_up=True, priority=0)


@pytest.fixture
def redis_client() -> Iterator[Redis]:
    client = Redis.from_url(os.environ["JOBWARDEN_TEST_REDIS_URL"])
    yield client
    client.close()


def _key() -> str:
    return f"{os.environ['JOBWARDEN_KEY_PREFIX']}:rate:fair:{secrets.token_hex(6)}"


Asker = Callable[[str, int, bool, float], Token]  # tenant, priority, create, now


def _script(redis: Redis, limit: RateLimit) -> tuple[Asker, str]:
    key = _key()

    def ask(tenant: str, priority: int, create: bool, now: float) -> Token:
        return take_from(
            redis, key, limit, tenant=tenant, priority=priority, create=create, now=now
        )

    return ask, key


def test_the_script_answers_every_ask_as_its_pure_twin(redis_client: Redis) -> None:
    rnd = random.Random(39)
    limit = RateLimit(requests_per_second=20, burst=2, tenant_weights={"acme": 3})
    ask, _ = _script(redis_client, limit)
    state, now = FairState(), T0
    for _ in range(600):
        # Times on a millisecond grid: the script keeps microseconds, so no comparison
        # falls between the two's roundings.
        now += rnd.choice([0, 0, 0.001, 0.01, 0.05, 0.2])
        tenant = rnd.choice(["acme", "small", "other"])
        priority, create = rnd.randint(-2, 2), rnd.random() < 0.5
        weight = limit.tenant_weights.get(tenant, 1)
        state, pure = take(
            state,
            Ask(tenant=tenant, rank=rank(follow_up=not create, priority=priority), weight=weight),
            interval=1 / limit.requests_per_second,
            burst=limit.burst,
            now=round(now, 3),
        )
        token = ask(tenant, priority, create, round(now, 3))
        assert token.granted == pure.granted, (tenant, now - T0, token, pure)
        if pure.granted:
            assert token.at == pytest.approx(pure.at, abs=1e-5)
        else:
            assert token.retry_after == pytest.approx(pure.wait, abs=1e-5)


def _interleaved(ask: Asker, *, backlog: dict[str, int], seconds: float) -> dict[str, int]:
    """Each tenant keeps its backlog of requests asking, each back when it was told; A's
    300 waiting ask a hundred times as often as B's 3. Grants per tenant in the window."""
    counter = itertools.count()
    queue = [(T0, next(counter), tenant) for tenant, n in backlog.items() for _ in range(n)]
    heapq.heapify(queue)
    grants = dict.fromkeys(backlog, 0)
    for _ in range(50_000):  # bounded: the window needs a few thousand asks
        if queue[0][0] >= T0 + seconds:
            break
        now, _n, tenant = heapq.heappop(queue)
        token = ask(tenant, 0, False, now)
        if token.granted:
            grants[tenant] += 1
        heapq.heappush(
            queue, (now if token.granted else now + token.retry_after, next(counter), tenant)
        )
    return grants


def test_a_tenant_asking_a_hundred_times_as_often_leaves_the_other_its_fair_share(
    redis_client: Redis,
) -> None:
    limit = RateLimit(requests_per_second=20, burst=1)
    ask, _ = _script(redis_client, limit)
    grants = _interleaved(ask, backlog={"a": 300, "b": 3}, seconds=10)
    bound = share_bound(weight=1, active_weights=[1, 1], rate=20, burst=1, seconds=10)
    assert grants["b"] >= bound, grants
    assert sum(grants.values()) <= 20 * 10 + 1


def test_a_weighted_tenant_gets_its_weight_in_turns(redis_client: Redis) -> None:
    limit = RateLimit(requests_per_second=20, burst=1, tenant_weights={"acme": 3})
    ask, _ = _script(redis_client, limit)
    grants = _interleaved(ask, backlog={"acme": 30, "small": 300}, seconds=10)
    acme = share_bound(weight=3, active_weights=[3, 1], rate=20, burst=1, seconds=10)
    assert grants["acme"] >= acme, grants
    assert grants["small"] >= share_bound(
        weight=1, active_weights=[3, 1], rate=20, burst=1, seconds=10
    )


def test_the_script_counts_each_tenants_grants_and_waits(redis_client: Redis) -> None:
    limit = RateLimit(requests_per_second=10, burst=1)
    prefix = f"{os.environ['JOBWARDEN_KEY_PREFIX']}:{secrets.token_hex(4)}"
    key = f"{prefix}:rate:sandbox:anonymous"
    stem = f"{prefix}:rate-shares"
    told = 0.0
    for tenant in ("a", "a", "b", "a"):
        token = take_from(
            redis_client, key, limit, tenant=tenant, counted=(stem, "sandbox"), now=T0
        )
        told += token.retry_after
    counts = share_counts(redis_client, prefix)
    assert counts[("sandbox", "a")][0] == 1 and counts[("sandbox", "b")][0] == 0
    assert counts[("sandbox", "a")][1] + counts[("sandbox", "b")][1] == pytest.approx(told)
