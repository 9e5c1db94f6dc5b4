"""Wake-up publishing against the real Redis broker: no result subscription per message,
and a sweeper that publishes claimed batches in pipelines and loops while they come back
full, within its time budget (issue 12, items 4 and 5).

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
from typing import Any

import pytest
from redis import Redis
from sqlalchemy import select, update

from jobwarden.config.celery_app import app
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import TimerRow
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.dispatch import enqueue
from jobwarden.tasks.pipeline import sweep_once
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
    base.redis.delete(_queue_key(settings.key_prefix, queue))


def _queue_key(prefix: str, queue: str) -> str:
    return f"{prefix}:celery:{queue}"


def _messages(rt: Runtime) -> list[dict[str, Any]]:
    """The queue's Celery messages (kombu's Redis envelope, protocol 2), oldest first."""
    raw = rt.redis.lrange(_queue_key(rt.settings.key_prefix, rt.settings.queue), 0, -1)
    out = []
    for item in reversed(raw):
        envelope = json.loads(item)
        args, kwargs, _embed = json.loads(base64.b64decode(envelope["body"]))
        out.append({"headers": envelope["headers"], "args": args, "kwargs": kwargs})
    return out


@pytest.fixture
def park(database_url: str) -> Iterator[Callable[..., list[uuid.UUID]]]:
    """park(count, state): rows due since 2000; unparked afterwards, so a row one test
    leaves due is never claimed by the next (or by another module's sweeps)."""
    parked: list[uuid.UUID] = []

    def _park(count: int, state: S = S.observing) -> list[uuid.UUID]:
        rows = [_new_row(state, next_poll_at=PARKED_AT, dispatched_at=None) for _ in range(count)]
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
    messages = _messages(rt)
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
    assert sorted(m["args"][0] for m in _messages(rt)) == sorted(str(op) for op in parked)


def test_the_sweeper_publishes_the_task_each_state_needs(
    rt: Runtime, park: Callable[..., list[uuid.UUID]]
) -> None:
    states = [S.create_pending, S.create_unknown, S.cancel_requested, S.result_collecting]
    by_id = {str(park(1, state)[0]): state for state in states}
    assert sweep_once(rt, clock=lambda: SWEEP_NOW) == 4
    tasks = {m["args"][0]: m["headers"]["task"] for m in _messages(rt)}
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
