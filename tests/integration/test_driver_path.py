"""A step's load and fenced write run on the psycopg connection itself (models.db.driver_execute).

What SQLAlchemy did for them must still happen: a connection the server dropped is
invalidated (the pool never hands it out again) and reported as ``connection_invalidated``,
the pipeline's cue to run the step again; any other error keeps SQLAlchemy's exception
classes. The dropped connection is this test's own backend, ended with
pg_terminate_backend: the server itself is never restarted.
"""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError, IntegrityError

from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import driver_execute, step_session
from tests.integration.test_store import _insert, _new_row


def _terminate(database_url: str, pid: int) -> None:
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        admin.dispose()


def test_a_load_on_a_dropped_connection_is_invalidated_and_the_next_step_reconnects(
    database_url: str,
) -> None:
    op_id = _insert(database_url, _new_row())
    with step_session(database_url) as session:
        pid = driver_execute(session, "SELECT pg_backend_pid()", {}).fetchone()[0]  # type: ignore[index]
    # The same pooled connection is the next step's, and the server ends it in between.
    _terminate(database_url, pid)
    with pytest.raises(DBAPIError) as caught, step_session(database_url) as session:
        store.load(session, op_id)
    assert caught.value.connection_invalidated
    assert isinstance(caught.value.orig, psycopg.OperationalError)
    # Without the invalidation the pool would hand the dead connection back here.
    with step_session(database_url) as session:
        loaded = store.load(session, op_id)
        again = driver_execute(session, "SELECT pg_backend_pid()", {}).fetchone()[0]  # type: ignore[index]
    assert loaded is not None and loaded.operation_id == op_id
    assert again != pid


def test_a_refused_statement_keeps_sqlalchemys_error_class_and_the_connection(
    database_url: str,
) -> None:
    first = _insert(database_url, _new_row())
    clash = (
        "INSERT INTO operation_events (operation_id, seq, operation_created_at)"
        " SELECT operation_id, 1, created_at FROM operations WHERE operation_id = %(id)s"
    )
    with step_session(database_url) as session:
        pid = driver_execute(session, "SELECT pg_backend_pid()", {}).fetchone()[0]  # type: ignore[index]
        with pytest.raises(DBAPIError) as caught:
            driver_execute(session, clash, {"id": first})
        # Autocommit: the refused statement left no transaction behind to roll back.
        assert store.load(session, first) is not None
    assert isinstance(caught.value, IntegrityError)
    assert not caught.value.connection_invalidated
    with step_session(database_url) as session:
        assert driver_execute(session, "SELECT pg_backend_pid()", {}).fetchone()[0] == pid  # type: ignore[index]
