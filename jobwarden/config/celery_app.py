"""The Celery application, configured for crash safety on a Redis broker.

Late acks plus reject-on-worker-lost mean a killed worker's message is
redelivered rather than lost; every task re-checks the row, so running twice
is harmless. Countdowns stay far below the visibility timeout (longer waits
are parked in Postgres), which avoids Redis redelivering held ETA tasks.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from celery import Celery
from celery.app.trace import LOG_RECEIVED, LOG_SUCCESS
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    worker_init,
    worker_process_init,
    worker_process_shutdown,
)
from celery.utils.log import get_multiprocessing_logger

from jobwarden.config.broker import transport_for
from jobwarden.config.settings import Settings, get_settings
from jobwarden.models.provider.wakeup_levels import LEVELS
from jobwarden.observability import telemetry
from jobwarden.observability.logs import install_formatter


def make_celery(settings: Settings) -> Celery:
    # Only jobwarden.submit returns a value (the intake answer); every other task ignores results.
    app = Celery(
        "jobwarden",
        broker=settings.broker_url,
        backend=settings.redis_url,
        include=[
            "jobwarden.tasks.pipeline",
            "jobwarden.tasks.humans.notifications",
            "jobwarden.tasks.schedules",
            "jobwarden.tasks.history_archive",
            "jobwarden.tasks.metrics_tallies",
            # Not tasks: the consumer step stamping the worker's queues (issue 36, point 5).
            "jobwarden.tasks.heartbeat",
        ],
    )
    transport = {
        "visibility_timeout": settings.visibility_timeout_seconds,
        "global_keyprefix": f"{settings.key_prefix}:celery:",
    }
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_acks_on_failure_or_timeout=True,
        worker_prefetch_multiplier=1,
        task_ignore_result=True,
        task_serializer="json",
        accept_content=["json"],
        task_default_queue=settings.queue,
        # Notifications go to a queue of their own, consumed by the notifications worker
        # (docker-compose.yml) and never by the workers that poll: a slow receiver must
        # never take a poller's seat (issue 33, finding 8; tasks/humans/notifications.py).
        task_routes={
            "jobwarden.notify": {"queue": settings.notifications_queue},
            "jobwarden.deliver_notifications": {"queue": settings.notifications_queue},
        },
        broker_transport=transport_for(settings.broker_url),
        # Ten priority levels, 0 taken first (kombu's Redis transport keeps a list per
        # level and BRPOPs them in order): wake-ups at a rate-limited provider are published
        # at their tenant's fair level (models/provider/wakeup_levels.py), so a tenant's
        # long queue does not stand in front of another's few. Everything else stays at 0.
        # The separator stays kombu's default, so queues and bindings keep their keys.
        broker_transport_options={**transport, "priority_steps": list(range(LEVELS))},
        result_backend_transport_options=transport,
        result_expires=3600,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        # Task events cost the worker's main process ~3 ms per poll (issue 12): off by
        # default. Flower (enable_events, on by default) broadcasts enable_events to the
        # workers it watches every 5 s, so monitoring turns them on only while it runs.
        worker_send_task_events=False,
        beat_schedule={
            "jobwarden-sweep": {
                "task": "jobwarden.sweep",
                "schedule": settings.sweep_interval_seconds,
                # A sweep older than one interval is useless: the next one covers it.
                # ignore_result: a sweep answers in the rows it wakes; no result subscription.
                "options": {"expires": settings.sweep_interval_seconds, "ignore_result": True},
            },
            # The notification relay and the approval reminders: apart from the sweep, on
            # the notifications queue (task_routes), so a slow receiver delays only
            # notifications, never a wake-up nor a poll.
            "jobwarden-notify": {
                "task": "jobwarden.notify",
                "schedule": settings.notify_interval_seconds,
                "options": {"expires": settings.notify_interval_seconds, "ignore_result": True},
            },
            # Schedules: beat only rings; the due slots are read from Postgres, so a second
            # beat or a restarted one never fires a slot twice (tasks/schedules.py).
            "jobwarden-schedules": {
                "task": "jobwarden.schedules",
                "schedule": settings.schedule_interval_seconds,
                "options": {"expires": settings.schedule_interval_seconds, "ignore_result": True},
            },
            # The history's months: partitions made ahead, old months archived when a
            # retention is set (tasks/history_archive.py).
            "jobwarden-history": {
                "task": "jobwarden.history",
                "schedule": settings.history_interval_seconds,
                "options": {"expires": settings.history_interval_seconds, "ignore_result": True},
            },
            # /metrics: the deltas written since the last fold, added to their totals, so
            # a scrape sums one interval of writes, not the history (tasks/metrics_tallies.py).
            "jobwarden-fold-tallies": {
                "task": "jobwarden.fold_tallies",
                "schedule": settings.tally_fold_interval_seconds,
                "options": {"expires": settings.tally_fold_interval_seconds, "ignore_result": True},
            },
        },
        timezone="UTC",
    )
    return app


app = make_celery(get_settings())


# Celery's own line for each task it receives and each it finishes well. A step already
# says, once, what both would (`step_done`: the operation, its trace, from, to, next); the
# two INFO lines cost the worker ~45 µs each through the JSON formatter, on every poll
# (issue 37). Only these two messages are dropped: a task's failure, and a stop Celery
# logs at INFO as "raised expected" (Flower's FAILURE, without a traceback), still log.
# --loglevel=DEBUG shows them again.
PER_TASK_LOGGERS = ("celery.worker.strategy", "celery.app.trace")
PER_TASK_MESSAGES = frozenset({LOG_RECEIVED, LOG_SUCCESS})


class _NoPerTaskLines(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg not in PER_TASK_MESSAGES


_NO_PER_TASK_LINES = _NoPerTaskLines()


def _structured_logs(logger: Any, loglevel: int | str | None = None, **_: Any) -> None:
    # Celery keeps its handlers (stderr or --logfile) and its levels; only the line format
    # changes, to jobwarden's structured one (JOBWARDEN_LOG_FORMAT, jobwarden.observability.logs).
    install_formatter(logger, get_settings().log_format)
    level = logging.getLevelName(loglevel) if isinstance(loglevel, str) else loglevel
    if not isinstance(level, int) or level > logging.DEBUG:
        for name in PER_TASK_LOGGERS:
            logging.getLogger(name).addFilter(_NO_PER_TASK_LINES)  # once: a set of filters
    # The pool's own logger ("multiprocessing": a child lost to SIGKILL, say) has a handler
    # of its own that Celery configures with the same setup; it speaks JSON too.
    install_formatter(get_multiprocessing_logger(), get_settings().log_format)


after_setup_logger.connect(_structured_logs, weak=False)
after_setup_task_logger.connect(_structured_logs, weak=False)


def _tracing_checked(sender: Any = None, **_: Any) -> None:
    # In the main process, before the pool forks: a bad OTEL_* setting stops start-up
    # with one line and exit status 2, as `jobwarden api` does. Celery logs an exception
    # from a signal handler (a traceback) and starts anyway, so the handler exits itself:
    # SystemExit is no Exception, Celery lets it through. Running on without the tracing
    # the operator asked for would leave them looking for traces that never come.
    # A pool without processes (solo, threads) traces right here.
    try:
        telemetry.check()
        if "prefork" not in str(getattr(sender, "pool_cls", "")).lower():
            telemetry.setup("jobwarden-worker")
    except telemetry.TelemetryConfigError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None


def _tracing(**_: Any) -> None:
    # Each prefork pool process sets up its own exporter (jobwarden.observability.telemetry).
    telemetry.setup("jobwarden-worker")


def _tracing_flushed(**_: Any) -> None:
    telemetry.shutdown()


worker_init.connect(_tracing_checked, weak=False)
worker_process_init.connect(_tracing, weak=False)
worker_process_shutdown.connect(_tracing_flushed, weak=False)
