"""scripts/bench_poll.py --mode in-process: both poll loops in one process, no worker.

The hand-written loop takes a Redis lock, runs one Postgres transaction, sends one HTTP
request and pushes one message; jobwarden's is the real ``jobwarden.poll`` body
(``run_step``) called without the Celery worker around it. Polls/s only.
"""

from __future__ import annotations

import argparse
import os
import secrets
import tempfile
import time
from pathlib import Path

from _bench_support import bench_contract


def in_process_mode(args: argparse.Namespace) -> int:
    token = secrets.token_hex(8)
    providers = Path(tempfile.mkdtemp(prefix="jobwarden-bench-"))
    bench_contract(providers)
    run = secrets.token_hex(3)
    os.environ.update(
        {
            "JOBWARDEN_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:5432/{args.database}",
            "JOBWARDEN_PROVIDERS_DIR": str(providers),
            "JOBWARDEN_KEY_PREFIX": f"jwbench-{run}",
            "JOBWARDEN_QUEUE": f"jwbench-{run}",
            "JOBWARDEN_SANDBOX_TOKEN": token,
        }
    )
    from jobwarden.demo.sandbox.server import SandboxServer

    sandbox = SandboxServer(token=token)
    sandbox.start()
    os.environ["JOBWARDEN_SANDBOX_URL"] = sandbox.url

    import httpx
    from redis import Redis
    from sqlalchemy import text as sql

    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence.db import engine_for, transaction
    from jobwarden.models.persistence.migrate import ensure_database, upgrade
    from jobwarden.models.states import OperationState as S
    from jobwarden.models.steps import CREATE, POLL
    from jobwarden.tasks.intake import submit_operation
    from jobwarden.tasks.pipeline import run_step
    from jobwarden.tasks.runtime import current

    settings = get_settings()
    ensure_database(settings.database_url)
    upgrade(settings.database_url)
    rt = current()
    ops = []
    for i in range(args.operations):
        answer = submit_operation(
            tenant="bench",
            provider="sandbox",
            idempotency_key=f"bench-{run}-{i}",
            command={"kind": "bench", "behaviour": {"never_finish": True, "progress": False}},
            requested_by="bench",
            runtime=rt,
        )
        assert answer.operation_id
        ops.append(answer.operation_id)
        run_step(answer.operation_id, CREATE)
    time.sleep(0.01)  # past every initial delay of 1 ms

    # -- the hand-written floor ---------------------------------------------------
    polls = args.operations * args.polls
    redis = Redis.from_url(settings.redis_url)
    engine = engine_for(settings.database_url)
    client = httpx.Client(timeout=5, headers={"Authorization": f"Bearer {token}"})
    job_ids = []
    with transaction(settings.database_url) as session:
        for op in ops:
            job_ids.append(
                session.execute(
                    sql("SELECT remote_job_id FROM operations WHERE operation_id = :id"), {"id": op}
                ).scalar_one()
            )
    start = time.perf_counter()
    for n in range(polls):
        op, job = ops[n % len(ops)], job_ids[n % len(ops)]
        lock = redis.lock(f"jwbench-{run}:floor:{op}", timeout=60, blocking=False)
        lock.acquire()
        with engine.begin() as conn:
            conn.execute(
                sql(
                    "UPDATE operation_timers SET poll_attempt = poll_attempt + 1"
                    " WHERE operation_id = :id"
                ),
                {"id": op},
            )
        client.get(f"{sandbox.url}/v1/jobs/{job}")
        redis.lpush(f"jwbench-{run}:floor-queue", op)
        lock.release()
    floor = polls / (time.perf_counter() - start)

    # -- jobwarden's poll path ----------------------------------------------------
    done = 0
    start = time.perf_counter()
    for n in range(polls):
        if run_step(ops[n % len(ops)], POLL) == S.observing.value:
            done += 1
    jobwarden = polls / (time.perf_counter() - start)

    for key in redis.scan_iter(f"jwbench-{run}*"):
        redis.delete(key)
    client.close()
    sandbox.stop()
    print(f"hand-written floor : {floor:8.1f} polls/s")
    print(f"jobwarden poll path: {jobwarden:8.1f} polls/s  ({done} polls answered)")
    print(f"ratio jobwarden / floor: {jobwarden / floor:.2f}")
    return 0
