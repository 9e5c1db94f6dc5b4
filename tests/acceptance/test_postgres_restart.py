"""Postgres restarted mid-run (the DBOS-style chaos step): workers lose every connection and
in-flight transaction, yet operations finish, nothing is sent twice, and every history
still verifies. The operations' histories span two partitions of operation_events (some
were created last month), and the parked ones are woken by the sweeper's due claim on
operation_timers across the restart.

The restarted cluster is a private one this test starts (initdb on a free port in a
temporary folder, see tests/private_servers.py), so it runs everywhere, CI included, and
never touches the machine's Postgres; if that cluster cannot be started, the test fails.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from jobwarden.demo.harness import wait_for
from jobwarden.demo.sandbox.server import SandboxServer
from jobwarden.models.history.archive import month_start, partition_name
from jobwarden.models.intake.intent import open_operation
from jobwarden.models.operation import Operation
from jobwarden.models.persistence.db import transaction
from jobwarden.models.plan import Plan
from tests.acceptance.conftest import Pipeline
from tests.private_servers import PrivateRun, machine_servers_untouched, private_run


@pytest.fixture
def private(worker_env: dict[str, str]) -> Iterator[PrivateRun]:
    with private_run(worker_env) as run:
        yield run


def _accepting(database_url: str) -> bool:
    import psycopg

    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    try:
        with psycopg.connect(dsn, connect_timeout=2) as conn:
            conn.execute("SELECT 1")
    except psycopg.OperationalError:
        return False
    return True


def _submitted_last_month(
    pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch, created: datetime
) -> list[str]:
    """Operations whose created_at (so their history's partition) is last month; their
    deadlines still run from now. Each waits 4 s between polls, longer than the
    workers' 3 s countdown limit: parked on its timer row for the sweeper's due claim."""
    with monkeypatch.context() as patched:

        def last_month(*args: Any, **kwargs: Any) -> tuple[Operation, Plan]:
            op, intent = open_operation(*args, **kwargs)
            return op.with_changes({"created_at": created}), intent

        patched.setattr("jobwarden.tasks.intake.open_operation", last_month)
        return [pipeline.submit({"polls_to_finish": 3, "retry_after": 4}) for _ in range(2)]


def _partitions_of(url: str, ops: list[str]) -> dict[str, set[str]]:
    with transaction(url) as session:
        rows = session.execute(
            text(
                "SELECT DISTINCT operation_id, tableoid::regclass::text FROM operation_events "
                "WHERE operation_id = ANY(:ops)"
            ),
            {"ops": [uuid.UUID(op) for op in ops]},
        )
        found: dict[str, set[str]] = {}
        for op_id, table in rows:
            found.setdefault(str(op_id), set()).add(table)
        return found


def test_postgres_restarted_mid_run_operations_finish_and_nothing_is_duplicated(
    private: PrivateRun, sandbox: SandboxServer, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = Pipeline(sandbox, private.database_url)
    now = datetime.now(UTC)
    last_month = month_start(now) - timedelta(days=1)
    with transaction(private.database_url) as session:
        session.execute(text("SELECT jobwarden_add_history_partition(:m)"), {"m": last_month})
    parked = _submitted_last_month(pipeline, monkeypatch, last_month)
    ops = [pipeline.submit({"polls_to_finish": 8, "retry_after": 1}) for _ in range(4)]
    for op in [*parked, *ops]:
        pipeline.wait_state(op, "observing")
    # A connection another user holds to the run's own servers survives the whole chaos.
    with machine_servers_untouched(database_url, os.environ["JOBWARDEN_TEST_REDIS_URL"]):
        private.postgres.restart()
        wait_for(lambda: _accepting(private.database_url), timeout=30, what="Postgres again")
        rows = [pipeline.wait_state(op, timeout=60) for op in [*parked, *ops]]
    for op, row in zip([*parked, *ops], rows, strict=True):
        assert row.state == "succeeded", pipeline.kinds(op)
        assert len(pipeline.creates(op)) == 1
        assert len(pipeline.remote_jobs(op)) == 1
        statuses = pipeline.job_requests(op, "status")
        # Every request sent was counted first; a crash may leave an unused reservation.
        assert len(statuses) <= row.status_requests_used
        times = [r["monotonic"] for r in statuses]
        wait = 4.0 if op in parked else 1.0
        assert all(b - a >= wait - 0.05 for a, b in itertools.pairwise(times))
    # Each history whole in its month's partition: last month's, or this one's.
    expected = {
        **{op: {f"event_partitions.{partition_name(last_month)}"} for op in parked},
        **{op: {f"event_partitions.{partition_name(now)}"} for op in ops},
    }
    assert _partitions_of(private.database_url, [*parked, *ops]) == expected
    pipeline.verify_all()
