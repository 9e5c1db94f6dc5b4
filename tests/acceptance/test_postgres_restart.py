"""Postgres restarted mid-run (the DBOS-style chaos step): workers lose every connection and
in-flight transaction, yet operations finish, nothing is sent twice, and every history
still verifies.

The restarted cluster is a private one this test starts (initdb on a free port in a
temporary folder, see tests/private_servers.py), so it runs everywhere, CI included, and
never touches the machine's Postgres; if that cluster cannot be started, the test fails.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest

from jobwarden.harness import wait_for
from jobwarden.sandbox.server import SandboxServer
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


def test_postgres_restarted_mid_run_operations_finish_and_nothing_is_duplicated(
    private: PrivateRun, sandbox: SandboxServer, database_url: str
) -> None:
    pipeline = Pipeline(sandbox, private.database_url)
    ops = [pipeline.submit({"polls_to_finish": 8, "retry_after": 1}) for _ in range(4)]
    for op in ops:
        pipeline.wait_state(op, "observing")
    # A connection another user holds to the run's own servers survives the whole chaos.
    with machine_servers_untouched(database_url, os.environ["JOBWARDEN_TEST_REDIS_URL"]):
        private.postgres.restart()
        wait_for(lambda: _accepting(private.database_url), timeout=30, what="Postgres again")
        rows = [pipeline.wait_state(op, timeout=60) for op in ops]
    for op, row in zip(ops, rows, strict=True):
        assert row.state == "succeeded", pipeline.kinds(op)
        assert len(pipeline.creates(op)) == 1
        assert len(pipeline.remote_jobs(op)) == 1
        statuses = pipeline.job_requests(op, "status")
        # Every request sent was counted first; a crash may leave an unused reservation.
        assert len(statuses) <= row.status_requests_used
        times = [r["monotonic"] for r in statuses]
        assert all(b - a >= 1.0 - 0.05 for a, b in itertools.pairwise(times))
    pipeline.verify_all()
