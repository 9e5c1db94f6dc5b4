"""Pooled connections are not pinged on every checkout, yet one the server ended is never
handed to a request (models/persistence/db.py, issue 37).

Intake's two statements (the token lookup, the claim) used to pay a pre-ping each. Now a
checkout looks at the socket instead: a backend that was terminated has said so (its
FATAL message and the close make the socket readable), and the pool replaces it before
anyone sends on it. The backends ended here are this test's own pooled connections, in
this run's scratch database, ended with pg_terminate_backend: the server itself is never
restarted.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from jobwarden.api.app import create_app
from jobwarden.config.settings import get_settings
from jobwarden.models.persistence import db
from jobwarden.tasks.intake import LOCK_TIMEOUT
from tests.api_server import serving
from tests.integration.test_api_intake import post, token


@pytest.fixture(scope="module")
def api(database_url: str) -> Iterator[str]:
    # No token cache: the token lookup must go to Postgres on every request.
    app = create_app(get_settings().model_copy(update={"api_token_cache_seconds": 0}))
    with serving(app) as url:
        yield url


def _idle_backends(engine: Engine) -> list[int]:
    """The backend pids of every connection idle in ``engine``'s pool, left pooled."""
    idle = engine.pool.checkedin()  # type: ignore[attr-defined]
    with ExitStack() as held:
        connections = [held.enter_context(engine.connect()) for _ in range(idle)]
        return [int(c.exec_driver_sql("SELECT pg_backend_pid()").scalar_one()) for c in connections]


def _terminate(database_url: str, pids: list[int]) -> None:
    """End ``pids`` and wait (bounded) until the server has let them go."""
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            ended = text("SELECT pg_terminate_backend(p) FROM unnest(:pids) p")
            conn.execute(ended, {"pids": pids})
            deadline = time.monotonic() + 30
            while conn.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:pids)"),
                {"pids": pids},
            ).scalar_one():
                assert time.monotonic() < deadline, "the terminated backends did not exit"
                time.sleep(0.02)  # polling a condition (the backends gone), with a deadline
    finally:
        admin.dispose()


def test_a_request_after_its_pooled_backends_were_terminated_is_answered_not_a_500(
    api: str, database_url: str
) -> None:
    bearer = token(database_url)
    key = secrets.token_hex(8)
    assert post(api, bearer, key=key).status_code == 201  # both pools now hold a connection
    claims = db._claim_engines[next(k for k in db._claim_engines if k[2] == LOCK_TIMEOUT)]
    lookups = db.engine_for(database_url)
    ended = _idle_backends(claims) + _idle_backends(lookups)
    assert ended
    _terminate(database_url, ended)
    # The token lookup and the claim each check out a connection the server ended.
    created = post(api, bearer, key=secrets.token_hex(8))
    assert created.status_code == 201, created.text
    replayed = post(api, bearer, key=key)
    assert replayed.status_code == 201, replayed.text
    assert replayed.headers["Idempotent-Replayed"] == "true"
    assert not set(ended) & set(_idle_backends(claims) + _idle_backends(lookups))


def _backend(session: Session) -> int:
    return int(session.execute(text("SELECT pg_backend_pid()")).scalar_one())


def test_a_workers_steps_share_one_held_connection_and_a_lost_one_is_replaced(
    database_url: str,
) -> None:
    # A prefork worker runs every step in its main thread: the step's connection is held
    # from one step to the next (a checkout, its reset and the check-in were a twentieth
    # of a poll's CPU), so consecutive steps meet the same backend and the pool lends
    # nothing more. One the server ended fails its step's first statement, which marks it
    # invalidated (the step is retried, tasks/pipeline.py), and the next step gets a new
    # one. Other threads check one out per step and give it back.
    db.dispose_all()
    with db.step_session(database_url) as session:
        first = _backend(session)
    with db.step_session(database_url) as session:
        assert _backend(session) == first
    engine = db._step_engines[next(k for k in db._step_engines if k[1] == database_url)]
    assert engine.pool.checkedout() == 1  # type: ignore[attr-defined]

    def in_a_thread() -> None:
        with db.step_session(database_url) as session:
            seen.append(_backend(session))

    seen: list[int] = []
    worker = threading.Thread(target=in_a_thread)
    worker.start()
    worker.join(timeout=30)
    assert seen and seen[0] != first
    assert engine.pool.checkedout() == 1  # type: ignore[attr-defined]

    _terminate(database_url, [first])
    with pytest.raises(DBAPIError) as lost, db.step_session(database_url) as session:
        db.driver_execute(session, "SELECT 1", {})
    assert lost.value.connection_invalidated
    with db.step_session(database_url) as session:
        assert _backend(session) != first
    db.dispose_all()
