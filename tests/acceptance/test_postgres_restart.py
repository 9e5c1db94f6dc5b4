"""Postgres restarted mid-run (the DBOS-style chaos step): workers lose every connection and
in-flight transaction, yet operations finish, nothing is sent twice, and every history
still verifies. Runs only where this machine's own cluster can be restarted."""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

import pytest

from jobwarden.harness import Stack, wait_for
from tests.acceptance.conftest import Pipeline


def _cluster() -> list[str] | None:
    versions = (
        sorted(p.name for p in Path("/etc/postgresql").glob("*"))
        if Path("/etc/postgresql").is_dir()
        else []
    )
    if shutil.which("pg_ctlcluster") is None or len(versions) != 1:
        return None
    return ["pg_ctlcluster", "--skip-systemctl-redirect", versions[0], "main"]


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
    stack: Stack, pipeline: Pipeline, database_url: str
) -> None:
    cluster = _cluster()
    if cluster is None:
        pytest.skip("no single local cluster that pg_ctlcluster can restart here")
    ops = [pipeline.submit({"polls_to_finish": 8, "retry_after": 1}) for _ in range(4)]
    for op in ops:
        pipeline.wait_state(op, "observing")
    subprocess.run([*cluster, "restart", "--force"], check=True, timeout=60, capture_output=True)
    wait_for(lambda: _accepting(database_url), timeout=30, what="Postgres to accept again")
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
