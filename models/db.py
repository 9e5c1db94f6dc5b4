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


@contextmanager
def transaction(url: str) -> Iterator[Session]:
    """A session whose transaction commits on success and rolls back on any error.

    Helpers take the session and never commit; only this wrapper does.
    """
    maker = sessionmaker(engine_for(url), expire_on_commit=False)
    with maker() as session, session.begin():
        yield session
