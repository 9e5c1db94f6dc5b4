"""The shared rate limiter's Lua script against the real Redis, on an injected clock."""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis import Redis

from jobwarden.models.contracts.contract import RateLimit
from jobwarden.tasks.provider.rate_limits import bucket_key, take, take_from
from tests.unit.factories import contract

T0 = 1_800_000_000.0  # an injected Redis-clock second, far from the epoch like the real one


@pytest.fixture
def redis_client() -> Iterator[Redis]:
    client = Redis.from_url(os.environ["JOBWARDEN_TEST_REDIS_URL"])
    yield client
    client.close()


def _key() -> str:
    return f"{os.environ['JOBWARDEN_KEY_PREFIX']}:rate:test:{secrets.token_hex(6)}"


def test_a_full_bucket_grants_the_burst_then_refuses_until_the_next_token(
    redis_client: Redis,
) -> None:
    limit, key = RateLimit(requests_per_second=5, burst=2), _key()
    assert [take_from(redis_client, key, limit, now=T0).granted for _ in range(2)] == [True] * 2
    refused = take_from(redis_client, key, limit, now=T0)
    assert not refused.granted
    assert refused.retry_after == pytest.approx(0.2)
    assert take_from(redis_client, key, limit, now=T0 + 0.2).granted


def test_a_grant_says_when_on_the_limiters_clock(redis_client: Redis) -> None:
    limit, key = RateLimit(requests_per_second=5, burst=2), _key()
    assert [take_from(redis_client, key, limit, now=T0).at for _ in range(2)] == [T0, T0]
    assert take_from(redis_client, key, limit, now=T0).at is None  # refused: no grant, no time
    seconds, micros = redis_client.time()
    at = take_from(redis_client, _key(), limit).at  # Redis's own TIME
    assert at is not None and 0 <= at - (seconds + micros / 1e6) < 5


def test_requests_refused_together_are_told_to_come_back_one_interval_apart(
    redis_client: Redis,
) -> None:
    limit, key = RateLimit(requests_per_second=5, burst=1), _key()
    assert take_from(redis_client, key, limit, now=T0).granted
    waits = [take_from(redis_client, key, limit, now=T0).retry_after for _ in range(4)]
    assert waits == pytest.approx([0.2, 0.4, 0.6, 0.8])
    # Each one, back at its time, finds its token.
    assert all(take_from(redis_client, key, limit, now=T0 + w).granted for w in waits)


def test_a_refused_follow_up_is_told_a_time_ahead_of_the_creates_already_waiting(
    redis_client: Redis,
) -> None:
    limit, key = RateLimit(requests_per_second=5, burst=1), _key()
    assert take_from(redis_client, key, limit, create=True, now=T0).granted
    creates = [
        take_from(redis_client, key, limit, create=True, now=T0).retry_after for _ in range(3)
    ]
    assert creates == pytest.approx([0.2, 0.4, 0.6])
    status = take_from(redis_client, key, limit, now=T0 + 0.01)
    assert status.retry_after == pytest.approx(0.19)  # the next free token, not the fourth
    # Creates refused later still queue behind both.
    assert take_from(redis_client, key, limit, create=True, now=T0).retry_after == pytest.approx(
        0.8
    )


def test_a_bucket_redis_lost_exceeds_the_limit_by_at_most_the_burst_once(
    redis_client: Redis,
) -> None:
    limit, key = RateLimit(requests_per_second=5, burst=2), _key()

    def granted_within(start: float, seconds: float) -> int:
        steps = int(seconds * 100)
        return sum(
            take_from(redis_client, key, limit, now=start + i / 100).granted for i in range(steps)
        )

    assert granted_within(T0, 1.0) == 2 + 4  # a full bucket, then one per 0.2 s
    steady = granted_within(T0 + 1.0, 1.0)
    # Redis restarted empty, or was flushed: every key of the bucket is gone.
    redis_client.delete(*redis_client.keys(f"{key}*"))
    lost = granted_within(T0 + 2.0, 1.0)
    assert steady == 5
    assert lost == steady + limit.burst - 1  # a full bucket again: the burst, once
    assert granted_within(T0 + 3.0, 1.0) == steady


def test_a_contract_without_a_rate_limit_never_asks_redis() -> None:
    # A client whose every command would fail: the grant cannot have come from it.
    dead = Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.1)
    assert take(dead, "p", contract("sandbox"), tenant="t").granted


def test_the_bucket_is_keyed_by_provider_and_credential_reference() -> None:
    sandbox = contract("sandbox")
    assert bucket_key("p", sandbox) == "p:rate:sandbox:env:JOBWARDEN_SANDBOX_TOKEN"
    assert bucket_key("p", replace(sandbox, auth=None)) == "p:rate:sandbox:anonymous"


def test_the_redis_clock_is_used_when_none_is_injected(redis_client: Redis) -> None:
    limited = replace(contract("sandbox"), rate_limit=RateLimit(requests_per_second=1, burst=1))
    prefix = f"{os.environ['JOBWARDEN_KEY_PREFIX']}:{secrets.token_hex(4)}"
    assert take(redis_client, prefix, limited, tenant="t").granted
    refused = take(redis_client, prefix, limited, tenant="t")
    assert not refused.granted
    assert 0 < refused.retry_after <= 1.0
    assert redis_client.pttl(bucket_key(prefix, limited)) > 0  # the state expires by itself


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rate=st.sampled_from([1.0, 2.5, 5.0, 20.0]),
    burst=st.integers(min_value=1, max_value=4),
    gaps=st.lists(st.floats(min_value=0, max_value=0.5), min_size=1, max_size=120),
)
def test_no_one_second_window_grants_more_than_the_rate_plus_the_burst(
    redis_client: Redis, rate: float, burst: int, gaps: list[float]
) -> None:
    limit, key = RateLimit(requests_per_second=rate, burst=burst), _key()
    now, granted = T0, []
    for gap in gaps:
        now += gap
        token = take_from(redis_client, key, limit, now=now)
        if token.granted:
            assert token.at is not None and token.at <= now + 1e-6  # kept to the microsecond
            granted.append(token.at)  # the token's own time (a held one's: when it was held)
    for i, start in enumerate(granted):
        in_window = [t for t in granted[i:] if t < start + 1.0]
        assert len(in_window) <= rate + burst, (start, in_window)
