"""Engines and sessions, created per process (after the Celery fork)."""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Final, cast

import psycopg
from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.pool import ConnectionPoolEntry

# A pooled connection unused this long is pinged at its next checkout: a firewall or the
# server may have dropped it without a word. One in steady use never is (issue 37: two
# pre-pings were two of an intake's seven statements).
IDLE_PING_SECONDS: Final = 30.0
# Replaced after this long whatever happens, so no connection outlives a quiet failover.
RECYCLE_SECONDS: Final = 1800
_IDLE_SINCE: Final = "jobwarden.idle_since"  # ConnectionPoolEntry.info: when it came back


def _server_hung_up(driver: Any) -> bool:
    """Whether an idle connection's socket has something to read, without a round trip.

    An idle connection is told nothing, unless the server is ending it: a backend
    terminated (pg_terminate_backend, a restart, idle_session_timeout) sends its FATAL
    error and closes, so the socket turns readable. Pooled connections never LISTEN, so
    nothing else arrives unasked.
    """
    conn = cast("psycopg.Connection[Any]", driver)
    if conn.closed or conn.broken:
        return True
    try:
        poller = select.poll()
        poller.register(conn.pgconn.socket, select.POLLIN | select.POLLERR | select.POLLHUP)
        return bool(poller.poll(0))
    except (OSError, psycopg.Error):
        return True


def _check_on_checkout(engine: Engine) -> None:
    """Pessimistic disconnect handling without a ping per checkout (SQLAlchemy's
    "custom pessimistic ping" recipe): a connection the server hung up on, or one idle
    past IDLE_PING_SECONDS that fails a ping, raises DisconnectionError, which makes the
    pool drop it and hand out a fresh one, so the caller never sees it. A connection that
    dies in use is invalidated by SQLAlchemy with every older one in the pool."""

    @event.listens_for(engine, "checkin")
    def _returned(driver: Any, entry: ConnectionPoolEntry) -> None:
        entry.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _handed_out(driver: Any, entry: ConnectionPoolEntry, proxy: Any) -> None:
        if _server_hung_up(driver):
            raise DisconnectionError("the server closed this pooled connection")
        since = entry.info.get(_IDLE_SINCE)
        if since is not None and time.monotonic() - since > IDLE_PING_SECONDS:
            try:
                engine.dialect.do_ping(driver)
            except psycopg.Error as exc:
                raise DisconnectionError(
                    "a pooled connection idle too long failed its ping"
                ) from exc


_engines: dict[tuple[int, str], Engine] = {}


def engine_for(url: str) -> Engine:
    """One pooled engine per (process, URL); a forked child never reuses its parent's sockets."""
    key = (os.getpid(), url)
    engine = _engines.get(key)
    if engine is None:
        engine = create_engine(
            url, pool_pre_ping=False, pool_recycle=RECYCLE_SECONDS, pool_size=5, max_overflow=5
        )
        _check_on_checkout(engine)
        _engines[key] = engine
    return engine


_claim_engines: dict[tuple[int, str, str], Engine] = {}


@contextmanager
def claim_session(url: str, *, lock_timeout: str) -> Iterator[Session]:
    """A session in autocommit whose connections wait on a lock at most ``lock_timeout``.

    For intake's claim, one statement that is its own transaction: the timeout is set
    once per connection, at connect (``-c lock_timeout``), instead of a BEGIN, a ``SET
    LOCAL`` and a COMMIT around every claim. A lock wait past it fails the statement
    with 55P03 (lock_not_available); autocommit leaves nothing to roll back.
    """
    key = (os.getpid(), url, lock_timeout)
    engine = _claim_engines.get(key)
    if engine is None:
        engine = create_engine(
            url,
            pool_pre_ping=False,
            pool_recycle=RECYCLE_SECONDS,
            pool_size=5,
            max_overflow=5,
            isolation_level="AUTOCOMMIT",
            connect_args={"options": f"-c lock_timeout={lock_timeout}"},
        )
        _check_on_checkout(engine)
        _claim_engines[key] = engine
    # The connection checked out once and held, as step_session's: the claim's statements
    # (raw_execute, driver_execute) then run on its psycopg connection without a trip
    # through the Session's transaction bookkeeping for each.
    with engine.connect() as connection, Session(connection, expire_on_commit=False) as session:
        session.info[_DRIVER] = (connection, connection.connection.driver_connection)
        yield session


_step_engines: dict[tuple[int, str], Engine] = {}
# A process's main thread keeps its step connection from one step to the next (a prefork
# worker runs every task there); other threads check one out per step.
_step_connections: dict[tuple[int, str], Connection] = {}
_DRIVER = "jobwarden.driver"  # session.info: a step or claim session's connection, its psycopg one


def dispose_all() -> None:
    for connection in _step_connections.values():
        connection.close()
    _step_connections.clear()
    for engine in (*_engines.values(), *_step_engines.values(), *_claim_engines.values()):
        engine.dispose()
    _engines.clear()
    _step_engines.clear()
    _claim_engines.clear()
    _readers.clear()
    _makers.clear()


@contextmanager
def step_session(url: str) -> Iterator[Session]:
    """One connection for a whole step, in autocommit, checked out once, never pre-pinged.

    A step's statements are each atomic on their own (a load; a fenced write that inserts
    its events in the same statement), so autocommit makes each write its one commit.
    No transaction is open while the step waits on a provider. A connection the server
    dropped fails the step's first statement (``connection_invalidated``); the caller
    retries the step on a fresh one instead of paying a ping on every checkout.
    """
    key = (os.getpid(), url)
    engine = _step_engines.get(key)
    if engine is None:
        engine = create_engine(
            url, pool_pre_ping=False, pool_size=2, max_overflow=3, isolation_level="AUTOCOMMIT"
        )
        _step_engines[key] = engine
    if threading.current_thread() is not threading.main_thread():
        with engine.connect() as connection, Session(connection, expire_on_commit=False) as session:
            session.info[_DRIVER] = (connection, connection.connection.driver_connection)
            yield session
        return
    # The main thread's connection is held between steps: a checkout, its reset and the
    # check-in were a twentieth of a poll's CPU in a worker (py-spy, issue 37), and in
    # autocommit a step leaves nothing open on it. One invalidated by a lost server (the
    # step that met it is retried, see above) or closed is replaced here.
    held = _step_connections.get(key)
    if held is None or held.closed or held.invalidated:
        if held is not None:
            held.close()  # an invalidated one goes back to its pool, which discards it
        held = _step_connections[key] = engine.connect()
    with Session(held, expire_on_commit=False) as session:
        session.info[_DRIVER] = (held, held.connection.driver_connection)
        yield session


def driver_execute(
    session: Session, statement: str, params: Mapping[str, Any]
) -> psycopg.Cursor[Any]:
    """Run a prepared text statement on the session's own psycopg connection.

    For the hot path's two statements (a step's load and its fenced write): SQLAlchemy's
    result machinery rebuilt the load's 56-column metadata on every call, a third of the
    load's CPU. Errors still reach callers as SQLAlchemy's DBAPIError subclasses, and a
    dropped connection is invalidated here, as SQLAlchemy would, so the pool never hands
    it out again and the step sees ``connection_invalidated`` (its retry signal).
    """
    held = session.info.get(_DRIVER)
    if held is not None and not held[0].invalidated:
        connection, driver = held  # a step session's own: no Session.connection() per call
    else:
        connection = session.connection()
        driver = connection.connection.driver_connection
    raw = cast("psycopg.Connection[Any]", driver)
    try:
        return raw.execute(statement, params)
    except psycopg.Error as exc:
        lost = connection.dialect.is_disconnect(exc, raw, None)
        if lost:
            connection.invalidate(exc)
        raise DBAPIError.instance(
            statement,
            dict(params),
            exc,
            psycopg.Error,
            connection_invalidated=lost,
            dialect=connection.dialect,
        ) from exc


def raw_execute(session: Session, statement: str, params: Sequence[Any]) -> psycopg.Cursor[Any]:
    """Run a statement with ``$n`` placeholders on the session's psycopg connection as it is
    (a ``psycopg.RawCursor``: no placeholder conversion), errors as driver_execute's."""
    held = session.info.get(_DRIVER)
    if held is not None and not held[0].invalidated:
        connection, driver = held  # a claim or step session's own connection
    else:
        connection = session.connection()
        driver = connection.connection.driver_connection
    raw = cast("psycopg.Connection[Any]", driver)
    try:
        return psycopg.RawCursor(raw).execute(statement, params)
    except psycopg.Error as exc:
        dialect: Any = connection.dialect  # typed for the DB-API's classes, not psycopg's
        lost = dialect.is_disconnect(exc, raw, None)
        if lost:
            connection.invalidate(exc)
        raise DBAPIError.instance(
            statement,
            list(params),
            exc,
            psycopg.Error,
            connection_invalidated=lost,
            dialect=connection.dialect,
        ) from exc


_readers: dict[tuple[int, str], Engine] = {}


@contextmanager
def snapshot(url: str) -> Iterator[Session]:
    """A session for one read in autocommit: one round trip, no BEGIN/COMMIT around it.

    Only for a read whose result a fenced write checks later (the version).
    """
    key = (os.getpid(), url)
    reader = _readers.get(key)
    if reader is None:
        reader = engine_for(url).execution_options(isolation_level="AUTOCOMMIT")
        _readers[key] = reader
    with Session(reader, expire_on_commit=False) as session:
        yield session


_makers: dict[tuple[int, str], sessionmaker[Session]] = {}


@contextmanager
def transaction(url: str) -> Iterator[Session]:
    """A session whose transaction commits on success and rolls back on any error.

    Helpers take the session and never commit; only this wrapper does.
    """
    key = (os.getpid(), url)
    maker = _makers.get(key)
    if maker is None:
        maker = sessionmaker(engine_for(url), expire_on_commit=False)
        _makers[key] = maker
    with maker() as session, session.begin():
        yield session


@contextmanager
def wrap_exceptions(translations: Mapping[str, Callable[[], Exception]]) -> Iterator[None]:
    """Translate the driver errors a statement expects into the domain's, in one place.

    ``translations`` maps a SQLSTATE (never message text, STYLE.md) to what it means
    for the caller; any other database error propagates as it is. Like procrastinate's
    connector ``wrap_exceptions``: the store raises domain errors, its callers never
    look at a driver's codes. The transaction is still aborted: the caller's wrapper
    rolls it back as for any error.
    """
    try:
        yield
    except DBAPIError as exc:
        translate = translations.get(getattr(exc.orig, "sqlstate", None) or "")
        if translate is None:
            raise
        raise translate() from exc
