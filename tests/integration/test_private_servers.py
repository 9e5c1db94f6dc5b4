"""The test harness that points this process at private servers leaves no socket open.

tests/private_servers.py's ``pointed_at`` swaps the process's settings, runtime and
Celery pools for the restart tests' private servers and back. The result backend it
drops would otherwise keep its subscription's socket open until a garbage collection
in some later test finalized it with a ResourceWarning (issue 24, item 8).
"""

from __future__ import annotations

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
    pubsub = app.backend.result_consumer._pubsub
    sock = pubsub.connection._sock
    try:
        assert sock is not None and sock.fileno() != -1
        with pointed_at({}):  # the same servers: what matters is the swap
            assert sock.fileno() == -1  # closed by the swap, not left to the collector
    finally:
        del kept
        prefix = f"{rt.settings.key_prefix}:celery:"
        rt.redis.delete(
            f"{prefix}{queue}",
            f"{prefix}_kombu.binding.{queue}",
            f"{prefix}_kombu.binding_permanent.{queue}",
        )
