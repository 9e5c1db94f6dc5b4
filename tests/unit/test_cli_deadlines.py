"""`jobwarden show` says whether each deadline still applies (issue 36, point 7)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from jobwarden.cli.deadlines import deadline_lines, deadline_views, span
from jobwarden.models.states import OperationState as S
from tests.unit.factories import NOW, operation


def _notes(**row: Any) -> dict[str, str]:
    return {v.name: v.note for v in deadline_views(operation(**row), NOW)}


def test_awaiting_approval_shows_the_provider_deadlines_as_not_running_not_as_passed() -> None:
    # Submitted two hours ago, still waiting: the stored instants are in the past, but the
    # wait is added to them at approval (DESIGN invariant 13).
    created = NOW - timedelta(hours=2)
    views = deadline_views(
        operation(
            S.awaiting_approval,
            created_at=created,
            create_deadline=created + timedelta(minutes=5),
            result_deadline=created + timedelta(hours=1),
            next_poll_at=NOW + timedelta(hours=22),
        ),
        NOW,
    )
    by_name = {v.name: v for v in views}
    assert not any(v.passed for v in views)
    assert by_name["create"].note == "not running until approved (5m from then)"
    assert by_name["result"].note == "not running until approved (1h from then)"
    assert by_name["approval window"].note == "open, closes in 22h"
    assert not by_name["create"].applies and by_name["approval window"].applies


def test_a_closed_approval_window_is_shown_closed() -> None:
    notes = _notes(
        state=S.awaiting_approval,
        created_at=NOW - timedelta(days=2),
        next_poll_at=NOW - timedelta(minutes=3),
    )
    assert notes["approval window"] == "closed 3m ago"


def test_a_passed_deadline_says_how_long_ago_and_a_coming_one_how_soon() -> None:
    notes = _notes(
        state=S.observing,
        remote_job_id="job-1",
        create_deadline=NOW - timedelta(hours=1),
        result_deadline=NOW - timedelta(minutes=90, seconds=5),
        business_deadline=NOW + timedelta(days=2, hours=3),
    )
    assert notes["create"] == "met: the remote job exists"
    assert notes["result"] == "passed 1h 30m ago"
    assert notes["business"] == "in 2d 3h"


def test_no_deadline_applies_to_an_ended_operation() -> None:
    views = deadline_views(operation(S.succeeded, result_deadline=NOW - timedelta(hours=1)), NOW)
    assert {v.note for v in views} == {"no longer applies: the operation is succeeded"}
    assert not any(v.applies or v.passed for v in views)


def test_show_lines_keep_the_label_column_and_spans_read_as_people_write_them() -> None:
    lines = deadline_lines(deadline_views(operation(S.observing), NOW))
    assert all(line[16] == " " and line[17] != " " for line in lines), lines
    assert [span(timedelta(seconds=s)) for s in (0, 45, 725, 3 * 3600 + 240)] == [
        "0s",
        "45s",
        "12m 5s",
        "3h 4m",
    ]
