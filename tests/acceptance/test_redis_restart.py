"""Redis restarted mid-run: every lease, queued message and countdown is gone,
yet operations reach their end and nothing is sent twice.

The restart is real (SHUTDOWN NOSAVE, then the same redis-server command) and
runs only against a local, non-persistent Redis such as the test machines';
elsewhere it is skipped rather than touching someone's data.
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
from redis import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from jobwarden.harness import Stack, wait_for
from tests.acceptance.conftest import Pipeline


def _restart_command(client: Redis) -> list[str] | None:
    if shutil.which("redis-server") is None:
        return None
    conf = {
        k: v
        for k, v in (
            (key, client.config_get(key).get(key))
            for key in ("save", "appendonly", "dir", "bind", "port", "logfile")
        )
    }
    if conf["save"] or conf["appendonly"] != "no":
        return None  # a persistent Redis is somebody's data: leave it alone
    cmd = [
        "redis-server",
        "--daemonize",
        "yes",
        "--port",
        str(conf["port"]),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(conf["dir"]),
    ]
    if conf["bind"]:
        cmd += ["--bind", *str(conf["bind"]).split()]
    if conf["logfile"]:
        cmd += ["--logfile", str(conf["logfile"])]
    return cmd


@pytest.fixture
def restart_redis(redis_client: Redis) -> Iterator[Any]:
    cmd = _restart_command(redis_client)
    if cmd is None:
        pytest.skip("Redis here is persistent or not local; not restarting it")

    def restart() -> None:
        # The server closes our connection as it exits.
        with contextlib.suppress(RedisConnectionError):
            redis_client.shutdown(nosave=True)
        subprocess.run(cmd, check=True, timeout=30)
        wait_for(lambda: _pings(redis_client), timeout=20, what="Redis to come back")

    yield restart
    if not _pings(redis_client):
        subprocess.run(cmd, check=True, timeout=30)


def _pings(client: Redis) -> bool:
    try:
        return bool(client.ping())
    except RedisConnectionError:
        return False


def test_redis_restarted_mid_run_operations_finish_and_nothing_is_duplicated(
    stack: Stack, pipeline: Pipeline, restart_redis: Any
) -> None:
    ops = [pipeline.submit({"polls_to_finish": 8, "retry_after": 1}) for _ in range(4)]
    for op in ops:
        pipeline.wait_state(op, "observing")
    restart_redis()
    rows = [pipeline.wait_state(op, timeout=60) for op in ops]
    for op, row in zip(ops, rows, strict=True):
        assert row.state == "succeeded", pipeline.kinds(op)
        assert len(pipeline.remote_jobs(op)) == 1
        assert len(pipeline.creates(op)) == 1
        statuses = pipeline.job_requests(op, "status")
        assert len(statuses) == 8 == row.status_requests_used
        times = [r["monotonic"] for r in statuses]
        assert all(b - a >= 1.0 - 0.05 for a, b in itertools.pairwise(times))
