"""Provider answers are counted by the statement that records them (0028, issue 37).

The /metrics counter of provider answers by status class was kept by 0022's statement
trigger on operation_events, which cost a poll's write more than the insert it counted.
The two statements that insert events now append the deltas themselves
(models/persistence/answer_tallies.py). These tests hold the three things the trigger
gave for free: the same classes as its SQL, a count exactly when the write commits
(never for a fenced write that lost), and no other writer of the history that could
forget to count. test_metrics_plans.py checks the counter against a recount of the
whole history (a trigger left in place would count every answer twice there).
"""

from __future__ import annotations

import re
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from jobwarden.models.errors import StaleVersionError
from jobwarden.models.history.chain import EventDraft, EventKind
from jobwarden.models.persistence import store
from jobwarden.models.persistence.answer_tallies import status_class
from jobwarden.models.persistence.db import step_session, transaction
from jobwarden.models.states import OperationState as S
from tests.integration.notify_helpers import insert_operation

NOW = datetime(2026, 12, 7, 1, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]

# 0022's classes, as its trigger computed them (and 0028's downgrade writes them again).
CLASS_SQL = (
    "SELECT CASE WHEN e.http_status IS NULL THEN 'none' WHEN e.http_status = 429 THEN '429' "
    "ELSE (e.http_status / 100)::text || 'xx' END, "
    "(e.http_status IS NOT NULL OR e.excerpt ? 'transport_failure') "
    "FROM (SELECT CAST(:status AS integer) AS http_status, CAST(:excerpt AS jsonb) AS excerpt) e"
)


@pytest.mark.parametrize(
    ("http_status", "excerpt"),
    [
        (200, None),
        (202, {"remote_state": "running"}),
        (304, None),
        (404, {}),
        (429, None),
        (499, None),
        (500, None),
        (503, {"transport_failure": "x"}),
        (None, {"transport_failure": "read_timeout"}),
        (None, {"remote_state": "running"}),
        (None, None),
    ],
)
def test_an_answer_is_classed_as_the_trigger_of_0022_classed_it(
    database_url: str, http_status: int | None, excerpt: dict[str, Any] | None
) -> None:
    import json

    with transaction(database_url) as session:
        cls, answered = session.execute(
            text(CLASS_SQL),
            {"status": http_status, "excerpt": json.dumps(excerpt) if excerpt else None},
        ).one()
    assert status_class(http_status, excerpt) == (cls if answered else None)


def _deltas(url: str, provider: str) -> dict[str, int]:
    with transaction(url) as session:
        rows = session.execute(
            text(
                "SELECT status_class, sum(answers) FROM provider_answer_deltas"
                " WHERE provider = :p GROUP BY 1"
            ),
            {"p": provider},
        ).all()
    return {cls: int(n) for cls, n in rows}


def _answer(status: int | None, **excerpt: Any) -> EventDraft:
    return EventDraft(
        kind=EventKind.observed, actor="worker", at=NOW, http_status=status, excerpt=excerpt
    )


def test_a_poll_write_counts_its_answers_once_and_a_fenced_write_that_lost_counts_none(
    database_url: str,
) -> None:
    provider = f"answers-{secrets.token_hex(4)}"
    op_id = insert_operation(database_url, "tallies", S.observing, NOW, provider=provider)
    assert _deltas(database_url, provider) == {}
    with step_session(database_url) as session:
        op = store.load(session, op_id)
        assert op is not None
        drafts = [_answer(200), _answer(429), _answer(None, transport_failure="reset")]
        drafts.append(_answer(503))
        drafts.append(_answer(200))
        store.fenced_update(
            session,
            op,
            changes={"status_requests_used": 1},
            drafts=drafts,
            now=NOW + timedelta(seconds=1),
        )
        # The same snapshot again: its version is stale, so nothing is written or counted.
        with pytest.raises(StaleVersionError):
            store.fenced_update(
                session, op, changes={}, drafts=[_answer(200)], now=NOW + timedelta(seconds=2)
            )
        # A write that records no answer (a decision) counts nothing either.
        fresh = store.load(session, op_id)
        assert fresh is not None
        decision = EventDraft(kind=EventKind.decision, actor="worker", at=NOW, cause="wait")
        store.fenced_update(session, fresh, changes={}, drafts=[decision], now=NOW)
    assert _deltas(database_url, provider) == {"2xx": 2, "429": 1, "5xx": 1, "none": 1}


def test_an_operation_inserted_with_answers_in_its_history_counts_them(
    database_url: str,
) -> None:
    from tests.integration.factories import insert_opened, opened_in, with_history

    provider = f"opened-{secrets.token_hex(4)}"
    row = opened_in(
        S.observing,
        at=NOW,
        tenant="tallies",
        provider=provider,
        command={},
        create_deadline=NOW + timedelta(minutes=5),
        result_deadline=NOW + timedelta(hours=1),
        max_status_requests=10,
        max_transport_failures=3,
        next_poll_at=None,
        dispatched_at=None,
    )
    intent = EventDraft(
        kind=EventKind.intent_recorded, actor="t", at=NOW, to_state=S.create_pending.value
    )
    accepted = EventDraft(
        kind=EventKind.create_accepted,
        actor="worker",
        at=NOW,
        from_state=S.create_pending.value,
        to_state=S.accepted.value,
        http_status=202,
    )
    with transaction(database_url) as session:
        op_id: uuid.UUID = insert_opened(
            session, *with_history(row, [intent, accepted, _answer(404)])
        ).operation_id
    assert op_id
    assert _deltas(database_url, provider) == {"2xx": 1, "4xx": 1}


def test_no_trigger_counts_answers_any_more_and_only_two_statements_insert_events(
    database_url: str,
) -> None:
    with transaction(database_url) as session:
        triggers = session.scalars(
            text(
                "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"
                " AND tgrelid = 'operation_events'::regclass"
            )
        ).all()
    assert "tally_provider_answers" not in triggers
    # Every writer of the history counts what it writes: a new one must join answer_tallies.
    writers = sorted(
        str(path.relative_to(REPO))
        for path in (REPO / "jobwarden").rglob("*.py")
        if "migrations" not in path.parts
        and re.search(r"INSERT INTO operation_events", path.read_text())
    )
    assert writers == [
        "jobwarden/models/persistence/intake_store.py",
        "jobwarden/models/persistence/store.py",
    ]


def test_a_count_appends_a_bare_heap_row_and_the_fold_still_takes_them_all(
    database_url: str,
) -> None:
    # Issue 37 (0034): every poll appends a delta, and nothing looks one up (the fold
    # deletes them all), so the table has no key: no sequence step, no index entry per
    # poll. The fold's total is what test_metrics_plans.py recounts from the history.
    with transaction(database_url) as session:
        indexes = session.scalar(
            text(
                "SELECT count(*) FROM pg_index WHERE indrelid = 'provider_answer_deltas'::regclass"
            )
        )
        columns = session.scalars(
            text(
                "SELECT attname FROM pg_attribute WHERE attrelid = "
                "'provider_answer_deltas'::regclass AND attnum > 0 AND NOT attisdropped "
                "ORDER BY attnum"
            )
        ).all()
    assert (indexes, columns) == (0, ["provider", "status_class", "answers"])
