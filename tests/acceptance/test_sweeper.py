"""The beat sweeper wakes parked operations with real Celery messages that real workers
run (issue 12, item 5): every one of a batch of parked, due operations is polled once
and finishes, with no message of its own but the sweeper's."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import update

from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import TimerRow
from tests.acceptance.conftest import Pipeline

pytestmark = pytest.mark.usefixtures("stack")

PARKED = 40


def test_every_parked_operation_that_comes_due_is_woken_by_the_sweeper_and_run(
    pipeline: Pipeline,
) -> None:
    # Retry-After 300 s on the create: far beyond the 3 s countdown limit, so each first
    # poll is parked in next_poll_at and only the sweeper can wake it.
    ops = [
        pipeline.submit({"create_retry_after": 300, "polls_to_finish": 1}) for _ in range(PARKED)
    ]
    for op in ops:
        row = pipeline.wait_state(op, "accepted", timeout=60)
        assert row.next_poll_at is not None and row.next_poll_at > row.updated_at
    assert all(pipeline.job_requests(op, "status") == [] for op in ops)
    # Move the clock for these rows: the Retry-After has passed, they are due, and no
    # wake-up was ever handed to the broker.
    ids = [uuid.UUID(op) for op in ops]
    with transaction(pipeline.database_url) as session:
        # The timer and the provider's hint live in the hot row, operation_timers (0033).
        session.execute(
            update(TimerRow)
            .where(TimerRow.operation_id.in_(ids))
            .values(
                next_poll_at=datetime.now(UTC) - timedelta(hours=1),
                dispatched_at=None,
                poll_not_before=datetime.now(UTC) - timedelta(hours=1),
            )
        )
    for op in ops:
        assert pipeline.wait_state(op, timeout=60).state == "succeeded"
    # Woken once each: one status request per operation, never a burst of duplicates.
    assert [len(pipeline.job_requests(op, "status")) for op in ops] == [1] * PARKED
