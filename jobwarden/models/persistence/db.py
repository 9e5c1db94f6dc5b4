"""Engines and sessions, created per process (after the Celery fork)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

import psycopg
from sqlalchemy import Engine, create_engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

_engines: dict[tuple[int, str], Engine] = {}


def engine_for(url: str) -> Engine:
    """One pooled engine per (process, URL); a forked child never reuses its parent's sockets."""
    key = (os.getpid(), url)
    engine = _engines.get(key)
    if engine is None:
        engine = create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)
        _engines[key] = engine
    return engine


_step_engines: dict[tuple[int, str], Engine] = {}
_DRIVER = "jobwarden.driver"  # session.info: a step session's connection and its psycopg one


def dispose_all() -> None:
    for engine in (*_engines.values(), *_step_engines.values()):
        engine.dispose()
    _engines.clear()
    _step_engines.clear()
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
    with engine.connect() as connection, Session(connection, expire_on_commit=False) as session:
        session.info[_DRIVER] = (connection, connection.connection.driver_connection)
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
