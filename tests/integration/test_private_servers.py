"""The test harness that points this process at private servers leaves no socket open.

tests/private_servers.py's ``pointed_at`` swaps the process's settings, runtime and
Celery pools for the restart tests' private servers and back. The result backend it
drops would otherwise keep its subscription's socket open until a garbage collection
in some later test finalized it with a ResourceWarning (issue 24, item 8).
"""

from __future__ import annotations

import gc
import uuid

from jobwarden.config.celery_app import app
from jobwarden.tasks.runtime import current
from tests.private_servers import pointed_at


def test_pointing_the_process_elsewhere_closes_the_result_subscription_it_drops() -> None:
    rt = current()
    queue = f"{rt.settings.queue}-probe-{uuid.uuid4().hex[:8]}"
    # A send that keeps its result subscribes in this thread's result backend, as
    # test_intake's jobwarden.submit does before a restart test shares its process.
    kept = app.send_task("jobwarden.poll", args=[str(uuid.uuid4())], queue=queue)
    dropped = app.backend
    pubsub = dropped.result_consumer._pubsub
    sock = pubsub.connection._sock
    try:
        assert sock is not None and sock.fileno() != -1
        with pointed_at({}):  # the same servers: what matters is the swap
            assert sock.fileno() == -1  # closed by the swap, not left to the collector
        # The result outlives the swap; collected, it unsubscribes through the dropped
        # backend, which must not connect again for it (a socket nobody would close).
        del kept
        gc.collect()
        pool = dropped.client.connection_pool
        held = [*pool._available_connections, *pool._in_use_connections]
        assert pubsub.connection is None and all(c._sock is None for c in held)
    finally:
        prefix = f"{rt.settings.key_prefix}:celery:"
        rt.redis.delete(
            f"{prefix}{queue}",
            f"{prefix}_kombu.binding.{queue}",
            f"{prefix}_kombu.binding_permanent.{queue}",
        )
