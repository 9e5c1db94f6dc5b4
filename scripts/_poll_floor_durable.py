"""The durable hand-written Celery poll step: issue 37's reference in scripts/bench_poll.py.

The plain floor (scripts/_poll_floor.py) does a lock, a GET, a transaction and a
publish; it keeps none of the invariants DESIGN.md asks of a poll. This one does the
least work that keeps them, written by hand, and is the reference jobwarden's poll
figure is a ratio to:

- one Redis lock (with a TTL), released at the end;
- one autocommit reload of the operation's ``version`` and chain head (1 round trip):
  what the fence and the chain need, read after the lock is held;
- one HTTP GET of the sandbox job;
- one statement, in autocommit (1 round trip, 1 commit), that makes all three writes:
  a version-fenced ``UPDATE`` of the operation (a stale writer matches no row and so
  writes nothing at all), an ``INSERT`` of the event carrying
  ``sha256(prev_hash || canonical event)`` (RFC 8785 bytes; the table has a foreign key
  to the operation and an append-only trigger), and an upsert of the operation's timer
  row (its ``next_poll_at`` indexed), chained as
  ``WITH fenced AS (UPDATE ... RETURNING ...), event AS (INSERT ... SELECT FROM fenced
  RETURNING ...) INSERT INTO timers ... SELECT FROM event ON CONFLICT DO UPDATE``;
- one reschedule through ``apply_async`` until its budget of polls is spent.

So 2 Postgres statements per poll. Same worker shape and Celery settings as the plain
floor; configured from the same BENCH_FLOOR_* variables.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import httpx
import psycopg
import rfc8785
from celery import Celery
from psycopg.types.json import Jsonb
from redis import Redis

PREFIX = os.environ.get("BENCH_FLOOR_PREFIX", "jwbench-durable")
QUEUE = os.environ.get("BENCH_FLOOR_QUEUE", "jwbench-durable")
BROKER = os.environ.get("BENCH_FLOOR_BROKER", "redis://127.0.0.1:6379/0")

app = Celery("durable-floor", broker=BROKER)
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

GENESIS = b"\x00" * 32  # the prev_hash of an operation's first event

SCHEMA = """
CREATE TABLE IF NOT EXISTS durable_ops (
    id integer PRIMARY KEY, job_id text NOT NULL, round integer NOT NULL,
    version bigint NOT NULL DEFAULT 0, chain_head bytea NOT NULL,
    polls integer NOT NULL DEFAULT 0, done boolean NOT NULL DEFAULT false,
    last_status text, updated_at timestamptz
);
CREATE TABLE IF NOT EXISTS durable_events (
    id bigserial PRIMARY KEY,
    op_id integer NOT NULL REFERENCES durable_ops (id),
    seq bigint NOT NULL, at timestamptz NOT NULL DEFAULT now(),
    prev_hash bytea NOT NULL, hash bytea NOT NULL, body jsonb NOT NULL,
    UNIQUE (op_id, seq)
);
CREATE TABLE IF NOT EXISTS durable_timers (
    op_id integer PRIMARY KEY REFERENCES durable_ops (id),
    next_poll_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS durable_timers_due ON durable_timers (next_poll_at);
CREATE OR REPLACE FUNCTION durable_events_append_only() RETURNS trigger
    LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'durable_events is append-only';
END $$;
DROP TRIGGER IF EXISTS durable_events_append_only ON durable_events;
CREATE TRIGGER durable_events_append_only BEFORE UPDATE OR DELETE ON durable_events
    FOR EACH ROW EXECUTE FUNCTION durable_events_append_only();
"""

RELOAD = "SELECT version, chain_head FROM durable_ops WHERE id = %(op)s"

# All three writes in one statement, one round trip, one commit. The fence: a writer
# whose version is stale updates no row, so the event and the timer (which select from
# the fenced row) are not written either.
WRITE = """
WITH fenced AS (
    UPDATE durable_ops
       SET version = version + 1, chain_head = %(hash)s, polls = polls + 1,
           done = %(done)s, last_status = %(status)s, updated_at = now()
     WHERE id = %(op)s AND version = %(version)s
 RETURNING id, version
), event AS (
    INSERT INTO durable_events (op_id, seq, prev_hash, hash, body)
    SELECT id, version, %(prev)s, %(hash)s, %(body)s FROM fenced
 RETURNING op_id
)
INSERT INTO durable_timers (op_id, next_poll_at)
SELECT op_id, now() + %(delay)s * interval '1 second' FROM event
ON CONFLICT (op_id) DO UPDATE SET next_poll_at = excluded.next_poll_at
RETURNING op_id
"""

DELAY_SECONDS = 0.001


def event_body(op_id: int, seq: int, status: str | None, http_status: int) -> dict[str, Any]:
    """The event a poll appends (what is hashed and stored)."""
    return {
        "op": op_id,
        "seq": seq,
        "kind": "polled",
        "status": status,
        "http_status": http_status,
    }


def chained_hash(prev: bytes, body: dict[str, Any]) -> bytes:
    """``sha256(prev_hash || RFC 8785 bytes of the event)``."""
    return hashlib.sha256(prev + rfc8785.dumps(body)).digest()


_clients: dict[str, Any] = {}


def _client(name: str) -> Any:
    # Made lazily in each worker child, after the fork: no socket crosses a fork.
    key = f"{os.getpid()}:{name}"
    if key not in _clients:
        if name == "db":
            _clients[key] = psycopg.connect(os.environ["BENCH_FLOOR_DSN"], autocommit=True)
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


def poll_once(
    db: psycopg.Connection[Any], http: httpx.Client, op_id: int, job_id: str, last: bool
) -> bool:
    """One poll's Postgres and HTTP work (the caller holds the lock); False when fenced."""
    row = db.execute(RELOAD, {"op": op_id}).fetchone()
    if row is None:
        raise LookupError(f"no durable_ops row {op_id}")
    version, prev = int(row[0]), bytes(row[1])
    answer = http.get(f"/v1/jobs/{job_id}")
    status = answer.json().get("status")
    body = event_body(op_id, version + 1, status, answer.status_code)
    params = {
        "op": op_id,
        "version": version,
        "hash": chained_hash(prev, body),
        "prev": prev,
        "body": Jsonb(body),
        "done": last,
        "status": status,
        "delay": DELAY_SECONDS,
    }
    return db.execute(WRITE, params).fetchone() is not None


@app.task(name="durable.poll", acks_late=True, ignore_result=True)
def poll(op_id: int, job_id: str, remaining: int) -> None:
    lock = _client("redis").lock(f"{PREFIX}:durable:lock:{op_id}", timeout=60, blocking=False)
    if not lock.acquire():
        poll.apply_async((op_id, job_id, remaining), countdown=0.01)
        return
    try:
        written = poll_once(_client("db"), _client("http"), op_id, job_id, remaining <= 1)
    finally:
        lock.release()
    if written and remaining > 1:
        poll.apply_async((op_id, job_id, remaining - 1), countdown=DELAY_SECONDS)
