"""Wake-up publishing against the real Redis broker: no result subscription per message,
and a sweeper that publishes claimed batches in pipelines and loops while they come back
full, within its time budget (issue 12, items 4 and 5). Wake-ups at a rate-limited
provider go out at their tenant's fair level and are taken in that order (issue 39).

The rows are parked in the year 2000 and the sweeper's clock is injected to 2000-01-02,
so only these rows are due; the messages go to a private queue read back from Redis.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import secrets
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from queue import Empty
from typing import Any

import pytest
from redis import Redis
from sqlalchemy import select, update

from jobwarden.config.celery_app import app
from jobwarden.models.contracts.contract import RateLimit
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import TimerRow
from jobwarden.models.provider.wakeup_levels import LEVELS
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.dispatch import enqueue
from jobwarden.tasks.pipeline import sweep_once
from jobwarden.tasks.provider.wakeup_backlog import HEADER, Owner, counter_key, started
from jobwarden.tasks.runtime import Runtime, current
from tests.integration.test_store import _insert, _new_row

PARKED_AT = datetime(2000, 1, 1, tzinfo=UTC)
SWEEP_NOW = datetime(2000, 1, 2, tzinfo=UTC)


@pytest.fixture
def rt(database_url: str) -> Iterator[Runtime]:
    """The process runtime with a private queue and a sweep batch of two rows."""
    base = current()
    queue = f"{base.settings.queue}-wakeups-{secrets.token_hex(3)}"
    settings = base.settings.model_copy(update={"queue": queue, "sweep_batch_size": 2})
    yield dataclasses.replace(base, settings=settings)
    base.redis.delete(*(_queue_key(settings.key_prefix, queue, n) for n in range(LEVELS)))


def _queue_key(prefix: str, queue: str, at_level: int = 0) -> str:
    # kombu's Redis transport: level 0 is the queue's own list, level n its "<queue>\x06\x16n".
    return f"{prefix}:celery:{queue}" + (f"\x06\x16{at_level}" if at_level else "")


def _messages(rt: Runtime, of: list[uuid.UUID] | None = None) -> list[dict[str, Any]]:
    """The queue's Celery messages (kombu's Redis envelope, protocol 2), oldest first.

    ``of``: only the wake-ups of these operations. A sweep ends with its stranded-queue
    pass, which admits whatever concurrency queue another test in this process's database
    left with room and publishes it here too; claims are pinned by sweep_once's count.
    """
    raw = rt.redis.lrange(_queue_key(rt.settings.key_prefix, rt.settings.queue), 0, -1)
    wanted = None if of is None else {str(op) for op in of}
    out = []
    for item in reversed(raw):
        envelope = json.loads(item)
        args, kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        if wanted is None or args[0] in wanted:
            out.append({"headers": envelope["headers"], "args": args, "kwargs": kwargs})
    return out


@pytest.fixture
def park(database_url: str) -> Iterator[Callable[..., list[uuid.UUID]]]:
    """park(count, state, **columns): rows due since 2000; unparked afterwards, so a row one test
    leaves due is never claimed by the next (or by another module's sweeps)."""
    parked: list[uuid.UUID] = []

    def _park(count: int, state: S = S.observing, **overrides: Any) -> list[uuid.UUID]:
        rows = [
            _new_row(state, next_poll_at=PARKED_AT, dispatched_at=None, **overrides)
            for _ in range(count)
        ]
        ids = [_insert(database_url, row) for row in rows]
        parked.extend(ids)
        return ids

    yield _park
    with transaction(database_url) as session:
        session.execute(
            update(TimerRow).where(TimerRow.operation_id.in_(parked)).values(next_poll_at=None)
        )


def _result_channels(redis: Redis) -> set[bytes | str]:
    prefix = current().settings.key_prefix
    return set(redis.pubsub_channels(f"{prefix}:celery:celery-task-meta-*"))


def test_a_published_wake_up_subscribes_to_no_result_channel(rt: Runtime) -> None:
    before = _result_channels(rt.redis)
    assert enqueue(rt, uuid.uuid4(), S.observing)
    assert _result_channels(rt.redis) == before
    # The probe can see a subscription: a send that keeps its result makes one.
    kept = app.send_task("jobwarden.poll", args=[str(uuid.uuid4())], queue=rt.settings.queue)
    try:
        assert len(_result_channels(rt.redis) - before) == 1
    finally:
        app.backend.result_consumer.cancel_for(kept.id)


def test_one_sweep_wakes_every_due_row_while_its_batches_come_back_full(
    rt: Runtime, database_url: str, park: Callable[..., list[uuid.UUID]]
) -> None:
    parked = park(5)
    assert sweep_once(rt, clock=lambda: SWEEP_NOW) == 5
    messages = _messages(rt, of=parked)
    assert sorted(m["args"][0] for m in messages) == sorted(str(op) for op in parked)
    # Real Celery task messages, as a worker reads them: the task, the id, no result.
    assert {m["headers"]["task"] for m in messages} == {"jobwarden.poll"}
    assert all(m["headers"]["ignore_result"] is True for m in messages)
    with transaction(database_url) as session:
        marked = session.scalars(
            select(TimerRow.dispatched_at).where(TimerRow.operation_id.in_(parked))
        ).all()
    assert marked == [SWEEP_NOW] * 5
    # Claimed rows are not claimed again before redispatch_after_seconds.
    assert sweep_once(rt, clock=lambda: SWEEP_NOW) == 0


def test_a_sweep_stops_at_its_time_budget_and_leaves_the_rest_for_the_next(
    rt: Runtime, database_url: str, park: Callable[..., list[uuid.UUID]]
) -> None:
    parked = park(5)
    assert sweep_once(rt, clock=lambda: SWEEP_NOW, budget_seconds=0) == 2
    assert sweep_once(rt, clock=lambda: SWEEP_NOW, budget_seconds=0) == 2
    assert sweep_once(rt, clock=lambda: SWEEP_NOW, budget_seconds=0) == 1
    assert sorted(m["args"][0] for m in _messages(rt, of=parked)) == sorted(
        str(op) for op in parked
    )


def test_the_sweeper_publishes_the_task_each_state_needs(
    rt: Runtime, park: Callable[..., list[uuid.UUID]]
) -> None:
    states = [S.create_pending, S.create_unknown, S.cancel_requested, S.result_collecting]
    by_id = {str(park(1, state)[0]): state for state in states}
    assert sweep_once(rt, clock=lambda: SWEEP_NOW) == 4
    ours = [uuid.UUID(op) for op in by_id]
    tasks = {m["args"][0]: m["headers"]["task"] for m in _messages(rt, of=ours)}
    assert tasks == {
        op: {
            S.create_pending: "jobwarden.create",
            S.create_unknown: "jobwarden.reconcile",
            S.cancel_requested: "jobwarden.cancel",
            S.result_collecting: "jobwarden.collect",
        }[state]
        for op, state in by_id.items()
    }


def test_the_broker_channel_keeps_one_redis_client_per_pool_and_still_delivers(
    rt: Runtime,
) -> None:
    from jobwarden.config import broker

    assert broker.transport_for("redis://127.0.0.1:6379/0") == "jobwarden.config.broker:Transport"
    # TLS and sentinel URLs keep kombu's own transport (its ssl and failover handling).
    assert broker.transport_for("rediss://127.0.0.1:6380/0") is None
    assert broker.transport_for("sentinel://127.0.0.1:26379") is None
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        assert isinstance(channel, broker.Channel)
        first = channel._create_client()
        assert channel._create_client() is first  # kombu's own builds one per call
        channel._disconnect_pools()  # type: ignore[no-untyped-call]  # kombu's reconnect
        rebuilt = channel._create_client()
        assert rebuilt is not first and rebuilt.connection_pool is channel.pool
    ids = [uuid.uuid4() for _ in range(3)]
    assert all(enqueue(rt, op, S.observing) for op in ids)
    assert [m["args"][0] for m in _messages(rt)] == [str(op) for op in ids]


def _limited(rt: Runtime, weights: dict[str, int] | None = None) -> Runtime:
    """``rt`` whose sandbox contract has a [rate_limit] (the integration contracts have none)."""
    sandbox = rt.contracts["sandbox"]
    limit = RateLimit(requests_per_second=20.0, burst=1, tenant_weights=weights or {})
    return dataclasses.replace(
        rt, contracts={**rt.contracts, "sandbox": dataclasses.replace(sandbox, rate_limit=limit)}
    )


@pytest.fixture
def limited(rt: Runtime) -> Runtime:
    return _limited(rt)


def _levels(rt: Runtime) -> dict[str, int]:
    """Each waiting wake-up's operation id and the level it was published at."""
    found: dict[str, int] = {}
    for n in range(LEVELS):
        key = _queue_key(rt.settings.key_prefix, rt.settings.queue, n)
        for item in rt.redis.lrange(key, 0, -1):
            envelope = json.loads(item)
            args, _, _ = json.loads(base64.b64decode(envelope["body"]))
            assert envelope["properties"]["priority"] == n
            found[args[0]] = n
    return found


def _taken(rt: Runtime) -> list[str]:
    """The queue's wake-ups in the order kombu's own channel hands them to a worker."""
    order: list[str] = []
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        for _ in range(100):
            try:
                message = channel._get(rt.settings.queue)
            except Empty:
                return order
            args, _, _ = json.loads(base64.b64decode(message["body"]))
            order.append(args[0])
    raise AssertionError("more wake-ups than published")


def _count(value: bytes | str | None) -> int:
    assert value is not None
    return int(value)


def test_a_tenants_waiting_wake_ups_go_further_back_and_a_small_tenants_go_first(
    limited: Runtime,
) -> None:
    big, small = f"big-{secrets.token_hex(3)}", f"small-{secrets.token_hex(3)}"
    bigs = [uuid.uuid4() for _ in range(8)]
    smalls = [uuid.uuid4() for _ in range(2)]
    for op in bigs:
        assert enqueue(limited, op, S.create_pending, owner=Owner(provider="sandbox", tenant=big))
    for op in smalls:
        assert enqueue(limited, op, S.create_pending, owner=Owner(provider="sandbox", tenant=small))
    levels = _levels(limited)
    # The n-th waiting wake-up of a tenant at level floor(log2 n).
    assert [levels[str(op)] for op in bigs] == [0, 1, 1, 2, 2, 2, 2, 3]
    assert [levels[str(op)] for op in smalls] == [0, 1]
    # Taken by level, then in publishing order: the small tenant's two are not behind the
    # big tenant's eight.
    assert _taken(limited) == [
        str(op) for op in (bigs[0], smalls[0], bigs[1], bigs[2], smalls[1], *bigs[3:])
    ]
    # Every one counted until a worker starts it.
    prefix = limited.settings.key_prefix
    assert (
        _count(limited.redis.get(counter_key(prefix, Owner(provider="sandbox", tenant=big)))) == 8
    )


def test_weight_and_priority_move_a_wake_up_within_its_tenants_levels(rt: Runtime) -> None:
    heavy, tenant = f"heavy-{secrets.token_hex(3)}", f"prio-{secrets.token_hex(3)}"
    limited = _limited(rt, {heavy: 2})
    heavies = [uuid.uuid4() for _ in range(4)]
    for op in heavies:
        assert enqueue(limited, op, S.observing, owner=Owner(provider="sandbox", tenant=heavy))
    ranked = [(uuid.uuid4(), p) for p in (0, 0, 0, 5, -5)]
    for op, priority in ranked:
        owner = Owner(provider="sandbox", tenant=tenant, priority=priority)
        assert enqueue(limited, op, S.observing, owner=owner)
    levels = _levels(limited)
    # Weight 2: two waiting wake-ups per level step.
    assert [levels[str(op)] for op in heavies] == [0, 0, 1, 1]
    # The 4th (priority 5) one level ahead of its count's, the 5th (priority -5) one behind.
    assert [levels[str(op)] for op, _ in ranked] == [0, 1, 1, 1, 3]


def test_a_provider_without_a_rate_limit_keeps_every_wake_up_at_the_front_uncounted(
    rt: Runtime,
) -> None:
    tenant = f"free-{secrets.token_hex(3)}"
    ops = [uuid.uuid4() for _ in range(4)]
    for op in ops:
        assert enqueue(rt, op, S.observing, owner=Owner(provider="sandbox", tenant=tenant))
    assert _levels(rt) == {str(op): 0 for op in ops}
    assert all(HEADER not in m["headers"] for m in _messages(rt))
    key = counter_key(rt.settings.key_prefix, Owner(provider="sandbox", tenant=tenant))
    assert rt.redis.get(key) is None


def test_a_started_wake_up_is_uncounted_by_its_header_and_never_below_zero(
    limited: Runtime,
) -> None:
    owner = Owner(provider="sandbox", tenant=f"start-{secrets.token_hex(3)}")
    op = uuid.uuid4()
    assert enqueue(limited, op, S.observing, owner=owner)
    (message,) = _messages(limited)
    key = counter_key(limited.settings.key_prefix, owner)
    assert message["headers"][HEADER] == key
    assert _count(limited.redis.get(key)) == 1
    # The worker's side: the task uncounts what its message's header names, before it runs.
    task = app.tasks["jobwarden.poll"]
    task.push_request(**{HEADER: key})
    try:
        task.before_start("id", [str(op)], {})
    finally:
        task.pop_request()
    assert _count(limited.redis.get(key)) == 0
    # A redelivered message is started twice: the count stops at zero.
    started(limited, key)
    assert _count(limited.redis.get(key)) == 0
    assert limited.redis.ttl(key) > 0
    # A header that names no counter of ours is ignored.
    started(limited, "elsewhere:key")


def test_the_sweeper_places_each_due_row_by_its_tenants_backlog(
    limited: Runtime, database_url: str, park: Callable[..., list[uuid.UUID]]
) -> None:
    big, small = f"big-{secrets.token_hex(3)}", f"small-{secrets.token_hex(3)}"
    bigs = park(4, tenant=big)
    smalls = park(1, tenant=small)
    assert sweep_once(limited, clock=lambda: SWEEP_NOW) == 5
    levels = _levels(limited)
    assert sorted(levels[str(op)] for op in bigs) == [0, 1, 1, 2]
    assert [levels[str(op)] for op in smalls] == [0]


def test_a_process_declares_its_wake_up_queue_once_not_before_every_publish(
    rt: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kombu.entity import Queue
    from kombu.messaging import Producer

    declared: list[str] = []
    declare = Producer.maybe_declare

    def counting(self: Producer, entity: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(entity, Queue):
            declared.append(entity.name)
        # kombu is untyped: the original method, called through as the producer would.
        return declare(self, entity, *args, **kwargs)  # type: ignore[no-untyped-call]

    monkeypatch.setattr(Producer, "maybe_declare", counting)
    ids = [uuid.uuid4() for _ in range(3)]
    assert all(enqueue(rt, op, S.observing) for op in ids)
    assert declared == [rt.settings.queue]
    assert [m["args"][0] for m in _messages(rt)] == [str(op) for op in ids]


def test_wake_ups_still_arrive_after_the_broker_lost_the_queues_declaration(
    rt: Runtime,
) -> None:
    first = uuid.uuid4()
    assert enqueue(rt, first, S.observing)
    # As after a Redis restart without persistence: the queue's binding table is gone.
    binding = f"{rt.settings.key_prefix}:celery:_kombu.binding.{rt.settings.queue}"
    assert rt.redis.delete(binding) == 1
    later = [uuid.uuid4() for _ in range(2)]
    sent = [enqueue(rt, op, S.observing) for op in later]
    # Delivered, or refused once (the sweeper re-sends it) and declared again by the next.
    assert sent[-1]
    delivered = [m["args"][0] for m in _messages(rt)]
    assert delivered[0] == str(first) and delivered[-1] == str(later[-1])
