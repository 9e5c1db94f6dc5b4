"""Engines and sessions, created per process (after the Celery fork)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, create_engine
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


def dispose_all() -> None:
    for engine in _engines.values():
        engine.dispose()
    _engines.clear()
    _readers.clear()
    _makers.clear()


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
