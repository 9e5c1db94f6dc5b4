"""One runtime per process, even when the API's thread pool asks for it twenty times at
once: a runtime built twice leaves the loser's Redis and HTTP clients open, and their
socket surfaced later as an unraisable ResourceWarning in an unrelated test (issue 24)."""

from __future__ import annotations

import threading

from jobwarden.tasks import runtime
from jobwarden.tasks.runtime import Runtime


def test_twenty_threads_asking_at_once_share_one_runtime(database_url: str) -> None:
    runtime.reset()
    barrier = threading.Barrier(20)
    seen: list[Runtime] = []
    lock = threading.Lock()

    def ask() -> None:
        barrier.wait(timeout=30)
        built = runtime.current()
        with lock:
            seen.append(built)

    threads = [threading.Thread(target=ask) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert len(seen) == 20
        assert len({id(rt) for rt in seen}) == 1
    finally:
        runtime.reset()


def test_reset_closes_the_runtimes_redis_connections(database_url: str) -> None:
    runtime.reset()
    rt = runtime.current()
    assert rt.redis.ping()
    pool = rt.redis.connection_pool
    connections = list(pool._available_connections)  # redis-py's pool: what it holds open
    assert connections and all(c.is_connected for c in connections)
    runtime.reset()
    assert not any(c.is_connected for c in connections)
