"""Notifications never take a poller's seat (issue 33, finding 8).

A real ``celery worker`` consuming only the polling queue (as compose's ``worker``
service and the README's command do) takes the polling queue's tasks and never a
notification delivery: those are routed to ``<queue>.notifications`` and wait there for
the notifications worker. A queue and key prefix of the test's own, so no other stack's
worker takes either message.
"""

from __future__ import annotations

import os
import secrets

from redis import Redis

from jobwarden.config.celery_app import make_celery
from jobwarden.config.settings import Settings
from jobwarden.demo.harness import Stack


def test_a_worker_that_polls_never_receives_a_notification_delivery(database_url: str) -> None:
    run = secrets.token_hex(4)
    # Under the run's own prefix, so the session's end deletes what the worker leaves.
    queue = prefix = f"{os.environ['JOBWARDEN_KEY_PREFIX']}-polls-{run}"
    settings = Settings(database_url=database_url, queue=queue, key_prefix=prefix)
    env = {"JOBWARDEN_DATABASE_URL": database_url, "JOBWARDEN_QUEUE": queue}
    stack = Stack({**env, "JOBWARDEN_KEY_PREFIX": prefix})
    redis = Redis.from_url(settings.broker_url)
    publisher = make_celery(settings)
    waiting = f"{prefix}:celery:{settings.notifications_queue}"
    try:
        stack.start_worker("poller", concurrency=1, notifications=False)
        stack.wait_ready("poller")
        # Routed by the app's task_routes alone: the publisher names no queue.
        publisher.send_task("jobwarden.deliver_notifications", args=[f"tenant-{run}"])
        # Its result kept, as evidence it ran (the worker logs no per-task line at INFO).
        folded = publisher.send_task("jobwarden.fold_tallies", ignore_result=False)
        log = stack.log_dir / "poller.log"
        # The polling queue's task, published after the delivery, is taken and done...
        assert isinstance(folded.get(timeout=60), int)
        # ...while the delivery still waits on its own queue, never received.
        assert "jobwarden.deliver_notifications" not in log.read_text(errors="replace")
        assert redis.llen(waiting) == 1
    finally:
        stack.stop()
        redis.delete(waiting, f"{prefix}:celery:{queue}")
        redis.close()
        publisher.close()
