"""Private PostgreSQL and Redis servers for the chaos tests, on free ports in a temporary folder.

A test that restarts a server must own it: the machine's Postgres and Redis serve other
people, and the rest of the suite is isolated from them only by database name and key
prefix. These servers are started from the same binaries (``initdb``/``pg_ctl`` and
``redis-server``), never persist anything, and are removed when the test ends.

When a server cannot be started, ``PrivateServerError`` says what is missing; the tests
fail with it rather than skip, so a chaos test can never silently not run on CI.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kombu import pools as kombu_pools

from jobwarden.demo.embedded import LocalPostgres, LocalRedis, ServerStartError
from jobwarden.demo.harness import Stack

# Raised when a private server cannot be started; the tests fail with it, never skip.
PrivateServerError = ServerStartError


def postgres_bin_dir() -> Path:
    """Where initdb and pg_ctl live: JOBWARDEN_TEST_PG_BIN, PATH, or the newest Debian cluster."""
    explicit = os.environ.get("JOBWARDEN_TEST_PG_BIN")
    candidates = [Path(explicit)] if explicit else []
    on_path = shutil.which("pg_ctl")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)
    debian = sorted(
        Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name), reverse=True
    )
    candidates += [*debian, Path("/usr/local/pgsql/bin")]
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "pg_ctl").is_file():
            return folder
    raise PrivateServerError(
        "no initdb/pg_ctl found (looked at JOBWARDEN_TEST_PG_BIN, PATH, /usr/lib/postgresql/*/bin);"
        " install the PostgreSQL server binaries to run the Postgres-restart test"
    )


class PrivatePostgres(LocalPostgres):
    """A throwaway cluster from the machine's PostgreSQL binaries."""

    def __init__(self) -> None:
        super().__init__(postgres_bin_dir(), prefix="jobwarden-private-pg-")


class PrivateRedis(LocalRedis):
    """A non-persistent redis-server from PATH."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise PrivateServerError(
                "redis-server is not on PATH; install Redis (or Valkey) "
                "to run the Redis-restart test"
            )
        super().__init__(binary, prefix="jobwarden-private-redis-")


@contextlib.contextmanager
def pointed_at(env: dict[str, str]) -> Iterator[None]:
    """Point this test process (settings, runtime, the Celery app's broker) at other servers.

    The workers read their environment at start; the test process submits operations
    itself, so its settings, Redis client and publisher must follow too, and return to
    the run's own servers afterwards.
    """
    from jobwarden.config.celery_app import app
    from jobwarden.config.settings import get_settings
    from jobwarden.tasks import runtime

    saved_env = {name: os.environ.get(name) for name in env}
    saved_conf = {
        key: app.conf[key]
        for key in (
            "broker_url",
            "result_backend",
            "broker_transport_options",
            "result_backend_transport_options",
        )
    }
    os.environ.update(env)
    try:
        _reconfigure(app, get_settings, runtime)
        yield
    finally:
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _reconfigure(app, get_settings, runtime, saved_conf)


def _reconfigure(
    app: Any, get_settings: Any, runtime: Any, conf: dict[str, Any] | None = None
) -> None:
    get_settings.cache_clear()
    runtime.reset()
    settings = get_settings()
    transport = {
        **app.conf.broker_transport_options,
        "global_keyprefix": f"{settings.key_prefix}:celery:",
    }
    app.conf.update(
        conf
        or {
            "broker_url": settings.broker_url,
            "result_backend": settings.redis_url,
            "broker_transport_options": transport,
            "result_backend_transport_options": transport,
        }
    )
    # Celery caches its connection and producer pools, and kombu keeps them in registries
    # keyed by broker URL: closing one there left a closed pool that the next publish to
    # the same URL met ("Acquire on closed pool"), so enqueue failed silently and only the
    # sweeper delivered. kombu.pools.reset closes them and empties the registries (what
    # Celery does after a fork), so the next publish opens a connection to the broker
    # now configured.
    kombu_pools.reset()  # type: ignore[no-untyped-call]  # kombu leaves it untyped
    app._pool = None
    app.amqp._producer_pool = None
    # The result backend is cached with its own Redis client: one left pointing at a
    # stopped private server failed the next result subscription ("Retry limit exceeded
    # while trying to reconnect to the Celery result store").
    close_result_backends(app)
    app._backend_cache = None
    app._local.__dict__.pop("backend", None)


def close_result_backends(app: Any) -> None:
    """Close the sockets of the Celery result backends this thread can reach.

    A backend and its result consumer refer to each other, so one dropped with a result
    subscription open is freed only by the garbage collector, which may finalize the
    socket before redis-py's own finalizer closes it: a ResourceWarning that failed
    whichever later test was running then, in runs where a test waiting on a result
    (test_intake, test_api_doors) and a restart test shared a process. The consumer
    also forgets its subscription: each of that backend's AsyncResults, collected later
    in any thread, unsubscribes through it, and a closed one would connect again, a
    socket nobody closes (traced by tests/socket_origins.py to ``AsyncResult.__del__``).
    """
    found = (app._backend_cache, app._local.__dict__.get("backend"))
    for backend in {id(b): b for b in found if b is not None}.values():
        backend.result_consumer.stop()  # the subscription's own connection
        backend.result_consumer._pubsub = None  # cancel_for is a no-op without one
        client = backend.__dict__.get("client")  # a cached property: only if it was made
        if client is not None:
            client.connection_pool.disconnect()


@contextlib.contextmanager
def machine_servers_untouched(database_url: str, redis_url: str) -> Iterator[None]:
    """Hold one connection to each of the run's own servers across the block; afterwards the
    same connections must still answer, from servers that were never restarted."""
    import psycopg
    from redis import Redis

    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    started = "SELECT pg_backend_pid(), pg_postmaster_start_time()"
    with psycopg.connect(dsn, autocommit=True) as conn:
        client = Redis.from_url(redis_url, socket_timeout=5)
        try:
            before_pg = conn.execute(started).fetchone()
            before_redis = (client.client_id(), client.info("server")["run_id"])
            yield
            assert conn.execute(started).fetchone() == before_pg, "the run's Postgres restarted"
            after_redis = (client.client_id(), client.info("server")["run_id"])
            assert after_redis == before_redis, "the run's Redis restarted"
        finally:
            client.close()


@dataclass(frozen=True, slots=True)
class PrivateRun:
    """Private servers, a database on them and a stack (two workers, one beat) using both."""

    postgres: PrivatePostgres
    redis: PrivateRedis
    stack: Stack
    database_url: str


@contextlib.contextmanager
def private_run(worker_env: dict[str, str]) -> Iterator[PrivateRun]:
    """Start private Postgres and Redis, migrate, start the stack; remove all of it after."""
    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.models.persistence.migrate import upgrade

    postgres = PrivatePostgres()
    redis = PrivateRedis()
    try:
        postgres.start()
        redis.start()
        database_url = postgres.create_database("jobwarden_private")
        upgrade(database_url)
        prefix = f"{os.environ.get('JOBWARDEN_KEY_PREFIX', 'jwtest')}-private"
        env = {
            **worker_env,
            "JOBWARDEN_DATABASE_URL": database_url,
            "JOBWARDEN_REDIS_URL": redis.url,
            "JOBWARDEN_BROKER_URL": redis.url,
            "JOBWARDEN_KEY_PREFIX": prefix,
            "JOBWARDEN_QUEUE": prefix,
        }
        with pointed_at(env):
            stack = Stack(env)
            try:
                stack.start_worker("private-w1")
                stack.start_worker("private-w2")
                stack.start_beat("private-beat")
                stack.wait_ready("private-w1")
                stack.wait_ready("private-w2")
                yield PrivateRun(postgres, redis, stack, database_url)
            finally:
                stack.stop()
                # Pooled connections to the private cluster die with it.
                dispose_all()
    finally:
        redis.remove()
        postgres.remove()
