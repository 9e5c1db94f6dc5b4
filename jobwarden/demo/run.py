"""`jobwarden demo`: the whole pipeline against the sandbox provider.

Starts the sandbox, one worker and beat against the configured Postgres and
Redis, submits five operations that exercise the happy path, a lost create
response, a 503 with Retry-After, an unknown remote state and a cancel race,
then prints each outcome and its story.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console

from jobwarden.demo.harness import Stack, wait_for
from jobwarden.observability.story import event_line

SCENARIOS: list[tuple[str, dict[str, Any], str]] = [
    (
        "happy path, 2 failed items of 500",
        {"polls_to_finish": 4, "result_items": 500, "result_failed_items": 2},
        "succeeded",
    ),
    ("create response lost", {"create_response": "drop", "polls_to_finish": 2}, "succeeded"),
    (
        "503 with Retry-After 2",
        {"status_errors": {"code": 503, "count": 1, "retry_after": 2}, "polls_to_finish": 2},
        "succeeded",
    ),
    ("unknown remote state", {"unknown_state_at": 2}, "escalated"),
    ("cancel race", {"cancel": "race", "polls_to_finish": 40}, "succeeded"),
]


def _where(variable: str, address: str) -> str:
    origin = variable if os.environ.get(variable) else f"{variable} not set, the default"
    return f"{address} ({origin})"


def check_services(settings: Any) -> None:
    """Raise SettingsError, one line naming the variable and address, for a server that
    does not answer: before any process starts, instead of a long traceback or a silent wait."""
    from redis import Redis
    from redis.exceptions import RedisError
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from jobwarden.models.errors import SettingsError

    try:
        url = make_url(settings.database_url)
    except SQLAlchemyError as exc:
        raise SettingsError(f"JOBWARDEN_DATABASE_URL is not a database URL: {exc}") from None
    host = url.host or url.query.get("host") or "the default socket"
    address = f"{host}:{url.port or 5432}"
    # The maintenance database: the configured one may not exist yet (ensure_database makes it).
    engine = create_engine(url.set(database="postgres"), connect_args={"connect_timeout": 5})
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", exc)).strip().splitlines()[0]
        raise SettingsError(
            f"PostgreSQL is not reachable at {_where('JOBWARDEN_DATABASE_URL', address)}: {reason}"
        ) from None
    finally:
        engine.dispose()
    for variable, value in (
        ("JOBWARDEN_REDIS_URL", settings.redis_url),
        ("JOBWARDEN_BROKER_URL", settings.broker_url),
    ):
        client = Redis.from_url(value, socket_connect_timeout=5, socket_timeout=5)
        try:
            client.ping()
        except (RedisError, ValueError) as exc:
            pool = client.connection_pool.connection_kwargs
            where = pool.get("path") or f"{pool.get('host')}:{pool.get('port')}"
            raise SettingsError(
                f"Redis is not reachable at {_where(variable, where)}: {exc}"
            ) from None
        finally:
            client.close()


def run_demo(console: Console) -> int:
    """Run the scenarios; every process it starts is stopped on the way out, whatever happens
    (an error, Ctrl-C or SIGTERM), and a service that does not answer is one SettingsError."""
    # SIGTERM becomes SystemExit, so the finally below stops the worker and beat too.
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    from jobwarden.demo.sandbox.server import SandboxServer

    token = secrets.token_hex(16)
    sandbox = SandboxServer(token=token)
    sandbox.start()
    try:
        return _run(console, sandbox, token)
    finally:
        sandbox.stop()


def demo_routing(queue: str, key_prefix: str) -> dict[str, str]:
    """The demo's own Celery queue and Redis key prefix, beside the configured ones.

    A worker started from the README consumes the configured queue: were the demo's wake-ups
    sent there, that worker (without the sandbox's URL and token) would take them and the
    scenarios would end wrong. On queue and prefix of its own, only the demo's worker and
    beat see its tasks and leases. (A beat of the configured stack on the same database
    still sweeps every due row; it re-sends only one stalled past its redispatch delay.)
    """
    return {"JOBWARDEN_QUEUE": f"{queue}-demo", "JOBWARDEN_KEY_PREFIX": f"{key_prefix}-demo"}


def _check_celery_app_routing(settings: Any) -> None:
    """Raise RuntimeError when this process built the Celery app before the demo's routing
    was set: its publisher would send under another key prefix than the demo's worker reads."""
    built = sys.modules.get("jobwarden.config.celery_app")
    if built is None:
        return
    prefix = built.app.conf.broker_transport_options.get("global_keyprefix")
    if prefix != f"{settings.key_prefix}:celery:":
        raise RuntimeError(
            f"the Celery app was built with key prefix {prefix!r} before the demo set its own"
            f" ({settings.key_prefix!r}); run the demo in a process of its own"
        )


def _purge_own_queues(settings: Any) -> None:
    """Empty the demo's own queues once its worker and beat have stopped.

    Every operation has ended by then, but beat may have sent a sweep (or a worker a
    countdown) in the moment before they stopped: left on the demo's queue, no worker
    would ever take it. The queues are the demo's own (demo_routing), so nothing another
    worker reads is touched.
    """
    from jobwarden.config.celery_app import app

    with app.connection_for_write() as connection:
        channel = connection.default_channel
        for queue in (settings.queue, settings.notifications_queue):
            channel.queue_purge(queue)


def _run(console: Console, sandbox: Any, token: str) -> int:
    from jobwarden.config.settings import load_settings

    configured = load_settings()
    env = {
        **demo_routing(configured.queue, configured.key_prefix),
        "JOBWARDEN_SANDBOX_URL": sandbox.url,
        "JOBWARDEN_SANDBOX_TOKEN": token,
        "JOBWARDEN_SWEEP_INTERVAL_SECONDS": os.environ.get("JOBWARDEN_SWEEP_INTERVAL_SECONDS", "1"),
        "JOBWARDEN_REDISPATCH_AFTER_SECONDS": os.environ.get(
            "JOBWARDEN_REDISPATCH_AFTER_SECONDS", "5"
        ),
    }
    os.environ.update(env)
    # Before anything imports the Celery app: the app takes its key prefix from the
    # settings when it is built, and the CLI read (and cached) the configured ones at
    # start-up. Built from those, every create and cancel the demo sends would land on a
    # list under the configured prefix that no worker reads, each waiting for the demo's
    # beat to re-send it (issue 36).
    from jobwarden.config.settings import get_settings
    from jobwarden.tasks import runtime

    get_settings.cache_clear()
    runtime.reset()
    _check_celery_app_routing(get_settings())
    from jobwarden.models.intake.submission import SubmissionRequest
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import transaction
    from jobwarden.models.persistence.migrate import ensure_database, upgrade
    from jobwarden.models.states import AUTOMATION_STOPPED, TERMINAL
    from jobwarden.tasks.humans.interventions import request_cancel
    from jobwarden.tasks.intake import submit_request

    settings = get_settings()
    check_services(settings)
    ensure_database(settings.database_url)
    upgrade(settings.database_url)
    console.print(
        f"sandbox provider at {sandbox.url}; database {settings.database_url}; "
        f"broker {settings.broker_url}, queue {settings.queue} (the demo's own)"
    )
    # The worker's and beat's logs and beat's schedule file: removed at the end, kept (and
    # named) only when something went wrong, to be read.
    stack = Stack(env, log_dir=Path(tempfile.mkdtemp(prefix="jobwarden-demo-")))
    stopped = {s.value for s in TERMINAL | AUTOMATION_STOPPED}
    run = secrets.token_hex(4)
    failures = 0
    keep_logs = False
    try:
        stack.start_worker("demo-worker", concurrency=4)
        stack.start_beat("demo-beat")
        stack.wait_ready("demo-worker")
        ops: list[tuple[str, str, str]] = []
        for title, behaviour, expected in SCENARIOS:
            wanted = SubmissionRequest(
                tenant="demo",
                requested_by="demo",
                provider="sandbox",
                command={"kind": "report_export", "behaviour": behaviour},
                idempotency_key=f"demo-{run}-{len(ops)}",
            )
            answer = submit_request(wanted, door="python")
            assert answer.operation_id is not None
            ops.append((title, answer.operation_id, expected))
            console.print(f"submitted {title}: {answer.outcome.value} {answer.operation_id}")

        def state(op: str) -> str:
            with transaction(settings.database_url) as session:
                row = store.load(session, uuid.UUID(op))
                return row.state if row else "missing"

        race = ops[-1][1]
        wait_for(lambda: state(race) == "observing", timeout=60, what="the cancel-race job")
        request_cancel(race, "demo", "demonstrate a cancel racing completion")
        for title, op, _ in ops:
            wait_for(
                lambda op=op: state(op) in stopped,  # type: ignore[misc]
                timeout=90,
                what=title,
            )
        for title, op, expected in ops:
            with transaction(settings.database_url) as session:
                row = store.load(session, uuid.UUID(op))
                assert row is not None
                events = store.events_for(session, uuid.UUID(op))
                problems = store.verify(session, uuid.UUID(op))
            ok = row.state == expected and not problems
            failures += not ok
            reason = f" ({row.escalation_reason})" if row.escalation_reason else ""
            console.rule(
                f"{title}: [bold]{row.state}{reason}[/bold]"
                f" {'as expected' if ok else f'EXPECTED {expected}'}"
            )
            console.print(
                f"operation {op}, remote job {row.remote_job_id}, "
                f"{row.status_requests_used}/{row.max_status_requests} status requests,"
                f" chain {'verified' if not problems else 'BROKEN'}",
                highlight=False,
            )
            for ev in events:
                console.print("  " + event_line(ev), highlight=False)
        keep_logs = failures > 0
    except Exception:
        keep_logs = True
        raise
    finally:
        stack.stop()
        _purge_own_queues(settings)
        if keep_logs:
            console.print(f"the worker's and beat's logs are kept in {stack.log_dir}")
        else:
            shutil.rmtree(stack.log_dir, ignore_errors=True)
    console.rule("done" if not failures else f"{failures} scenario(s) not as expected")
    return 1 if failures else 0
