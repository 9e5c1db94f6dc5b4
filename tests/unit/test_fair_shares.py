"""Fair shares at a provider's rate limit, purely: the slot arithmetic on an injected clock,
the weights' and the priority's rules (models/provider/fair_shares.py)."""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.errors import ContractError, InvalidSubmissionError
from jobwarden.models.provider.fair_shares import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    Ask,
    FairState,
    check_priority,
    rank,
    share_bound,
    take,
)
from tests.unit.test_contract_loader import write_sandbox

T0 = 1_800_000_000.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Tenant:
    name: str
    weight: int = 1
    backlog: int = 1  # requests asking at once; each granted one is replaced by the next


def run(
    tenants: list[Tenant],
    *,
    rate: float,
    burst: int,
    seconds: float,
    ranks: tuple[int, ...] = (rank(follow_up=True, priority=0),),
    first: str | None = None,
) -> tuple[dict[str, list[float]], list[float]]:
    """Every tenant keeps ``backlog`` requests asking, each back exactly when it was told
    (the bound's premise); ties at one instant go to ``first`` first. Returns each
    tenant's grants (the token times) and all of them in order."""
    interval, state = 1.0 / rate, FairState()
    order = {t.name: (0 if t.name == first else 1) for t in tenants}
    weights = {t.name: t.weight for t in tenants}
    counter = itertools.count()
    queue = [
        (T0, order[t.name], next(counter), t.name, ranks[i % len(ranks)])
        for t in tenants
        for i in range(t.backlog)
    ]
    heapq.heapify(queue)
    grants: dict[str, list[float]] = {t.name: [] for t in tenants}
    every: list[float] = []
    for _ in range(200_000):  # bounded: far more asks than any example makes
        if not queue or queue[0][0] >= T0 + seconds:
            break
        now, o, _n, name, r = heapq.heappop(queue)
        state, answer = take(
            state,
            Ask(tenant=name, rank=r, weight=weights[name]),
            interval=interval,
            burst=burst,
            now=now,
        )
        if answer.granted:
            assert answer.at is not None
            grants[name].append(answer.at)
            every.append(answer.at)
            heapq.heappush(queue, (now, o, next(counter), name, r))
        else:
            heapq.heappush(queue, (now + answer.wait, o, next(counter), name, r))
    return grants, sorted(every)


def busiest_second(times: list[float]) -> int:
    return max(
        (sum(1 for u in times[i:] if u < t + 1.0 - 1e-9) for i, t in enumerate(times)), default=0
    )


@pytest.mark.parametrize("first", ["a", "b"])
def test_a_tenant_asking_a_hundred_times_as_often_gets_no_more_than_its_share(first: str) -> None:
    grants, _ = run(
        [Tenant(name="a", backlog=300), Tenant(name="b", backlog=3)],
        rate=20,
        burst=1,
        seconds=10,
        first=first,
    )
    bound = share_bound(weight=1, active_weights=[1, 1], rate=20, burst=1, seconds=10)
    assert bound == 96
    assert len(grants["b"]) >= bound
    assert len(grants["a"]) >= bound
    assert len(grants["a"]) + len(grants["b"]) <= 20 * 10 + 1


def test_weights_divide_the_rate_in_proportion() -> None:
    grants, _ = run(
        [Tenant(name="acme", weight=3, backlog=50), Tenant(name="small", backlog=50)],
        rate=20,
        burst=1,
        seconds=10,
    )
    assert len(grants["acme"]) == pytest.approx(150, abs=3)
    assert len(grants["small"]) == pytest.approx(50, abs=3)


def test_a_lone_tenant_has_the_whole_rate_and_the_burst() -> None:
    grants, every = run([Tenant(name="a", backlog=40)], rate=10, burst=3, seconds=5.05)
    assert len(grants["a"]) == 3 + 10 * 5  # the burst at once, then one every 0.1 s
    assert busiest_second(every) <= 10 + 3


def test_a_tenant_beaten_to_the_token_holds_the_next_one() -> None:
    interval = 0.1
    state, a = take(FairState(), Ask(tenant="a", rank=0), interval=interval, burst=1, now=T0)
    state, b = take(state, Ask(tenant="b", rank=0), interval=interval, burst=1, now=T0)
    assert a.granted and not b.granted and b.reserved
    assert b.wait == pytest.approx(interval)
    # a, back at that time, is over its share now that b is waiting; b takes the held token.
    state, a2 = take(state, Ask(tenant="a", rank=0), interval=interval, burst=1, now=T0 + interval)
    state, b2 = take(state, Ask(tenant="b", rank=0), interval=interval, burst=1, now=T0 + interval)
    assert not a2.granted and b2.granted and b2.at == pytest.approx(T0 + interval)


def test_within_a_tenant_a_higher_priority_is_told_an_earlier_time() -> None:
    interval, state = 0.1, FairState()
    state, first = take(
        state,
        Ask(tenant="a", rank=rank(follow_up=False, priority=0)),
        interval=interval,
        burst=1,
        now=T0,
    )
    assert first.granted
    waits: dict[int, list[float]] = {}
    for priority in (0, 0, 0, 5, 5, 5):
        state, answer = take(
            state,
            Ask(tenant="a", rank=rank(follow_up=False, priority=priority)),
            interval=interval,
            burst=1,
            now=T0,
        )
        waits.setdefault(priority, []).append(answer.wait)
    # The ones asked first were told their times first; every priority-5 one refused after
    # them is told a time ahead of any low one told after it, and none shares a time.
    later_low = take(
        state,
        Ask(tenant="a", rank=rank(follow_up=False, priority=0)),
        interval=interval,
        burst=1,
        now=T0,
    )[1]
    assert later_low.wait > max(waits[5])
    assert max(waits[5]) <= max(waits[0])
    assert waits[5] == sorted(set(waits[5])) and waits[0] == sorted(set(waits[0]))


def test_a_lower_rank_due_at_a_turn_yields_it_to_a_higher_one_told_to_come() -> None:
    interval, low, high = 0.1, rank(follow_up=False, priority=-5), rank(follow_up=False, priority=5)
    state, first = take(FairState(), Ask(tenant="a", rank=low), interval=interval, burst=1, now=T0)
    state, held = take(state, Ask(tenant="a", rank=low), interval=interval, burst=1, now=T0)
    state, queued = take(state, Ask(tenant="a", rank=low), interval=interval, burst=1, now=T0)
    state, jumped = take(state, Ask(tenant="a", rank=high), interval=interval, burst=1, now=T0)
    assert first.granted and held.reserved
    assert jumped.wait == pytest.approx(held.wait)  # the held token is the high one's now
    assert queued.wait == pytest.approx(2 * interval)
    # At the held token's time the low one that held it yields; the high one takes it.
    at = T0 + held.wait
    state, yielded = take(state, Ask(tenant="a", rank=low), interval=interval, burst=1, now=at)
    state, taken = take(state, Ask(tenant="a", rank=high), interval=interval, burst=1, now=at)
    assert not yielded.granted and taken.granted


def test_follow_ups_rank_above_creates_and_priority_orders_within_a_kind() -> None:
    assert rank(follow_up=True, priority=MIN_PRIORITY) > rank(
        follow_up=False, priority=MAX_PRIORITY
    )
    assert rank(follow_up=False, priority=1) > rank(follow_up=False, priority=0)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        (11, "priority must be from -10 to 10, got 11"),
        (-11, "priority must be from -10 to 10, got -11"),
        (True, "priority must be a whole number, got bool"),
        (1.5, "priority must be a whole number, got float"),
        ("3", "priority must be a whole number, got str"),
    ],
)
def test_a_priority_outside_its_range_is_refused_naming_priority(
    value: object, problem: str
) -> None:
    with pytest.raises(InvalidSubmissionError) as caught:
        check_priority(value)
    assert str(caught.value) == problem


def test_priority_defaults_to_zero_and_keeps_its_bounds() -> None:
    assert check_priority(None) == 0
    assert (check_priority(-10), check_priority(10)) == (-10, 10)


@pytest.mark.parametrize(
    ("weights", "field", "problem"),
    [
        ("{ acme = 0 }", "rate_limit.tenant_weights.acme", "must be from 1 to 1000, got 0"),
        ("{ acme = 1001 }", "rate_limit.tenant_weights.acme", "must be from 1 to 1000"),
        ("{ acme = 1.5 }", "rate_limit.tenant_weights.acme", "whole number, got a float"),
        ('{ acme = "3" }', "rate_limit.tenant_weights.acme", "whole number, got a string"),
        ("[1, 2]", "rate_limit.tenant_weights", "must be a table of tenant = weight"),
    ],
)
def test_tenant_weights_are_validated_naming_the_tenant(
    tmp_path: Path, weights: str, field: str, problem: str
) -> None:
    path = write_sandbox(
        tmp_path,
        "[limits]",
        f"[rate_limit]\nrequests_per_second = 5\ntenant_weights = {weights}\n\n[limits]",
    )
    with pytest.raises(ContractError) as caught:
        load_contract(path)
    assert caught.value.field == field, caught.value
    assert problem in caught.value.problem


def test_tenant_weights_load_into_the_rate_limit(tmp_path: Path) -> None:
    path = write_sandbox(
        tmp_path,
        "[limits]",
        "[rate_limit]\nrequests_per_second = 5\ntenant_weights = { acme = 3 }\n\n[limits]",
    )
    limit = load_contract(path).rate_limit
    assert limit is not None and dict(limit.tenant_weights) == {"acme": 3}


TENANTS = st.lists(
    st.builds(
        Tenant,
        name=st.just(""),
        weight=st.integers(min_value=1, max_value=5),
        backlog=st.sampled_from([1, 3, 30, 150]),
    ),
    min_size=1,
    max_size=4,
).map(
    lambda ts: [Tenant(name=f"t{i}", weight=t.weight, backlog=t.backlog) for i, t in enumerate(ts)]
)


@settings(max_examples=60, deadline=None)
@given(
    tenants=TENANTS,
    rate=st.sampled_from([5.0, 20.0, 50.0]),
    burst=st.integers(min_value=1, max_value=3),
    seconds=st.sampled_from([2.0, 5.0, 10.0]),
    ranks=st.lists(
        st.builds(rank, follow_up=st.booleans(), priority=st.integers(-2, 2)),
        min_size=1,
        max_size=4,
    ).map(tuple),
    first=st.sampled_from([None, "t0", "t1"]),
)
def test_no_tenant_with_work_waiting_gets_less_than_its_bound_nor_all_more_than_the_rate(
    tenants: list[Tenant],
    rate: float,
    burst: int,
    seconds: float,
    ranks: tuple[int, ...],
    first: str | None,
) -> None:
    grants, every = run(tenants, rate=rate, burst=burst, seconds=seconds, ranks=ranks, first=first)
    weights = [t.weight for t in tenants]
    for t in tenants:
        bound = share_bound(
            weight=t.weight, active_weights=weights, rate=rate, burst=burst, seconds=seconds
        )
        assert len(grants[t.name]) >= bound, (t, len(grants[t.name]), bound)
    # The hard bound: no one-second window holds more than the rate plus the burst, and
    # the whole window no more than its tokens plus the burst.
    assert busiest_second(every) <= rate + burst
    assert len(every) <= math.floor(rate * seconds) + burst
