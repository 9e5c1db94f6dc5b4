"""Archiving old history while the workers run: a month's partition detached and dropped
while other operations poll, and an archiving run killed midway then completed.

The archive runs as `jobwarden archive` in its own process against the run's database,
where the workers poll; the old months are years in the past, so only this test's
operations are in them (archiving acts on every month older than the retention).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text

from jobwarden.demo.harness import wait_for
from jobwarden.models.persistence import history_store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from tests.acceptance.conftest import Pipeline
from tests.cli_runner import CliResult, run_cli_process
from tests.integration.test_history_archive import _cli_on, _month, _operation

# Each test starts up to seven `jobwarden` runs (archive, verify); on a busy machine a
# CLI's start alone took over ten seconds, so 120 s was not a bound on the work but a race.
pytestmark = pytest.mark.timeout(360)


def _killable_on(url: str, *args: str) -> CliResult:
    """A real `jobwarden` process on ``url``: an armed "kill" fault point kills the process
    that reaches it, which in process would be the test run itself."""
    return run_cli_process(*args, env={"JOBWARDEN_DATABASE_URL": url})


def _archived_rows(url: str, partition: str) -> int:
    with transaction(url) as session:
        return history_store.archived_counts(session).get(partition, 0)


def _attached(url: str, partition: str) -> bool:
    with transaction(url) as session:
        return partition in {p.name for p in history_store.partitions(session)}


def _verified_from_archive(url: str, ops: list[uuid.UUID]) -> None:
    for op in ops:
        answer = _cli_on(url, "verify", str(op))
        assert answer.stdout.strip() == "chain verified from archive: 3 events", answer.stderr


def test_a_month_is_archived_and_dropped_while_workers_poll_other_operations(
    pipeline: Pipeline, stack: Any, database_url: str
) -> None:
    # Jobs that never finish on their own: they poll before the archive run, and the test
    # waits (bounded) for a poll after it, however long the run takes on a busy machine;
    # then they are cancelled, so the drop stopped nobody and lost no step.
    from jobwarden.tasks.humans.interventions import request_cancel

    polling = [
        pipeline.submit({"never_finish": True, "cancel": "honour", "retry_after": 1})
        for _ in range(3)
    ]
    for op in polling:
        pipeline.wait_state(op, "observing")
    partition = "operation_events_201103"
    old = [_operation(database_url, _month(2011, 3), S.succeeded) for _ in range(3)]
    started = time.monotonic()
    done = _cli_on(database_url, "archive", "--retention-days", "0")
    ended = time.monotonic()
    assert f"archived  {partition}: 3 histories" in done.stdout, done.stderr
    assert not _attached(database_url, partition)
    for op in polling:

        def polled_after_run(op: str = op) -> list[dict[str, Any]]:
            return [r for r in pipeline.job_requests(op, "status") if r["monotonic"] > ended]

        wait_for(polled_after_run, timeout=60, what=f"a poll of {op} after the archive run")
        request_cancel(op, "pytest", "archive test done")
        row = pipeline.wait_state(op, timeout=60)
        assert row.state == "cancelled", pipeline.kinds(op)
        assert row.step_failures == 0
        times = [r["monotonic"] for r in pipeline.job_requests(op, "status")]
        assert len(times) <= row.status_requests_used
        # Polled before the detach and after it: the drop stopped nobody.
        assert min(times) < started and max(times) > ended, (started, ended, times)
    _verified_from_archive(database_url, old)
    # pipeline's own check: every polled operation's history still verifies.


def test_an_archiving_run_killed_midway_leaves_the_month_attached_and_the_next_completes_it(
    stack: Any, database_url: str, arm: Callable[[str, str, str], None]
) -> None:
    partition = "operation_events_201207"
    old = [_operation(database_url, _month(2012, 7)) for _ in range(3)]
    # Killed once the first history's segment is recorded.
    arm("archive_after_segment", partition, "kill")
    first = _killable_on(database_url, "archive", "--retention-days", "0")
    assert first.returncode == -9, first.stderr
    assert _archived_rows(database_url, partition) == 1
    assert _attached(database_url, partition)
    # Killed again with every segment recorded, just before the drop.
    arm("archive_before_drop", partition, "kill")
    second = _killable_on(database_url, "archive", "--retention-days", "0")
    assert second.returncode == -9, second.stderr
    assert _archived_rows(database_url, partition) == 3
    with transaction(database_url) as session:
        rows = session.scalar(text(f'SELECT count(*) FROM event_partitions."{partition}"'))
    assert rows == 9  # nothing of the month left the database yet
    # Killed runs leave it attached, and a history still verifies from its live rows.
    assert _cli_on(database_url, "verify", str(old[0])).stdout.strip() == (
        "chain verified: 3 events"
    )
    third = _cli_on(database_url, "archive", "--retention-days", "0")
    assert f"archived  {partition}: 3 histories in the result store (0 written now)" in (
        third.stdout
    ), third.stderr
    assert not _attached(database_url, partition)
    _verified_from_archive(database_url, old)
