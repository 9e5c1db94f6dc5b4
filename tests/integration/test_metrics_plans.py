"""A scrape's cost is bounded by the work in flight, never by the history (issue 24).

The history (operations, operation_events) only grows: a figure that reads all of it
makes every scrape slower for ever (0.3 s per million events, measured). So every
statement a scrape sends is EXPLAINed here with sequential scans disabled: where an index
can serve a read, the planner then takes it, and where none can, the plan still reads the
whole table, which fails. scripts/bench_metrics.py measures the cost itself; no test
times anything.

The counters over the whole history come from tallies kept by triggers (migration 0022);
they must equal a recount of the history, whatever path a row took to its end.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import event, text

from jobwarden.models.history.chain import EventDraft, EventKind
from jobwarden.models.operation import RowChanges
from jobwarden.models.persistence import metrics_store, store
from jobwarden.models.persistence.db import engine_for, step_session, transaction
from jobwarden.models.persistence.metrics_tables import ENDED_STATES
from jobwarden.models.states import TERMINAL
from jobwarden.models.states import OperationState as S
from jobwarden.observability.metrics import collect_families
from tests.integration.notify_helpers import escalate_on_a_step_connection, insert_operation
from tests.integration.test_metrics import _known_mix, _values

# The tables that grow with the history.
HISTORY = {"operations", "operation_events"}
NOW = datetime.now(UTC).replace(microsecond=0)


@pytest.fixture
def fresh_url() -> Iterator[str]:
    """A freshly migrated database of the test's own, so ANALYZE and the plans are its own."""
    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.models.persistence.migrate import upgrade
    from tests.conftest import scratch_database

    with scratch_database("jobwarden_plans") as url:
        upgrade(url)
        try:
            yield url
        finally:
            dispose_all()


def _scrape_statements(url: str) -> list[tuple[str, Any]]:
    """Every statement (and its parameters) one scrape sends, as the driver got it."""
    sent: list[tuple[str, Any]] = []
    engine = engine_for(url)

    def record(conn: Any, cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        sent.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        collect_families(url, NOW)
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return sent


def _history_reads(plan: Any, indexes: set[str], partial: set[str]) -> Iterator[str]:
    """Each plan node that reads a history table unbounded: a sequential scan, or one of
    its indexes walked whole (no Index Cond) that is not partial."""
    if isinstance(plan, list):
        for item in plan:
            yield from _history_reads(item, indexes, partial)
        return
    if not isinstance(plan, dict):
        return
    node = plan.get("Node Type", "")
    relation = plan.get("Relation Name")
    if relation in HISTORY and node not in {"Index Scan", "Index Only Scan", "Bitmap Heap Scan"}:
        yield f"{node} on {relation}"
    index = plan.get("Index Name")
    if index in indexes and index not in partial and "Index Cond" not in plan:
        yield f"{node} using {index}, all of it"
    for value in plan.values():
        if isinstance(value, list | dict):
            yield from _history_reads(value, indexes, partial)


_INDEXES = (
    "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
    "WHERE i.indrelid IN ('operations'::regclass, 'operation_events'::regclass)"
)


def test_no_statement_of_a_scrape_reads_the_whole_history(fresh_url: str) -> None:
    _known_mix(fresh_url, f"metrics-{secrets.token_hex(4)}")
    engine = engine_for(fresh_url)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        conn.execute(text("ANALYZE"))
    statements = _scrape_statements(fresh_url)
    assert len(statements) >= 10, statements  # every figure's queries were seen
    found: list[str] = []
    with engine.begin() as conn:
        indexes = set(conn.scalars(text(_INDEXES)))
        partial = set(conn.scalars(text(_INDEXES + " AND i.indpred IS NOT NULL")))
        # With sequential scans off, one is planned only where no index can serve the read.
        # With nested loops off, a join is planned as over a large history, where the
        # planner would rather hash a whole table than look rows up one by one: a read
        # bounded only by this small database's statistics shows up here.
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        conn.execute(text("SET LOCAL enable_nestloop = off"))
        for statement, parameters in statements:
            if not statement.lstrip().upper().startswith(("SELECT", "WITH")):
                continue  # the scrape's own SET TRANSACTION / SET LOCAL
            plan = conn.exec_driver_sql(
                "EXPLAIN (FORMAT JSON) " + statement, parameters or {}
            ).scalar_one()
            unbounded = list(_history_reads(plan, indexes, partial))
            if unbounded:
                found.append(f"{' '.join(statement.split())}\n  reads {unbounded}")
    assert found == [], "\n".join(found)


def _recount(url: str, provider: str) -> dict[str, Any]:
    """The counters as the history says, counted over every row (the queries before 0022)."""
    with transaction(url) as session:
        answers = session.execute(
            text(
                "SELECT CASE WHEN e.http_status IS NULL THEN 'none' "
                "WHEN e.http_status = 429 THEN '429' "
                "ELSE (e.http_status / 100)::text || 'xx' END, count(*) "
                "FROM operation_events e JOIN operations o USING (operation_id) "
                "WHERE o.provider = :p AND (e.http_status IS NOT NULL "
                "OR e.excerpt ? 'transport_failure') GROUP BY 1"
            ),
            {"p": provider},
        ).all()
        states = session.execute(
            text("SELECT state, count(*) FROM operations WHERE provider = :p GROUP BY state"),
            {"p": provider},
        ).all()
        status, creates = session.execute(
            text(
                "SELECT coalesce(sum(status_requests_used), 0) - count(reserved_request), "
                "coalesce(sum(create_attempts), 0) "
                "FROM operations JOIN operation_timers USING (operation_id) WHERE provider = :p"
            ),
            {"p": provider},
        ).one()
    figures: dict[str, Any] = {
        "answers": {c: n for c, n in answers},
        "states": {s: n for s, n in states},
        "status": status,
        "creates": creates,
    }
    return figures


def _served(url: str, provider: str) -> dict[str, Any]:
    values = _values(collect_families(url, NOW), provider)
    by = {name: {k: v for (n, k), v in values.items() if n == name} for (name, _) in values}
    return {
        "answers": {k[0]: v for k, v in by.get("jobwarden_provider_responses_total", {}).items()},
        "states": {k[0]: v for k, v in by.get("jobwarden_operations", {}).items() if v},
        "status": sum(by.get("jobwarden_status_requests_total", {}).values()),
        "creates": sum(by.get("jobwarden_create_requests_total", {}).values()),
    }


def _end(url: str, op_id: uuid.UUID, changes: RowChanges, draft: EventDraft) -> None:
    """A worker's fenced write ending the operation, as the step writes it."""
    with step_session(url) as session:
        op = store.load(session, op_id)
        assert op is not None
        store.fenced_update(session, op, changes=changes, drafts=[draft], now=NOW)


def test_the_tallied_counters_equal_a_recount_of_the_history_and_never_go_down(
    database_url: str,
) -> None:
    provider = f"tally-{secrets.token_hex(4)}"
    url = database_url
    seen: list[dict[str, Any]] = []

    def check() -> None:
        served = _served(url, provider)
        assert served == _recount(url, provider)
        # Folding the deltas into the totals (beat's jobwarden.fold_tallies) changes nothing.
        with transaction(url) as session:
            metrics_store.fold_tallies(session)
        assert _served(url, provider) == served
        if seen:
            before = seen[-1]
            assert served["status"] >= before["status"]
            assert served["creates"] >= before["creates"]
            assert all(n >= before["answers"].get(c, 0) for c, n in served["answers"].items())
        seen.append(served)

    _known_mix(url, provider)  # operations inserted in ended states, answers of each class
    check()
    # A poll answered (counted on the row, reservation spent), then the job's end: the
    # row's counters move from the rows in flight to the ended tallies in one write.
    polled = insert_operation(
        url,
        "metrics",
        S.observing,
        NOW,
        provider=provider,
        status_requests_used=3,
        reserved_request=3,
        create_attempts=2,
    )
    check()
    answer = EventDraft(
        kind=EventKind.observed,
        actor="worker",
        at=NOW,
        http_status=200,
        from_state=S.observing.value,
        to_state=S.failed.value,
    )
    _end(url, polled, {"state": S.failed, "reserved_request": None}, answer)
    check()
    # A stop (not ended: counted from its row), then a person abandons it (ended).
    stopped = insert_operation(
        url,
        "metrics",
        S.observing,
        NOW,
        provider=provider,
        status_requests_used=5,
        create_attempts=1,
    )
    escalate_on_a_step_connection(url, stopped, NOW)
    check()
    abandon = EventDraft(
        kind=EventKind.human_decision,
        actor="person",
        at=NOW,
        from_state=S.escalated.value,
        to_state=S.abandoned.value,
    )
    _end(url, stopped, {"state": S.abandoned}, abandon)
    check()
    # An ended row moved on (a person accepts a result that failed validation) and an
    # ended row's counter written again: the tallies follow both.
    failed = insert_operation(
        url,
        "metrics",
        S.result_validation_failed,
        NOW,
        provider=provider,
        status_requests_used=2,
        create_attempts=1,
    )
    check()
    with transaction(url) as session:
        session.execute(
            text("UPDATE operations SET state = 'result_accepted' WHERE operation_id = :o"),
            {"o": failed},
        )
        session.execute(
            text("UPDATE operations SET create_attempts = 3 WHERE operation_id = :o"),
            {"o": polled},
        )
    check()
    # A write that rolls back leaves no count behind.
    with pytest.raises(RuntimeError), transaction(url) as session:
        session.execute(
            text("UPDATE operations SET state = 'succeeded' WHERE operation_id = :o"),
            {"o": stopped},
        )
        raise RuntimeError("rolled back")
    check()


def test_the_ended_states_of_the_tallies_trigger_are_the_live_terminal_states(
    database_url: str,
) -> None:
    # A new terminal state needs a migration rewriting the trigger and the not-ended index
    # (as 0022 wrote them): without one, its rows would be counted by neither part.
    live = sorted(s.value for s in TERMINAL)
    assert list(ENDED_STATES) == live
    with transaction(database_url) as session:
        body = session.scalar(
            text("SELECT prosrc FROM pg_proc WHERE proname = 'jobwarden_tally_ended_operations'")
        )
        predicate = session.scalar(
            text(
                "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i JOIN pg_class c "
                "ON c.oid = i.indexrelid WHERE c.relname = 'ix_operations_not_ended'"
            )
        )
    assert body is not None and predicate is not None
    for state in S:
        assert (f"'{state.value}'" in body) == (state.value in live), state
        assert (f"'{state.value}'" in predicate) == (state.value in live), state


def test_the_counters_go_on_from_the_history_written_before_migration_0022(
    fresh_url: str,
) -> None:
    # Its own database: a history is written (by today's code, which writes the partition
    # key of 0023), then migrated back to 0021 (no tallies, one plain events table), then
    # up again: 0022 counts it into the tallies; every figure stays as the old queries read.
    from alembic import command

    from jobwarden.models.persistence.db import dispose_all
    from jobwarden.models.persistence.migrate import alembic_config, upgrade

    provider = f"before-{secrets.token_hex(4)}"
    _known_mix(fresh_url, provider)
    stopped = insert_operation(fresh_url, "metrics", S.observing, NOW, provider=provider)
    escalate_on_a_step_connection(fresh_url, stopped, NOW)
    before = _recount(fresh_url, provider)
    dispose_all()
    command.downgrade(alembic_config(fresh_url), "0021")
    upgrade(fresh_url)
    assert _served(fresh_url, provider) == before
    # And down and up again: the downgrade leaves nothing behind that the upgrade trips on.
    dispose_all()
    command.downgrade(alembic_config(fresh_url), "0021")
    upgrade(fresh_url)
    assert _served(fresh_url, provider) == before


def test_a_fold_empties_the_deltas_into_the_totals_and_a_scrape_sums_what_is_left(
    database_url: str,
) -> None:
    # The shared database: the beat task folds the settings' database, as a worker does.
    fresh_url = database_url
    provider = f"fold-{secrets.token_hex(4)}"
    _known_mix(fresh_url, provider)
    before = _served(fresh_url, provider)

    def deltas() -> int:
        with transaction(fresh_url) as session:
            return int(
                session.scalar(
                    text(
                        "SELECT (SELECT count(*) FROM provider_answer_deltas)"
                        " + (SELECT count(*) FROM ended_operation_deltas)"
                    )
                )
                or 0
            )

    assert deltas() > 0
    from jobwarden.tasks.metrics_tallies import fold

    assert fold() > 0  # the beat task, run as its worker runs it
    assert deltas() == 0 and _served(fresh_url, provider) == before
    _known_mix(fresh_url, provider)  # the same again: every counter doubles
    again = _served(fresh_url, provider)
    assert again["answers"] == {c: 2 * n for c, n in before["answers"].items()}
    assert (again["status"], again["creates"]) == (2 * before["status"], 2 * before["creates"])
