"""Round-trip counters for benchmark worker processes (scripts/bench_poll.py only).

Loaded before Celery starts in a worker the benchmark launches, never by jobwarden.
It counts, per process, psycopg's round trips (each time a ``Connection.wait``
generator waits to read the server's answer: a statement, BEGIN, COMMIT, ping, sync) and the
commands redis-py sends (``send_packed_command``: one per command or pipeline), and a
daemon thread adds them to Redis counters four times a second (its own Redis traffic is
not counted). Counting costs two attribute lookups per call; the benchmark's CPU
figures include it for both systems alike.
"""

from __future__ import annotations

import os
import threading
from typing import Any

COUNTS = {"pg": 0, "redis": 0}
_flusher: threading.Thread | None = None
_local = threading.local()


def install(redis_url: str, key_prefix: str) -> None:
    import psycopg
    import redis.connection

    wait = psycopg.Connection.wait

    from psycopg.waiting import Wait

    def counted(gen: Any) -> Any:
        # One wait for the server's answer per round trip: an implicit BEGIN sent with
        # the first statement is two; a COMMIT or ROLLBACK with no transaction open (a
        # pool's reset on return) waits for nothing and is none.
        try:
            state = next(gen)
            while True:
                if state == Wait.R:
                    COUNTS["pg"] += 1
                ready = yield state
                state = gen.send(ready)
        except StopIteration as done:
            return done.value

    def counted_wait(self: Any, gen: Any, *args: Any, **kwargs: Any) -> Any:
        return wait(self, counted(gen), *args, **kwargs)

    send = redis.connection.AbstractConnection.send_packed_command

    def counted_send(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not getattr(_local, "flushing", False):
            COUNTS["redis"] += 1
        return send(self, *args, **kwargs)

    psycopg.Connection.wait = counted_wait  # type: ignore[method-assign]
    redis.connection.AbstractConnection.send_packed_command = counted_send  # type: ignore[method-assign]

    def start() -> None:
        global _flusher  # noqa: PLW0603 - one flusher per process, restarted after fork
        COUNTS.update(pg=0, redis=0)
        _flusher = threading.Thread(
            target=_flush_forever, args=(redis_url, key_prefix), daemon=True
        )
        _flusher.start()

    os.register_at_fork(after_in_child=start)
    start()
    if os.environ.get("BENCH_PROFILE_DIR"):
        _profile_children(os.environ["BENCH_PROFILE_DIR"], os.environ.get("BENCH_QUEUE", "w"))


def _profile_children(directory: str, name: str) -> None:
    """cProfile each pool process on CPU time, dumped as the pool shuts it down
    (``--profile`` of scripts/bench_poll.py; profiling slows the workers it watches)."""
    import cProfile
    import time

    from celery.signals import worker_process_init, worker_process_shutdown

    profiler = cProfile.Profile(time.process_time)

    def begin(**_: Any) -> None:
        profiler.enable()

    def dump(**_: Any) -> None:
        profiler.disable()
        profiler.dump_stats(os.path.join(directory, f"{name}-{os.getpid()}.pstats"))

    worker_process_init.connect(begin, weak=False)
    worker_process_shutdown.connect(dump, weak=False)


def _flush_forever(redis_url: str, key_prefix: str) -> None:
    import time

    from redis import Redis

    _local.flushing = True
    client = Redis.from_url(redis_url)
    sent = {"pg": 0, "redis": 0}
    while True:
        time.sleep(0.25)
        for name, value in list(COUNTS.items()):
            if value != sent[name]:
                client.incrby(f"{key_prefix}:{name}", value - sent[name])
                sent[name] = value


def main() -> None:
    """Run ``celery`` with the counters installed: argv after the script is Celery's."""
    import sys

    install(os.environ["BENCH_PROBE_REDIS_URL"], os.environ["BENCH_PROBE_PREFIX"])
    from celery.__main__ import main as celery_main

    sys.argv = ["celery", *sys.argv[1:]]
    celery_main()


if __name__ == "__main__":
    main()
