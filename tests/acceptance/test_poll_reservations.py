"""The reserved status request under worker kills (DESIGN, cost of one poll; invariant 3).

A decision's commit counts the next status request; the next poll sends it with no claim
commit and records it with its answer. A worker SIGKILLed after the commit, after the send
or before the record must leave an unused or already-counted reservation — never a request
the counters miss (the sandbox's request log is the truth) and never a reservation spent
twice. The pipeline fixture verifies every history afterwards.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
import uuid
from collections.abc import Callable
from itertools import pairwise
from typing import Any, cast

import pytest
from redis import Redis

from jobwarden.demo.harness import wait_for
from jobwarden.tasks.runtime import close as close_runtime
from tests.acceptance.conftest import Pipeline

pytestmark = pytest.mark.usefixtures("stack")


def test_a_run_without_faults_sends_each_reserved_request_with_one_event_per_poll(
    pipeline: Pipeline,
) -> None:
    op = pipeline.submit({"polls_to_finish": 5})
    row = pipeline.wait_state(op)
    assert row.state == "succeeded"
    statuses = pipeline.job_requests(op, "status")
    assert len(statuses) == 5 == row.status_requests_used
    kinds = pipeline.kinds(op)
    # No claim commits: every request was reserved by the decision before it ...
    assert "poll_sent" not in kinds
    # ... and each pending answer is one event holding the request, the answer and the wait.
    assert kinds.count("polled") == 4
    assert pipeline.recorded_status_requests(op) == [1, 2, 3, 4, 5]


def test_a_worker_killed_after_sending_a_reserved_request_never_spends_it_again(
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    key = secrets.token_hex(8)
    arm("after_poll_response", key, "kill")
    op = pipeline.submit({"polls_to_finish": 2}, key=key)
    wait_for(lambda: fired("after_poll_response", key), timeout=20, what="the kill after a send")
    row = pipeline.wait_state(op, timeout=40)
    assert row.state == "succeeded"
    statuses = pipeline.job_requests(op, "status")
    # The killed worker's request reached the provider and was counted by its reservation;
    # the redelivered poll claimed a fresh one: every request sent is counted, none twice.
    assert len(statuses) == 2 == row.status_requests_used
    recorded = pipeline.recorded_status_requests(op)
    assert recorded == [2]  # the answer to request 1 died with the worker
    claims = [e.draft for e in pipeline.events(op) if e.draft.kind.value == "poll_sent"]
    assert [c.excerpt["request"] for c in claims] == [2]


def test_a_worker_killed_after_committing_a_poll_decision_sends_nothing_early_or_uncounted(
    pipeline: Pipeline,
    arm: Callable[..., None],
    fired: Callable[[str, str], int | None],
) -> None:
    key = secrets.token_hex(8)
    op = pipeline.submit({"polls_to_finish": 3, "retry_after": 1}, key=key)
    pipeline.wait_state(op, "observing")
    # Armed now, the kill lands after a poll's commit (its decision and the next
    # reservation) and before that poll publishes its wake-up.
    arm("before_schedule", key, "kill")
    wait_for(lambda: fired("before_schedule", key), timeout=20, what="the kill after a commit")
    row = pipeline.wait_state(op, timeout=60)
    assert row.state == "succeeded"
    statuses = pipeline.job_requests(op, "status")
    assert len(statuses) == 3
    # At most the reservation whose wake-up was lost stays counted and unused.
    assert row.status_requests_used - len(statuses) in (0, 1)
    gaps = [b["monotonic"] - a["monotonic"] for a, b in pairwise(statuses)]
    assert all(g >= 1 - 0.05 for g in gaps), gaps  # Retry-After held across the kill


def _submitted(rt: Any) -> uuid.UUID:
    """An export of three polls submitted in-process, on ``rt``'s (unread) queue."""
    from jobwarden.tasks.intake import submit_operation

    answer = submit_operation(
        tenant="acceptance",
        provider="sandbox",
        idempotency_key=secrets.token_hex(8),
        command={"kind": "export", "behaviour": {"polls_to_finish": 3}},
        requested_by="pytest",
        runtime=rt,
    )
    assert answer.operation_id is not None
    return uuid.UUID(answer.operation_id)


def test_a_reservation_marked_as_spent_is_never_sent_again_unclaimed(
    pipeline: Pipeline, worker_env: dict[str, str]
) -> None:
    # Driven in-process on a queue no worker reads, so the marker alone decides: a poll
    # whose reserved request an earlier attempt marked (and may have sent) claims a fresh
    # one. The sweeper's redispatch would retire the reservation too; it never runs here.
    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence.db import step_session
    from jobwarden.models.persistence.store import load
    from jobwarden.models.steps import CREATE, POLL
    from jobwarden.tasks.reservations import spend_once
    from jobwarden.tasks.runtime import build_runtime, utcnow
    from jobwarden.tasks.steps import run

    settings = get_settings().model_copy(update={"queue": f"unread-{secrets.token_hex(4)}"})
    rt = build_runtime(settings)
    op_id = _submitted(rt)
    with step_session(settings.database_url) as session:
        op = load(session, op_id)
        assert op is not None
        op, _ = run(rt, op, CREATE, session)
        assert (op.state.value, op.reserved_request, op.status_requests_used) == (
            "accepted",
            1,
            1,
        )
        ttl = 2 * settings.visibility_timeout_seconds
        assert spend_once(rt.redis, settings.key_prefix, op_id, 1, ttl)  # "sent, then died"
        due = op.next_poll_at
        assert due is not None
        wait_for(lambda: utcnow() >= due, timeout=10, what="the first poll to be due")
        op, _ = run(rt, op, POLL, session)
    # Request 1 stays counted, unused; request 2 was claimed and sent; 3 is reserved next.
    assert (op.status_requests_used, op.reserved_request) == (3, 3)
    claims = [e.draft for e in pipeline.events(str(op_id)) if e.draft.kind.value == "poll_sent"]
    assert [c.excerpt["request"] for c in claims] == [2]
    assert claims[0].cause is not None and "is not reused" in claims[0].cause
    assert len(pipeline.job_requests(str(op_id), "status")) == 1
    rt.redis.close()
    close_runtime(rt)


class _CountingRedis(Redis):
    """The real Redis client, noting each command it sends (EVALSHA by script digest)."""

    sent: list[str]

    def execute_command(self, *args: Any, **options: Any) -> Any:
        name = str(args[0]).upper()
        self.sent.append(f"EVALSHA {args[1]}" if name == "EVALSHA" else name)
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


def test_a_poll_spends_the_reservation_its_lease_marked_with_no_redis_call_before_the_send(
    pipeline: Pipeline, worker_env: dict[str, str]
) -> None:
    # In-process on a queue no worker reads, the way _run_step drives a step: the create's
    # commit reserves request 1 and its lease announces it as it lets go; the poll's lease
    # marks it as it is acquired, so between the lease and the send nothing else goes to
    # Redis.
    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence.db import step_session
    from jobwarden.models.persistence.store import load
    from jobwarden.models.steps import CREATE, POLL
    from jobwarden.tasks import leases, reservations
    from jobwarden.tasks.reservations import marker_ttl
    from jobwarden.tasks.runtime import build_runtime, utcnow
    from jobwarden.tasks.steps import run

    settings = get_settings().model_copy(update={"queue": f"unread-{secrets.token_hex(4)}"})
    counting = cast(_CountingRedis, _CountingRedis.from_url(settings.redis_url))
    counting.sent = []
    rt = dataclasses.replace(build_runtime(settings), redis=counting)
    op_id = _submitted(rt)

    def step(kind: Any) -> Any:
        with (
            leases.step_lease(rt.redis, settings.key_prefix, op_id, 30, marker_ttl(rt)) as lease,
            step_session(settings.database_url) as session,
        ):
            op = load(session, op_id)
            assert op is not None
            op, _ = run(rt, op, kind, session, lease)
        return lease, op

    _, op = step(CREATE)
    assert (op.state.value, op.reserved_request) == ("accepted", 1)
    due = op.next_poll_at
    assert due is not None
    wait_for(lambda: utcnow() >= due, timeout=10, what="the first poll to be due")
    counting.sent.clear()
    lease, op = step(POLL)
    assert (lease.marked, lease.sent_marked) == (1, True)
    spend_once = f"EVALSHA {hashlib.sha1(reservations._SPEND_ONCE.encode()).hexdigest()}"
    assert spend_once not in counting.sent
    acquire, release = (
        f"EVALSHA {hashlib.sha1(script.encode()).hexdigest()}"
        for script in (leases._ACQUIRE, leases._RELEASE)
    )
    assert counting.sent[0] == acquire and counting.sent[-1] == release
    # Request 1 was sent once and recorded with its answer; request 2 is reserved next.
    assert (op.status_requests_used, op.reserved_request) == (2, 2)
    assert pipeline.recorded_status_requests(str(op_id)) == [1]
    assert len(pipeline.job_requests(str(op_id), "status")) == 1
    assert reservations.spent(rt.redis, settings.key_prefix, op_id, 1)
    counting.close()
    close_runtime(rt)


def _reserved(pipeline: Pipeline, op: str) -> list[Any]:
    return [
        e.draft.excerpt["reserved_request"]
        for e in pipeline.events(op)
        if "reserved_request" in (e.draft.excerpt or {})
    ]


def test_every_reservation_is_named_in_the_history_by_the_decision_that_made_it(
    pipeline: Pipeline,
) -> None:
    op = pipeline.submit({"polls_to_finish": 3})
    assert pipeline.wait_state(op).state == "succeeded"
    assert _reserved(pipeline, op) == [1, 2, 3]
