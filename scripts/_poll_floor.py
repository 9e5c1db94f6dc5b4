"""The hand-written Celery poll step scripts/bench_poll.py measures jobwarden against.

It does the floor DESIGN.md names and nothing else: one Redis lock (with a TTL), one
HTTP GET of the sandbox job, one Postgres transaction with an UPDATE and an INSERT
(BEGIN, UPDATE, INSERT, COMMIT: 4 round trips), the lock released, and one reschedule
through ``apply_async`` until its budget of polls is spent. No history chain, no
fencing, no guard. One psycopg connection, one Redis client and one httpx client per
worker process, made after the fork. Configured from BENCH_FLOOR_* variables; the
Celery settings that matter for cost are jobwarden's (late acks, prefetch 1, JSON,
no results, no task events).
"""

from __future__ import annotations

import json
import os
from typing import Any

import httpx
import psycopg
from celery import Celery
from redis import Redis

PREFIX = os.environ.get("BENCH_FLOOR_PREFIX", "jwbench-floor")
QUEUE = os.environ.get("BENCH_FLOOR_QUEUE", "jwbench-floor")
BROKER = os.environ.get("BENCH_FLOOR_BROKER", "redis://127.0.0.1:6379/0")

app = Celery("floor", broker=BROKER)
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    task_serializer="json",
    accept_content=["json"],
    task_default_queue=QUEUE,
    broker_transport_options={"global_keyprefix": f"{PREFIX}:celery:"},
    broker_connection_retry_on_startup=True,
    worker_send_task_events=False,
    worker_hijack_root_logger=False,
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS floor_ops (
    id integer PRIMARY KEY, job_id text NOT NULL, round integer NOT NULL,
    polls integer NOT NULL DEFAULT 0, done boolean NOT NULL DEFAULT false,
    last_status text, updated_at timestamptz
);
CREATE TABLE IF NOT EXISTS floor_events (
    id bigserial PRIMARY KEY, op_id integer NOT NULL, at timestamptz NOT NULL,
    status text, body jsonb
);
"""

_clients: dict[str, Any] = {}


def _client(name: str) -> Any:
    # Made lazily in each worker child, after the fork: no socket crosses a fork.
    key = f"{os.getpid()}:{name}"
    if key not in _clients:
        if name == "db":
            _clients[key] = psycopg.connect(os.environ["BENCH_FLOOR_DSN"])
        elif name == "redis":
            _clients[key] = Redis.from_url(BROKER)
        else:
            token = os.environ["BENCH_FLOOR_TOKEN"]
            _clients[key] = httpx.Client(
                base_url=os.environ["BENCH_FLOOR_SANDBOX"],
                timeout=5,
                headers={"Authorization": f"Bearer {token}"},
            )
    return _clients[key]


@app.task(name="floor.poll", acks_late=True, ignore_result=True)
def poll(op_id: int, job_id: str, remaining: int) -> None:
    lock = _client("redis").lock(f"{PREFIX}:floor:lock:{op_id}", timeout=60, blocking=False)
    if not lock.acquire():
        poll.apply_async((op_id, job_id, remaining), countdown=0.01)
        return
    try:
        answer = _client("http").get(f"/v1/jobs/{job_id}")
        status = answer.json().get("status")
        db = _client("db")
        with db.transaction():
            db.execute(
                "UPDATE floor_ops SET polls = polls + 1, done = %s, last_status = %s,"
                " updated_at = now() WHERE id = %s",
                (remaining <= 1, status, op_id),
            )
            db.execute(
                "INSERT INTO floor_events (op_id, at, status, body) VALUES (%s, now(), %s, %s)",
                (op_id, status, json.dumps({"http_status": answer.status_code})),
            )
    finally:
        lock.release()
    if remaining > 1:
        poll.apply_async((op_id, job_id, remaining - 1), countdown=0.001)
