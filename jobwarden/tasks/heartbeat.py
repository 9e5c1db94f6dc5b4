"""Worker heartbeats per queue in Redis, and the doors' one read of them (issue 36, point 5).

Every worker stamps, every ``JOBWARDEN_WORKER_HEARTBEAT_SECONDS``, each queue it consumes:
a sorted set per queue under the key prefix (``<prefix>:workers:<queue>``), member the
worker's node name, score the Redis server's clock. A graceful stop removes the worker's
member; a killed worker's member simply ages. A door that records an operation reads the
newest stamp and the server's clock in one round trip, and the pure core
(models/intake/attendance.py) decides whether to warn that no worker consumes the queue.

Why not Celery's own signals: ``heartbeat_sent`` fires only while the worker sends
heartbeat events (``--without-heartbeat`` turns them off, as many Redis deployments do)
and its sender does not know the worker's queues; ``inspect active_queues`` is a
broadcast round trip waiting for every worker's reply, too slow for every submission.
A consumer bootstep knows the queues it consumes and runs on the worker's own timer.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from celery import bootsteps
from redis import Redis
from redis.client import Pipeline
from redis.exceptions import RedisError

from jobwarden.config.celery_app import app
from jobwarden.config.settings import Settings, get_settings
from jobwarden.models.intake.attendance import NoWorkerWarning, no_worker_warning
from jobwarden.observability.logs import get_logger

log = get_logger("jobwarden.tasks")

# How long a stopped worker's last stamp is kept, so a warning can say when a worker was
# last seen; the set itself expires this long after its newest stamp.
RETENTION_SECONDS = 7 * 86400

# The stamp uses the server's clock, as the read does: no clock skew between the worker's
# machine and the API's can make a live worker look gone. Old members are pruned here.
BEAT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, now, ARGV[1])
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now - tonumber(ARGV[2]))
  redis.call('EXPIRE', key, ARGV[2])
end
return tostring(now)
"""


def heartbeat_key(key_prefix: str, queue: str) -> str:
    return f"{key_prefix}:workers:{queue}"


def beat(redis: Redis, key_prefix: str, queues: list[str], worker: str) -> None:
    """Stamp ``worker`` as consuming each of ``queues`` now (the server's clock)."""
    if queues:
        keys = [heartbeat_key(key_prefix, q) for q in queues]
        redis.eval(BEAT, len(keys), *keys, worker, RETENTION_SECONDS)


def forget(redis: Redis, key_prefix: str, queues: list[str], worker: str) -> None:
    """A graceful stop: ``worker`` no longer consumes ``queues``."""
    with redis.pipeline(transaction=False) as pipe:
        for q in queues:
            pipe.zrem(heartbeat_key(key_prefix, q), worker)
        pipe.execute()


# What a door read of a queue's heartbeats: the newest stamp (None: none kept) and the
# Redis server's clock when it was read.
Attendance = tuple[datetime | None, datetime]


def ask_attendance(pipe: Pipeline, key_prefix: str, queue: str) -> None:
    """Queue the read of ``queue``'s newest stamp and the server's clock on ``pipe``: two
    answers, which ``attendance`` turns into what was read. A door that makes a Redis
    trip of its own anyway (the HTTP door's revocation epoch) asks in the same trip."""
    pipe.time()
    pipe.zrevrange(heartbeat_key(key_prefix, queue), 0, 0, withscores=True)


def attendance(clock: Any, newest: Any) -> Attendance:
    """The two answers ``ask_attendance`` queued, read. ValueError (or OverflowError) for a
    stamp that is no time: none of our workers wrote it."""
    seconds, micros = clock
    now = datetime.fromtimestamp(seconds + micros / 1_000_000, UTC)
    if not newest:
        return None, now
    return datetime.fromtimestamp(float(newest[0][1]), UTC), now


def last_beat(redis: Redis, key_prefix: str, queue: str) -> Attendance:
    """The newest stamp on ``queue`` (None: none kept) and the server's clock, in one trip."""
    with redis.pipeline(transaction=False) as pipe:
        ask_attendance(pipe, key_prefix, queue)
        clock, newest = pipe.execute()
    return attendance(clock, newest)


def no_worker(
    redis: Redis, settings: Settings, seen: Attendance | None = None
) -> NoWorkerWarning | None:
    """The no-worker warning for the operations' queue, or None (a worker beats on it, or
    Redis did not answer: a door's answer never fails for want of this advice). ``seen``:
    what the door already read in a trip of its own (read here otherwise)."""
    queue = settings.queue
    if seen is None:
        try:
            seen = last_beat(redis, settings.key_prefix, queue)
        except (RedisError, ValueError, OverflowError) as exc:
            log.warning("worker_heartbeat_unread", queue=queue, error=type(exc).__name__)
            return None
    newest, now = seen
    return no_worker_warning(queue, newest, now, settings.worker_silence_seconds)


class QueueHeartbeat(bootsteps.StartStopStep):  # type: ignore[misc]  # celery is untyped
    """A consumer step: stamps the queues the worker consumes on the worker's timer."""

    # After Tasks: the task consumer (and so the queue list) exists once it started.
    requires = ("celery.worker.consumer.tasks:Tasks",)

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.client: Redis | None = None
        self.timer_entry: Any = None
        self.stamped: list[str] = []

    def start(self, parent: Any) -> None:
        settings = get_settings()
        self.client = Redis.from_url(settings.redis_url, socket_timeout=2, socket_connect_timeout=2)
        self._beat(parent, settings)
        self.timer_entry = parent.timer.call_repeatedly(
            settings.worker_heartbeat_seconds, self._beat, (parent, settings)
        )

    def _beat(self, parent: Any, settings: Settings) -> None:
        # Read each time: `celery control add_consumer` changes the queues at run time.
        consumer = getattr(parent, "task_consumer", None)
        queues = sorted(q.name for q in getattr(consumer, "queues", ()))
        if self.client is None:
            return
        try:
            beat(self.client, settings.key_prefix, queues, parent.hostname)
            self.stamped = queues
        except RedisError as exc:
            # The broker is this Redis too: the worker reconnects; the next beat stamps.
            log.warning("worker_heartbeat_failed", error=type(exc).__name__)

    def stop(self, parent: Any) -> None:
        if self.timer_entry is not None:
            self.timer_entry.cancel()
            self.timer_entry = None
        client, self.client = self.client, None
        if client is None:
            return
        try:
            forget(client, get_settings().key_prefix, self.stamped, parent.hostname)
        except RedisError as exc:
            log.warning("worker_heartbeat_not_removed", error=type(exc).__name__)
        finally:
            client.close()

    # A warm or cold shutdown stops the consumer's steps by these names: the same leave.
    def terminate(self, parent: Any) -> None:
        self.stop(parent)

    def shutdown(self, parent: Any) -> None:
        self.stop(parent)


# Imported by the worker (config/celery_app.py's include) before it builds its consumer.
app.steps["consumer"].add(QueueHeartbeat)
