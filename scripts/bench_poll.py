"""Cost of one poll: jobwarden's poll path against a minimal hand-written loop.

Both run in this process, one poll after another, against the same sandbox
provider, Postgres and Redis. The hand-written loop does the floor DESIGN.md
names (one Redis lease, one Postgres transaction, one HTTP request, one broker
publish) and nothing else: no history, no fencing, no guard. jobwarden's path
is the real `jobwarden.poll` body (lease, reload, guard, counter commit,
request, decision, fenced record, publish) called without the Celery worker
around it. Machines are noisy, so read the ratio, not the absolute figures.

    .venv/bin/python scripts/bench_poll.py --polls 2000 --operations 200
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _bench_contract(directory: Path) -> None:
    text = (REPO / "config" / "providers" / "sandbox.toml").read_text()
    for key in ("initial_delay_seconds", "base_seconds", "max_seconds", "hint_floor_seconds"):
        text = re.sub(rf"(?m)^{key} = .*$", f"{key} = 0.001", text)
    text = re.sub(r"(?m)^max_status_requests = .*$", "max_status_requests = 1000000", text)
    (directory / "sandbox.toml").write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--polls", type=int, default=2000)
    parser.add_argument("--operations", type=int, default=200)
    parser.add_argument("--database", default="jobwarden_bench")
    args = parser.parse_args()

    token = secrets.token_hex(8)
    providers = Path(tempfile.mkdtemp(prefix="jobwarden-bench-"))
    _bench_contract(providers)
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
    from jobwarden.sandbox.server import SandboxServer

    sandbox = SandboxServer(token=token)
    sandbox.start()
    os.environ["JOBWARDEN_SANDBOX_URL"] = sandbox.url

    import httpx
    from redis import Redis
    from sqlalchemy import text as sql

    from jobwarden.config.settings import get_settings
    from jobwarden.models.db import engine_for, transaction
    from jobwarden.models.migrate import ensure_database, upgrade
    from jobwarden.models.states import OperationState as S
    from jobwarden.models.steps import CREATE, POLL
    from jobwarden.tasks.pipeline import run_step
    from jobwarden.tasks.runtime import current

    settings = get_settings()
    ensure_database(settings.database_url)
    upgrade(settings.database_url)
    rt = current()
    from jobwarden.tasks.intake import submit_operation

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
    for n in range(args.polls):
        op, job = ops[n % len(ops)], job_ids[n % len(ops)]
        lock = redis.lock(f"jwbench-{run}:floor:{op}", timeout=60, blocking=False)
        lock.acquire()
        with engine.begin() as conn:
            conn.execute(
                sql(
                    "UPDATE operations SET poll_attempt = poll_attempt + 1 WHERE operation_id = :id"
                ),
                {"id": op},
            )
        client.get(f"{sandbox.url}/v1/jobs/{job}")
        redis.lpush(f"jwbench-{run}:floor-queue", op)
        lock.release()
    floor = args.polls / (time.perf_counter() - start)

    # -- jobwarden's poll path ----------------------------------------------------
    done = 0
    start = time.perf_counter()
    for n in range(args.polls):
        if run_step(ops[n % len(ops)], POLL) == S.observing.value:
            done += 1
    jobwarden = args.polls / (time.perf_counter() - start)

    redis.delete(f"jwbench-{run}:floor-queue")
    for key in redis.scan_iter(f"jwbench-{run}*"):
        redis.delete(key)
    client.close()
    sandbox.stop()
    print(f"hand-written floor : {floor:8.1f} polls/s")
    print(f"jobwarden poll path: {jobwarden:8.1f} polls/s  ({done} polls answered)")
    print(f"ratio jobwarden / floor: {jobwarden / floor:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
