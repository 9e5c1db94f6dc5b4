"""Migrations stand on their own, and the migrated schema knows exactly the live states.

A migration that imports live code changes meaning whenever that code changes: a
state added to the enum would silently reach the CHECK constraint of a database
created afterwards, and never that of one created before. So version scripts carry
literals, and these tests compare the schema a real Postgres ends up with to the
enum: a new state without a new revision fails here.
"""

from __future__ import annotations

import ast
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Connection, create_engine, text

from jobwarden.models.states import OperationState

VERSIONS = Path(__file__).resolve().parents[2] / "migrations" / "versions"
VERSION_FILES = sorted(VERSIONS.glob("*.py"))
# Live code under any of its names: the package, and the repository folders it installs.
LIVE_ROOTS = {"jobwarden", "models", "tasks", "config", "migrations"}


def live_imports(source: str) -> list[str]:
    """Imports of live project code anywhere in ``source`` (functions included), one each."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                f"line {node.lineno}: import {a.name}"
                for a in node.names
                if a.name.split(".")[0] in LIVE_ROOTS
            ]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or module.split(".")[0] in LIVE_ROOTS:
                found.append(f"line {node.lineno}: from {'.' * node.level}{module} import ...")
    return found


def string_literals(sql: str) -> set[str]:
    return {value.replace("''", "'") for value in re.findall(r"'((?:[^']|'')*)'", sql)}


@pytest.fixture(scope="module")
def connection(database_url: str) -> Iterator[Connection]:
    engine = create_engine(database_url)
    with engine.connect() as conn:
        yield conn
    engine.dispose()


def check_constraint(conn: Connection, name: str) -> str:
    """The definition of CHECK constraint ``name`` on operations.

    Alembic applies the models' naming convention ("ck_%(table_name)s_%(constraint_name)s")
    to the already full names the version scripts give, so the databases migrated so far
    hold ck_operations_ck_operations_...; either spelling is accepted.
    """
    definition = conn.scalar(
        text(
            "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c "
            "JOIN pg_class t ON t.oid = c.conrelid "
            "WHERE t.relname = 'operations' AND c.contype = 'c' AND c.conname IN (:name, :twice)"
        ),
        {"name": name, "twice": f"ck_operations_{name}"},
    )
    assert definition is not None, f"no CHECK constraint {name} on operations"
    return str(definition)


def test_the_version_scripts_are_found() -> None:
    assert "0001_operations_and_events.py" in {p.name for p in VERSION_FILES}


@pytest.mark.parametrize("script", VERSION_FILES, ids=lambda p: p.name)
def test_a_migration_imports_no_live_project_code(script: Path) -> None:
    assert live_imports(script.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "source",
    [
        "from jobwarden.models.states import OperationState",
        "import jobwarden.models.persistence.tables as t",
        "from models.tables import ACTIVE_STATE_VALUES",
        "from . import helpers",
        "def upgrade():\n    from jobwarden.models import states",
    ],
)
def test_the_lint_catches_each_way_of_importing_live_code(source: str) -> None:
    assert live_imports(source) != []


def test_the_lint_allows_alembic_and_sqlalchemy() -> None:
    source = "import sqlalchemy as sa\nfrom alembic import op\nfrom sqlalchemy.dialects import pg"
    assert live_imports(source) == []


def test_the_state_check_constraint_allows_exactly_the_states_of_the_enum(
    connection: Connection,
) -> None:
    allowed = string_literals(check_constraint(connection, "ck_operations_state_known"))
    live = {s.value for s in OperationState}
    assert allowed == live, (
        f"states without a migration: {sorted(live - allowed)}; "
        f"states the database still allows: {sorted(allowed - live)}"
    )


def _predicate(connection: Connection, index: str) -> str | None:
    found = connection.scalar(
        text(
            "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = :index"
        ),
        {"index": index},
    )
    return str(found) if found is not None else None


def test_the_due_index_is_on_the_narrow_timer_row_and_holds_only_rows_with_a_timer(
    connection: Connection,
) -> None:
    # 0021: the timer moved out of the operations row so that polls are HOT updates there.
    assert _predicate(connection, "ix_operations_due") is None
    assert _predicate(connection, "ix_operation_timers_due") == "(next_poll_at IS NOT NULL)"


def test_no_index_of_the_operations_row_names_a_column_a_waiting_poll_writes(
    connection: Connection,
) -> None:
    # A poll that waits writes these (and the timer row); if any were indexed, no poll
    # could be a HOT update (issue 23).
    written_by_a_poll = {
        "version",
        "updated_at",
        "event_count",
        "last_event_hash",
        "last_event_kind",
        "status_requests_used",
        "reserved_request",
        "poll_attempt",
        "poll_not_before",
        "last_remote_state",
        "last_http_status",
        "progress",
        "consecutive_rate_limited",
        "transport_failures_used",
    }
    indexed = set(
        connection.scalars(
            text(
                "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
                "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
                "WHERE i.indrelid = 'operations'::regclass"
            )
        )
    )
    predicates = " ".join(
        connection.scalars(
            text(
                "SELECT coalesce(pg_get_expr(indpred, indrelid), '') FROM pg_index "
                "WHERE indrelid = 'operations'::regclass"
            )
        )
    )
    assert indexed & written_by_a_poll == set()
    assert [c for c in written_by_a_poll if c in predicates] == []
    options = connection.scalar(
        text("SELECT reloptions FROM pg_class WHERE relname = 'operations'")
    )
    assert "fillfactor=70" in (options or [])


def test_every_state_a_constraint_names_is_a_state_of_the_enum(connection: Connection) -> None:
    # A renamed state would leave constraints such as authorized_before_create naming a ghost.
    rows = connection.execute(
        text(
            "SELECT c.conname, pg_get_constraintdef(c.oid) FROM pg_constraint c "
            "JOIN pg_class t ON t.oid = c.conrelid "
            "WHERE t.relname = 'operations' AND c.contype = 'c'"
        )
    ).all()
    on_state = {name: string_literals(sql) for name, sql in rows if "state" in sql}
    assert any(name.endswith("authorized_before_create") for name in on_state), on_state
    live = {s.value for s in OperationState}
    assert {name: sorted(v - live) for name, v in on_state.items() if v - live} == {}


def test_state_literals_are_read_from_a_constraint_definition() -> None:
    sql = (
        "CHECK (((state)::text = ANY ((ARRAY['create_pending'::character varying, "
        "'it''s'::character varying])::text[])))"
    )
    assert string_literals(sql) == {"create_pending", "it's"}


def test_an_operation_already_awaiting_approval_gets_a_full_default_window_at_0015() -> None:
    # Its own database: this walks the migrations from 0014, which the shared one passed.
    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.models.persistence.migrate import upgrade
    from tests.conftest import scratch_database
    from tests.integration.api_helpers import NOW, load, tenant_name

    with scratch_database("jobwarden_m15") as url:
        upgrade(url, "0014")
        waiting = _awaiting_at_0014(url, tenant_name(), None)
        business = NOW + timedelta(hours=1)
        capped = _awaiting_at_0014(url, tenant_name(), business)
        upgrade(url)
        end = load(url, waiting).next_poll_at
        assert end is not None and end > datetime.now(UTC) + timedelta(hours=23)
        assert load(url, capped).next_poll_at == business
        dispose_all()


def _awaiting_at_0014(url: str, tenant: str, business: datetime | None) -> uuid.UUID:
    """An operation awaiting approval as revision 0014 stored it: only that revision's
    columns (the live model has columns later revisions add), no timer."""
    from jobwarden.models.persistence.db import transaction
    from tests.integration.api_helpers import NOW

    op = uuid.uuid4()
    columns = {
        "operation_id": op,
        "tenant": tenant,
        "provider": "sandbox",
        "idempotency_key": f"key-{op.hex}",
        "provider_token": f"jw-{op.hex}",
        "request_fingerprint": "0" * 64,
        "method": "POST",
        "route": "/v1/jobs",
        "command": "{}",
        "state": "awaiting_approval",
        "version": 1,
        "trace_id": "0" * 32,
        "requested_by": "submitter",
        "created_at": NOW,
        "create_deadline": NOW + timedelta(minutes=5),
        "result_deadline": NOW + timedelta(hours=1),
        "max_status_requests": 10,
        "max_transport_failures": 3,
        "create_attempts": 0,
        "status_requests_used": 0,
        "transport_failures_used": 0,
        "consecutive_rate_limited": 0,
        "poll_attempt": 0,
        "event_count": 0,
        "last_event_hash": "0" * 64,
        "updated_at": NOW,
        "business_deadline": business,
    }
    names = ", ".join(columns)
    values = ", ".join(
        f"CAST(:{name} AS jsonb)" if name == "command" else f":{name}" for name in columns
    )
    with transaction(url) as session:
        session.execute(text(f"INSERT INTO operations ({names}) VALUES ({values})"), columns)
    return op


def test_the_notification_constraints_allow_exactly_the_live_kinds_channels_and_statuses(
    connection: Connection,
) -> None:
    from jobwarden.models.humans.notifications import Channel, DeliveryStatus, NotificationKind

    for name, enum in (
        ("ck_notifications_kind_known", NotificationKind),
        ("ck_notifications_channel_known", Channel),
        ("ck_notifications_status_known", DeliveryStatus),
    ):
        definition = connection.execute(
            text("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = :n"),
            {"n": name},
        ).scalar_one()
        assert string_literals(definition) == {m.value for m in enum}, name


def test_0028_gives_every_existing_row_the_kind_of_its_newest_event() -> None:
    # Its own database: rows written (by today's code) with histories of different ends,
    # migrated back to 0027 (no column: the load read the kind from the history) and up
    # again: each row's column holds its newest event's kind, as the history says.
    from alembic import command

    from jobwarden.models.history.chain import EventDraft, EventKind
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import dispose_all, step_session, transaction
    from jobwarden.models.persistence.migrate import alembic_config, upgrade
    from jobwarden.models.states import OperationState as S
    from tests.conftest import scratch_database
    from tests.integration.api_helpers import NOW, tenant_name
    from tests.integration.notify_helpers import insert_operation

    with scratch_database("jobwarden_m28") as url:
        upgrade(url)
        tenant = tenant_name()
        fresh = insert_operation(url, tenant, S.create_pending, NOW)
        polled = insert_operation(url, tenant, S.observing, NOW)
        with step_session(url) as session:
            op = store.load(session, polled)
            assert op is not None
            sent = EventDraft(kind=EventKind.poll_sent, actor="w", at=NOW)
            store.fenced_update(session, op, changes={}, drafts=[sent], now=NOW)

        def kinds() -> dict[uuid.UUID, object]:
            with transaction(url) as session:
                return {
                    op_id: row.last_event_kind
                    for op_id in (fresh, polled)
                    if (row := store.load(session, op_id)) is not None
                }

        written = kinds()
        assert written == {fresh: EventKind.intent_recorded, polled: EventKind.poll_sent}
        dispose_all()
        command.downgrade(alembic_config(url), "0027")
        upgrade(url)
        assert kinds() == written
        with transaction(url) as session:
            empty = session.scalar(
                text("SELECT count(*) FROM operation_timers WHERE last_event_kind IS NULL")
            )
        assert empty == 0
        dispose_all()


def test_0033_moves_what_a_poll_changes_to_the_hot_row_and_back() -> None:
    # Its own database: a polled operation and an ended one, written by today's code (the
    # counters, the chain head, the last reading in the hot row), migrated back to 0032
    # (all of it on the operations row, with its checks and the ended tally's trigger)
    # and up again: every snapshot reads as it did, and the tallies still count.
    from alembic import command

    from jobwarden.models.history.chain import EventDraft, EventKind
    from jobwarden.models.operation import RowChanges
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import dispose_all, step_session, transaction
    from jobwarden.models.persistence.migrate import alembic_config, upgrade
    from jobwarden.models.states import OperationState as S
    from tests.conftest import scratch_database
    from tests.integration.api_helpers import NOW, tenant_name
    from tests.integration.notify_helpers import insert_operation

    with scratch_database("jobwarden_m33") as url:
        upgrade(url)
        tenant = tenant_name()
        polled = insert_operation(url, tenant, S.observing, NOW)
        ended = insert_operation(url, tenant, S.observing, NOW)
        with step_session(url) as session:
            op = store.load(session, polled)
            assert op is not None
            seen = EventDraft(kind=EventKind.polled, actor="w", at=NOW)
            reading: RowChanges = {
                "status_requests_used": 3,
                "reserved_request": 3,
                "poll_attempt": 2,
                "last_remote_state": "running",
                "progress": 0.25,
                "last_http_status": 200,
            }
            store.fenced_update(session, op, changes=reading, drafts=[seen], now=NOW)
            op = store.load(session, ended)
            assert op is not None
            failed = EventDraft(
                kind=EventKind.decision,
                actor="w",
                at=NOW,
                from_state="observing",
                to_state="failed",
            )
            changes: RowChanges = {
                "state": S.failed,
                "status_requests_used": 4,
                "next_poll_at": None,
            }
            store.fenced_update(session, op, changes=changes, drafts=[failed], now=NOW)

        def snapshots() -> dict[uuid.UUID, object]:
            with transaction(url) as session:
                return {op_id: store.load(session, op_id) for op_id in (polled, ended)}

        def spent_on_ended() -> object:
            with transaction(url) as session:
                return session.scalar(
                    text(
                        "SELECT sum(status_requests) FROM ended_operation_deltas "
                        "WHERE state = 'failed'"
                    )
                )

        written = snapshots()
        assert spent_on_ended() == 4  # the trigger read the counters from the hot row
        dispose_all()
        command.downgrade(alembic_config(url), "0032")
        with transaction(url) as session:
            back = session.execute(
                text(
                    "SELECT status_requests_used, reserved_request, poll_attempt, version, "
                    "last_remote_state FROM operations WHERE operation_id = :id"
                ),
                {"id": polled},
            ).one()
        assert tuple(back) == (3, 3, 2, 2, "running")
        dispose_all()
        upgrade(url)
        assert snapshots() == written
        dispose_all()
