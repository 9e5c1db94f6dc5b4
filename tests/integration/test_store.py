"""The store against the real Postgres: fencing, append-only history, migrations."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.exc import DBAPIError

from jobwarden.models.actions import EscalationReason
from jobwarden.models.conventions.strategies import Monitor
from jobwarden.models.errors import StaleVersionError, TransitionRefusedError
from jobwarden.models.history.chain import EventDraft, EventKind
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import engine_for, transaction
from jobwarden.models.persistence.tables import EventRow, OperationRow
from jobwarden.models.states import OperationState as S
from tests.integration.factories import Opened, insert_opened, opened_in

NOW = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def _new_row(state: S = S.create_pending, **overrides: Any) -> Opened:
    values: dict[str, Any] = dict(
        tenant="t1",
        request_fingerprint="f" * 64,
        route="/r",
        command={"a": 1},
        trace_id="a" * 32,
        requested_by="tester",
        actor="tester",
        create_deadline=NOW + timedelta(minutes=5),
        result_deadline=NOW + timedelta(hours=1),
        max_status_requests=10,
        max_transport_failures=3,
        next_poll_at=NOW,
        dispatched_at=None,
    )
    values.update(overrides)
    return opened_in(state, at=NOW, **values)


def _insert(url: str, row: Opened) -> uuid.UUID:
    """Written as intake writes an operation (tests/integration/factories.py)."""
    with transaction(url) as session:
        return insert_opened(session, *row).operation_id


def _load(url: str, op_id: uuid.UUID) -> Operation:
    with transaction(url) as session:
        row = store.load(session, op_id)
        assert row is not None
        return row


def test_versioned_update_with_a_stale_version_changes_nothing_and_raises(
    database_url: str,
) -> None:
    op_id = _insert(database_url, _new_row())
    stale = _load(database_url, op_id)
    with transaction(database_url) as session:
        store.fenced_update(
            session,
            _load(database_url, op_id),
            changes={"status_requests_used": 1},
            drafts=[],
            now=NOW,
        )
    with pytest.raises(StaleVersionError), transaction(database_url) as session:
        store.fenced_update(
            session,
            stale,
            changes={"status_requests_used": 7, "state": S.failed},
            drafts=[
                EventDraft(
                    kind=EventKind.decision,
                    actor="stale",
                    at=NOW,
                    from_state=S.create_pending.value,
                    to_state=S.failed.value,
                )
            ],
            now=NOW,
        )
    after = _load(database_url, op_id)
    assert after.version == 2
    assert after.status_requests_used == 1
    assert after.state == S.create_pending.value
    assert after.event_count == 1
    with transaction(database_url) as session:
        kinds = session.scalars(select(EventRow.kind).where(EventRow.operation_id == op_id)).all()
    assert kinds == ["intent_recorded"]


def test_fenced_update_refuses_a_transition_outside_the_table(database_url: str) -> None:
    op_id = _insert(database_url, _new_row())
    with pytest.raises(TransitionRefusedError), transaction(database_url) as session:
        store.fenced_update(
            session,
            _load(database_url, op_id),
            changes={"state": S.succeeded},
            drafts=[],
            now=NOW,
        )
    assert _load(database_url, op_id).state == S.create_pending.value


def test_a_state_change_no_event_records_is_refused(database_url: str) -> None:
    op_id = _insert(database_url, _new_row())
    refused = pytest.raises(TransitionRefusedError, match="no event records")
    with refused, transaction(database_url) as session:
        store.fenced_update(
            session,
            _load(database_url, op_id),
            changes={"state": S.failed},
            drafts=[EventDraft(kind=EventKind.decision, actor="t", at=NOW)],
            now=NOW,
        )
    assert _load(database_url, op_id).state is S.create_pending


def test_a_stop_may_hop_through_allowed_states_each_with_its_event(database_url: str) -> None:
    op_id = _insert(database_url, _new_row(S.create_unknown))
    hops = [(S.create_unknown, S.reconciling), (S.reconciling, S.escalated)]
    with transaction(database_url) as session:
        stored = store.fenced_update(
            session,
            _load(database_url, op_id),
            changes={"state": S.escalated},
            drafts=[
                EventDraft(kind=EventKind.decision, actor="t", at=NOW, from_state=a, to_state=b)
                for a, b in hops
            ],
            now=NOW,
        )
    assert stored.state is S.escalated and stored.last_event_kind is EventKind.decision
    assert _load(database_url, op_id).event_count == 3


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE operation_events SET actor = 'mallory' WHERE operation_id = :id",
        "DELETE FROM operation_events WHERE operation_id = :id",
        "TRUNCATE operation_events CASCADE",
    ],
)
def test_the_database_refuses_to_change_or_delete_history(
    database_url: str, statement: str
) -> None:
    op_id = _insert(database_url, _new_row())
    with engine_for(database_url).connect() as conn:
        with pytest.raises(DBAPIError) as caught:
            conn.execute(text(statement), {"id": op_id})
        conn.rollback()
    assert isinstance(caught.value.orig, psycopg.errors.RestrictViolation)
    with transaction(database_url) as session:
        assert (
            session.scalar(select(EventRow.actor).where(EventRow.operation_id == op_id)) == "tester"
        )


def test_events_chain_and_verify_detects_a_rewritten_event(database_url: str) -> None:
    op_id = _insert(database_url, _new_row())
    with transaction(database_url) as session:
        store.fenced_update(
            session,
            _load(database_url, op_id),
            changes={},
            drafts=[
                EventDraft(kind=EventKind.create_sent, actor="w", at=NOW + timedelta(seconds=1)),
                EventDraft(
                    kind=EventKind.create_accepted,
                    actor="w",
                    at=NOW + timedelta(seconds=2),
                    http_status=202,
                    excerpt={"job_id": "job_1"},
                ),
            ],
            now=NOW,
        )
    with transaction(database_url) as session:
        assert store.verify(session, op_id) == []
    # Only an owner who disables the trigger can edit history; the chain still tells.
    with engine_for(database_url).begin() as conn:
        conn.execute(
            text("ALTER TABLE operation_events DISABLE TRIGGER operation_events_append_only")
        )
        conn.execute(
            text(
                "UPDATE operation_events SET http_status = 200 WHERE operation_id = :id AND seq = 3"
            ),
            {"id": op_id},
        )
        conn.execute(
            text("ALTER TABLE operation_events ENABLE TRIGGER operation_events_append_only")
        )
    with transaction(database_url) as session:
        problems = store.verify(session, op_id)
    assert [p.seq for p in problems] == [3]


def test_claim_due_skips_rows_another_sweeper_holds_and_recent_dispatches(
    database_url: str,
) -> None:
    due_now = _insert(database_url, _new_row(next_poll_at=NOW - timedelta(seconds=1)))
    recently_sent = _insert(
        database_url,
        _new_row(next_poll_at=NOW - timedelta(seconds=1), dispatched_at=NOW - timedelta(seconds=1)),
    )
    not_due = _insert(database_url, _new_row(next_poll_at=NOW + timedelta(hours=1)))
    stopped = _insert(
        database_url, _new_row(state=S.escalated, next_poll_at=NOW - timedelta(hours=1))
    )
    held = _insert(database_url, _new_row(next_poll_at=NOW - timedelta(seconds=2)))
    with transaction(database_url) as holder:
        holder.execute(
            select(OperationRow).where(OperationRow.operation_id == held).with_for_update()
        )
        with transaction(database_url) as session:
            claimed = {
                op
                for op, _ in store.claim_due(
                    session, now=NOW, redispatch_after=timedelta(seconds=30), limit=1000
                )
            }
    assert due_now in claimed
    assert held not in claimed
    assert {recently_sent, not_due, stopped}.isdisjoint(claimed)
    with transaction(database_url) as session:
        again = {
            op
            for op, _ in store.claim_due(
                session, now=NOW, redispatch_after=timedelta(seconds=30), limit=1000
            )
        }
    assert due_now not in again and held in again


def test_an_operation_awaiting_approval_is_claimed_only_once_its_window_has_ended(
    database_url: str,
) -> None:
    def waiting(end: datetime) -> uuid.UUID:
        return _insert(
            database_url, _new_row(state=S.awaiting_approval, authorized_by=None, next_poll_at=end)
        )

    closed, still_open = waiting(NOW - timedelta(seconds=1)), waiting(NOW + timedelta(hours=1))
    with transaction(database_url) as session:
        claimed = dict(
            store.claim_due(session, now=NOW, redispatch_after=timedelta(seconds=30), limit=1000)
        )
        # When it began waiting, as an approval moves the deadlines by: its intent's time.
        assert store.entered_at(session, closed, S.awaiting_approval) == NOW
        assert store.entered_at(session, closed, S.create_pending) is None
    assert claimed.get(closed) is S.awaiting_approval
    assert still_open not in claimed


def test_models_and_migrations_are_in_step(database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    # Every module that declares tables, so the metadata holds the whole schema.
    from jobwarden.models.persistence import (  # noqa: F401
        api_tables,
        breaker_tables,
        metrics_tables,
        notification_tables,
        pause_tables,
        schedule_tables,
        webhook_tables,
    )
    from jobwarden.models.persistence.tables import Base

    engine = create_engine(database_url)
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    engine.dispose()
    assert diff == []


def test_unique_tenant_key_and_provider_token_are_enforced_by_the_database(
    database_url: str,
) -> None:
    first = _insert(database_url, _new_row())
    # A raw copy of the row under a new id: intake's insert skips a taken key by design
    # (ON CONFLICT DO NOTHING), so only a plain INSERT shows what the database refuses.
    clone = (
        "INSERT INTO operations SELECT (jsonb_populate_record(NULL::operations, to_jsonb(o) "
        "|| jsonb_build_object('operation_id', gen_random_uuid(), {same}))).* "
        "FROM operations o WHERE operation_id = :id"
    )
    for same, fresh in [
        ("'provider_token', CAST(:fresh AS text)", "idempotency_key"),
        ("'idempotency_key', CAST(:fresh AS text)", "provider_token"),
    ]:
        with pytest.raises(DBAPIError) as caught, transaction(database_url) as session:
            session.execute(text(clone.format(same=same)), {"id": first, "fresh": uuid.uuid4().hex})
        assert isinstance(caught.value.orig, psycopg.errors.UniqueViolation), fresh


def test_two_sweepers_claiming_at_once_take_disjoint_rows_and_miss_none(database_url: str) -> None:
    import threading

    ops = {
        _insert(database_url, _new_row(next_poll_at=NOW - timedelta(seconds=5))) for _ in range(40)
    }
    barrier = threading.Barrier(2)
    claimed: list[set[uuid.UUID]] = [set(), set()]

    def sweep(i: int) -> None:
        with transaction(database_url) as session:
            barrier.wait()
            claimed[i] = {
                op
                for op, _ in store.claim_due(
                    session, now=NOW, redispatch_after=timedelta(seconds=30), limit=30
                )
                if op in ops
            }

    threads = [threading.Thread(target=sweep, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert claimed[0].isdisjoint(claimed[1])
    with transaction(database_url) as session:
        leftover = {
            op
            for op, _ in store.claim_due(
                session, now=NOW, redispatch_after=timedelta(seconds=30), limit=1000
            )
            if op in ops
        }
    assert claimed[0] | claimed[1] | leftover == ops


def test_fenced_update_returns_the_row_as_stored_even_within_the_loading_session(
    database_url: str,
) -> None:
    op_id = _insert(database_url, _new_row())
    with transaction(database_url) as session:
        row = store.load(session, op_id)
        assert row is not None
        accepted = EventDraft(
            kind=EventKind.create_accepted,
            actor="t",
            at=NOW,
            from_state=S.create_pending.value,
            to_state=S.accepted.value,
        )
        stored = store.fenced_update(
            session, row, changes={"state": S.accepted}, drafts=[accepted], now=NOW
        )
        assert (stored.state, stored.version) == (S.accepted.value, 2)
        assert stored.last_event_kind is EventKind.create_accepted


def test_the_store_binds_a_typed_state_reason_ending_and_polling_mode_as_their_text(
    database_url: str,
) -> None:
    # RowChanges carries enums up to the store's door; the store turns them into their
    # text once, where it binds the parameters, and a read turns them back.
    op_id = _insert(database_url, _new_row(S.observing, remote_job_id="job-1"))
    row = _load(database_url, op_id)
    changes: RowChanges = {
        "state": S.escalated,
        "escalation_reason": EscalationReason.rate_limited,
        "ended_as": S.failed,
        "polling_mode": Monitor.location,
    }
    bound = store._fenced_params(row, changes, [])
    for name in changes:
        assert type(bound[f"set_{name}"]) is str, name
    stopped = EventDraft(
        kind=EventKind.escalated,
        actor="t",
        at=NOW,
        from_state=S.observing.value,
        to_state=S.escalated.value,
    )
    with transaction(database_url) as session:
        store.fenced_update(session, row, changes=changes, drafts=[stopped], now=NOW)
        stored = session.execute(
            text(
                "SELECT state, escalation_reason, ended_as, polling_mode FROM operations "
                "WHERE operation_id = :id"
            ),
            {"id": op_id},
        ).one()
    assert tuple(stored) == ("escalated", "rate_limited", "failed", "location")
    read = _load(database_url, op_id)
    assert read.state is S.escalated and read.escalation_reason is EscalationReason.rate_limited
    assert read.ended_as is S.failed and read.polling_mode is Monitor.location


def test_the_database_refuses_an_operation_past_approval_without_an_authorizer(
    database_url: str,
) -> None:
    with pytest.raises(DBAPIError) as caught, transaction(database_url) as session:
        insert_opened(session, *_new_row(authorized_by=None))
    assert isinstance(caught.value.orig, psycopg.errors.CheckViolation)
    waiting = _insert(database_url, _new_row(state=S.awaiting_approval, authorized_by=None))
    with pytest.raises(DBAPIError), transaction(database_url) as session:
        row = store.load(session, waiting)
        assert row is not None
        approved = EventDraft(
            kind=EventKind.approved,
            actor="t",
            at=NOW,
            from_state=S.awaiting_approval.value,
            to_state=S.create_pending.value,
        )
        store.fenced_update(
            session, row, changes={"state": S.create_pending}, drafts=[approved], now=NOW
        )


def test_a_poll_that_waits_writes_its_hot_row_and_leaves_the_operations_row_alone(
    database_url: str,
) -> None:
    # Issue 37 (0033): what a poll changes (the timer, the counters, the chain head, the
    # version) lives in the narrow hot row, so a poll that waits writes that row once and
    # never rewrites the wide operations row (issue 23 made it a HOT update; now there is
    # none). Read from this backend's own statistics, so no other backend's writes count.
    op_id = _insert(
        database_url, _new_row(S.observing, remote_job_id="job-1", max_status_requests=50)
    )
    counts = text(
        "SELECT pg_stat_get_xact_tuples_updated('operations'::regclass), "
        "pg_stat_get_xact_tuples_updated('operation_timers'::regclass)"
    )
    written = []
    for n in range(1, 21):
        with transaction(database_url) as session:
            row = store.load(session, op_id)
            assert row is not None
            # This backend's statistics not yet flushed (other tests' writes on a pooled
            # connection may be among them): the write's own share is the difference.
            before = session.execute(counts).one()
            at = NOW + timedelta(seconds=n)
            store.fenced_update(
                session,
                row,
                changes={
                    "status_requests_used": n,
                    "reserved_request": n,
                    "poll_attempt": n,
                    "last_http_status": 200,
                    "last_remote_state": "running",
                    "progress": n / 100,
                    "next_poll_at": at,
                    "dispatched_at": at,
                },
                drafts=[EventDraft(kind=EventKind.polled, actor="tester", at=at)],
                now=at,
            )
            after = session.execute(counts).one()
            written.append((after[0] - before[0], after[1] - before[1]))
    assert written == [(0, 1)] * 20
    with transaction(database_url) as session:
        stored = store.load(session, op_id)
    assert stored is not None
    assert stored.next_poll_at == NOW + timedelta(seconds=20)
    assert stored.status_requests_used == 20 and stored.version == 21
    assert (stored.progress, stored.last_remote_state) == (0.2, "running")


def test_a_polls_write_never_waits_on_a_lock_held_on_the_wide_row(database_url: str) -> None:
    # Issue 37 (0034): the history's foreign key names the hot row, which the poll's own
    # statement has just updated. Against the wide row, the key's check took FOR KEY
    # SHARE on a row the poll does not write: a lock bit and a WAL record on every poll,
    # and a poll stalled behind anyone holding that row FOR UPDATE. Here someone does,
    # and the poll's write must land without waiting (lock_timeout bounds the old wait).
    op_id = _insert(database_url, _new_row(S.observing, remote_job_id="job-1"))
    row = _load(database_url, op_id)
    dsn = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT 1 FROM operations WHERE operation_id = %s FOR UPDATE", (op_id,))
        with transaction(database_url) as session:
            session.execute(text("SET LOCAL lock_timeout = '5s'"))
            at = NOW + timedelta(seconds=1)
            store.fenced_update(
                session,
                row,
                changes={"status_requests_used": 1, "next_poll_at": at},
                drafts=[EventDraft(kind=EventKind.polled, actor="tester", at=at)],
                now=at,
            )
        holder.rollback()
    assert _load(database_url, op_id).event_count == row.event_count + 1


def test_a_load_runs_the_ordered_pause_lookup_only_when_its_provider_has_a_pause(
    database_url: str,
) -> None:
    # Issue 37: the load probes for an active pause of the operation's provider with a
    # plain EXISTS and sorts the candidates only when one is there; the sort on every
    # poll was a fifth of the load's Postgres time. EXPLAIN ANALYZE shows which parts ran.
    from jobwarden.models.persistence import pause_store

    provider = f"p-{uuid.uuid4().hex[:12]}"  # no other test pauses it
    op_id = _insert(database_url, _new_row(S.observing, provider=provider))

    def plan() -> list[str]:
        with transaction(database_url) as session:
            raw = session.connection().connection.driver_connection
            assert raw is not None
            explained = raw.execute(
                "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + store._LOAD_ONE,
                {"operation_id": op_id},
            )
            return [str(line[0]) for line in explained]

    sorts = [line for line in plan() if "Sort" in line and "Sort Key" not in line]
    assert sorts and all("never executed" in line for line in sorts), sorts
    assert _load(database_url, op_id).hold is None
    with transaction(database_url) as session:
        pause, _ = pause_store.start(
            session,
            provider=provider,
            tenant="t1",
            operation_id=op_id,
            reason="maintenance",
            evidence=None,
            author="tester",
            author_kind="person",
            now=NOW,
        )
    sorts = [line for line in plan() if "Sort" in line and "Sort Key" not in line]
    assert sorts and not any("never executed" in line for line in sorts), sorts
    hold = _load(database_url, op_id).hold
    assert hold is not None and hold.pause_id == pause.pause_id


def test_a_write_that_changes_a_colder_column_updates_both_rows_under_one_fence(
    database_url: str,
) -> None:
    # A stop changes the state (a column of the wide row) and the counters (the hot row):
    # one statement writes both, and a stale version writes neither.
    op_id = _insert(database_url, _new_row(S.observing, remote_job_id="job-1"))
    with transaction(database_url) as session:
        row = store.load(session, op_id)
        assert row is not None
    stop: RowChanges = {
        "state": S.escalated,
        "escalation_reason": EscalationReason.unknown_state,
        "poll_attempt": 7,
        "next_poll_at": None,
    }
    drafts = [
        EventDraft(
            kind=EventKind.escalated,
            actor="tester",
            at=NOW,
            from_state=S.observing.value,
            to_state=S.escalated.value,
        )
    ]
    with transaction(database_url) as session:
        store.fenced_update(session, row, changes=stop, drafts=drafts, now=NOW)
    with pytest.raises(StaleVersionError), transaction(database_url) as session:
        store.fenced_update(
            session,
            row,
            changes={"escalation_detail": "late", "poll_attempt": 9},
            drafts=[],
            now=NOW,
        )
    with transaction(database_url) as session:
        stored = store.load(session, op_id)
    assert stored is not None
    assert (stored.state, stored.escalation_reason) == (S.escalated, EscalationReason.unknown_state)
    assert stored.escalation_detail is None
    assert (stored.poll_attempt, stored.next_poll_at, stored.version) == (7, None, row.version + 1)
    with transaction(database_url) as session:
        assert store.verify(session, op_id) == []


def test_a_transition_moves_state_since_and_a_poll_does_not(database_url: str) -> None:
    op_id = _insert(database_url, _new_row(S.accepted, remote_job_id="job-1"))
    with transaction(database_url) as session:
        row = store.load(session, op_id)
        assert row is not None
        first = NOW + timedelta(seconds=1)
        row = store.fenced_update(
            session,
            row,
            changes={"state": S.observing, "status_requests_used": 1},
            drafts=[
                EventDraft(
                    kind=EventKind.poll_sent,
                    actor="tester",
                    at=first,
                    from_state=S.accepted.value,
                    to_state=S.observing.value,
                )
            ],
            now=first,
        )
        later = NOW + timedelta(seconds=5)
        store.fenced_update(
            session,
            row,
            changes={"next_poll_at": later},
            drafts=[EventDraft(kind=EventKind.polled, actor="tester", at=later)],
            now=later,
        )
    with transaction(database_url) as session:
        stored = store.load(session, op_id)
    assert stored is not None
    assert (stored.state_since, stored.updated_at) == (first, later)


def test_a_load_reads_the_newest_event_kind_from_the_row_never_from_the_history(
    database_url: str,
) -> None:
    # 0028: the subquery on the partitioned history cost every load a third of its
    # Postgres time; the write that appends events keeps the kind on the row instead.
    assert "operation_events" not in store._LOAD_ONE
    op_id = _insert(database_url, _new_row())
    assert _load(database_url, op_id).last_event_kind is EventKind.intent_recorded
    sent = EventDraft(kind=EventKind.create_sent, actor="w", at=NOW)
    with transaction(database_url) as session:
        stored = store.fenced_update(
            session, _load(database_url, op_id), changes={}, drafts=[sent], now=NOW
        )
    assert stored.last_event_kind is EventKind.create_sent
    assert _load(database_url, op_id).last_event_kind is EventKind.create_sent
    with transaction(database_url) as session:
        column = session.scalar(
            text("SELECT last_event_kind FROM operation_timers WHERE operation_id = :o"),
            {"o": op_id},
        )
    assert column == "create_sent"
