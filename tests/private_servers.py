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
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jobwarden.harness import Stack


class PrivateServerError(RuntimeError):
    """A private server could not be started; the message names the missing piece."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


def _wait_port(port: int, *, up: bool, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while _answers(port) != up:
        if time.monotonic() > deadline:
            state = "accept" if up else "close"
            raise PrivateServerError(f"{what} on 127.0.0.1:{port} did not {state} in {timeout}s")
        time.sleep(0.05)


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


class PrivatePostgres:
    """A throwaway cluster: trust authentication, TCP on 127.0.0.1 only, no Unix socket.

    PostgreSQL refuses to run as root, so under root the cluster belongs to the existing
    ``postgres`` OS user (``runuser``); no user is ever created.
    """

    def __init__(self) -> None:
        self.bin = postgres_bin_dir()
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="jobwarden-private-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self._as: list[str] = []
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                raise PrivateServerError(
                    "running as root and there is no 'postgres' OS user to own a private "
                    "cluster; run the tests as an ordinary user or create that user"
                ) from None
            runuser = shutil.which("runuser")
            if runuser is None:
                raise PrivateServerError("running as root and runuser is missing")
            os.chown(self.root, owner.pw_uid, owner.pw_gid)
            self._as = [runuser, "-u", "postgres", "--"]

    @property
    def admin_url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 60) -> None:
        done = subprocess.run(
            [*self._as, *args], capture_output=True, text=True, timeout=timeout, check=False
        )
        if done.returncode != 0:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise PrivateServerError(
                f"{Path(args[0]).name} {args[1] if len(args) > 1 else ''} failed "
                f"({done.returncode}): {done.stderr.strip() or done.stdout.strip()}\n{tail}"
            )

    def start(self) -> None:
        if not self.data.exists():
            self._run(
                str(self.bin / "initdb"),
                *("-D", str(self.data), "-U", "postgres", "-A", "trust", "-E", "UTF8"),
                "--no-sync",
            )
        # fsync off: the cluster is thrown away; an immediate restart still runs crash recovery.
        options = f"-p {self.port} -k '' -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run(
            str(self.bin / "pg_ctl"),
            *("start", "-w", "-t", "60", "-D", str(self.data), "-l", str(self.log)),
            *("-o", options),
        )
        _wait_port(self.port, up=True, timeout=30, what="private PostgreSQL")

    def stop(self, mode: str = "fast") -> None:
        self._run(str(self.bin / "pg_ctl"), "stop", "-w", "-m", mode, "-D", str(self.data))

    def restart(self) -> None:
        """Like a crash: every connection and open transaction is cut, then recovery runs."""
        self.stop("immediate")
        self.start()

    def create_database(self, name: str) -> str:
        from sqlalchemy import create_engine, text

        admin = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        finally:
            admin.dispose()
        return self.url(name)

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            with contextlib.suppress(PrivateServerError, subprocess.TimeoutExpired):
                self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


class PrivateRedis:
    """A redis-server that never saves: ``--save "" --appendonly no`` in its own folder."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise PrivateServerError(
                "redis-server is not on PATH; install Redis (or Valkey) "
                "to run the Redis-restart test"
            )
        self.port = free_port()
        self.root = Path(tempfile.mkdtemp(prefix="jobwarden-private-redis-"))
        self.command = [
            binary,
            *("--port", str(self.port), "--bind", "127.0.0.1"),
            *("--save", "", "--appendonly", "no", "--dir", str(self.root)),
            *("--logfile", str(self.root / "redis.log")),
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            self.command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            _wait_port(self.port, up=True, timeout=20, what="private redis-server")
        except PrivateServerError:
            log = self.root / "redis.log"
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise PrivateServerError(f"private redis-server did not start: {tail}") from None

    def stop(self) -> None:
        """SIGKILL, so nothing is saved or handed over: every key, lease and message is gone."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.proc = None
        _wait_port(self.port, up=False, timeout=10, what="private redis-server")

    def restart(self) -> None:
        self.stop()
        self.start()

    def remove(self) -> None:
        with contextlib.suppress(PrivateServerError):
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


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
    # Celery caches its connection and producer pools; drop them so the next publish
    # opens a connection to the broker now configured (what Celery does after a fork).
    with contextlib.suppress(Exception):
        app.pool.force_close_all()
    app._pool = None
    app.amqp._producer_pool = None


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
    from jobwarden.models.db import dispose_all
    from jobwarden.models.migrate import upgrade

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
