"""Redis restarted mid-run: every lease, queued message and countdown is gone,
yet operations reach their end and nothing is sent twice.

The restart is real (SIGKILL, then the same redis-server command on the same port) and
hits a private, non-persistent redis-server this test starts (tests/private_servers.py),
so it runs everywhere, CI included, and never touches the machine's Redis; if that
server cannot be started, the test fails.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from jobwarden.demo.harness import wait_for
from jobwarden.demo.sandbox.server import SandboxServer
from tests.acceptance.conftest import Pipeline
from tests.private_servers import PrivateRun, machine_servers_untouched, private_run


@pytest.fixture
def private(worker_env: dict[str, str]) -> Iterator[PrivateRun]:
    with private_run(worker_env) as run:
        yield run


def _pings(url: str) -> bool:
    client = Redis.from_url(url, socket_timeout=2)
    try:
        return bool(client.ping())
    except RedisConnectionError:
        return False
    finally:
        client.close()


def test_redis_restarted_mid_run_operations_finish_and_nothing_is_duplicated(
    private: PrivateRun, sandbox: SandboxServer, database_url: str
) -> None:
    pipeline = Pipeline(sandbox, private.database_url)
    ops = [pipeline.submit({"polls_to_finish": 8, "retry_after": 1}) for _ in range(4)]
    for op in ops:
        pipeline.wait_state(op, "observing")
    # A connection another user holds to the run's own servers survives the whole chaos.
    with machine_servers_untouched(database_url, os.environ["JOBWARDEN_TEST_REDIS_URL"]):
        private.redis.restart()
        wait_for(lambda: _pings(private.redis.url), timeout=20, what="Redis to come back")
        rows = [pipeline.wait_state(op, timeout=60) for op in ops]
    for op, row in zip(ops, rows, strict=True):
        assert row.state == "succeeded", pipeline.kinds(op)
        assert len(pipeline.remote_jobs(op)) == 1
        assert len(pipeline.creates(op)) == 1
        statuses = pipeline.job_requests(op, "status")
        assert len(statuses) == 8
        # A reservation whose wake-up died with Redis is retired by the sweeper's
        # redispatch: counted, never sent (invariant 3 accepts unused reserve).
        assert row.status_requests_used - len(statuses) in (0, 1)
        times = [r["monotonic"] for r in statuses]
        assert all(b - a >= 1.0 - 0.05 for a, b in itertools.pairwise(times))
    pipeline.verify_all()
