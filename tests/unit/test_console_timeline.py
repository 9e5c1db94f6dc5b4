"""The console's timeline, built and drawn by pure functions from an operation's events.

Retry-After is read as delay-seconds or an HTTP-date (RFC 9110 §10.2.3).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from jobwarden.console.timeline import build_timeline, outcome_of, render_svg, retry_after_end
from jobwarden.models.history.chain import ChainedEvent, EventDraft, EventKind

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def _ev(seq: int, kind: EventKind, at: float, actor: str = "worker", **fields: Any) -> ChainedEvent:
    draft = EventDraft(kind=kind, actor=actor, at=T0 + timedelta(seconds=at), **fields)
    return ChainedEvent(operation_id="op", seq=seq, draft=draft, prev_hash="", hash="")


def _met_a_503() -> list[ChainedEvent]:
    """Accepted, polled 200, then a 503 with Retry-After: 20, waited, then 200 again."""
    return [
        _ev(1, EventKind.create_accepted, 0, http_status=202, excerpt={"job_id": "j"}),
        _ev(
            2,
            EventKind.polled,
            2,
            http_status=200,
            delay_source="local_backoff",
            excerpt={"next_poll_at": (T0 + timedelta(seconds=4)).isoformat()},
        ),
        _ev(
            3,
            EventKind.polled,
            4,
            http_status=503,
            delay_source="provider_retry_after",
            excerpt={
                "headers": {"retry-after": "20"},
                "next_poll_at": (T0 + timedelta(seconds=24)).isoformat(),
            },
        ),
        _ev(4, EventKind.polled, 24.5, http_status=200, excerpt={"remote_state": "succeeded"}),
    ]


def test_a_503_with_retry_after_is_a_shaded_window_with_no_request_inside_it() -> None:
    tl = build_timeline(
        _met_a_503(), deadline=T0 + timedelta(hours=1), budget_used=3, budget_max=10, now=T0
    )
    assert [(w.start, w.end) for w in tl.windows] == [
        (T0 + timedelta(seconds=4), T0 + timedelta(seconds=24))
    ]
    window = tl.windows[0]
    assert not [t for t in tl.ticks if window.start < t.at < window.end]
    assert [t.outcome for t in tl.ticks] == ["ok", "ok", "server_error", "ok"]
    assert [(w.delay_source, (w.end - w.start).total_seconds()) for w in tl.waits] == [
        ("local_backoff", 2.0),
        ("provider_retry_after", 20.0),
    ]


def test_a_rate_limited_create_is_a_throttled_request_with_its_retry_after_window() -> None:
    retry = _ev(
        1,
        EventKind.create_rate_limited,
        0,
        http_status=429,
        cause="rate_limited",
        delay_source="provider_retry_after",
        excerpt={"headers": {"retry-after": "3"}},
    )
    tl = build_timeline(
        [retry], deadline=T0 + timedelta(hours=1), budget_used=0, budget_max=1, now=T0
    )
    assert [(t.outcome, t.label) for t in tl.ticks] == [("throttled", "429")]
    assert [(w.start, w.end) for w in tl.windows] == [(T0, T0 + timedelta(seconds=3))]


def test_a_request_sent_inside_a_retry_after_window_would_show_inside_it() -> None:
    events = [*_met_a_503()[:3], _ev(4, EventKind.polled, 10, http_status=200)]
    tl = build_timeline(
        events, deadline=T0 + timedelta(hours=1), budget_used=3, budget_max=10, now=T0
    )
    window = tl.windows[0]
    assert [t.at for t in tl.ticks if window.start < t.at < window.end] == [
        T0 + timedelta(seconds=10)
    ]


def test_the_svg_shades_the_window_colours_each_request_and_marks_deadline_and_budget() -> None:
    tl = build_timeline(
        _met_a_503(), deadline=T0 + timedelta(seconds=30), budget_used=3, budget_max=10, now=T0
    )
    svg = render_svg(tl)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert re.findall(
        r'class="retry-after"[^>]*data-start="([\d.]+)" data-end="([\d.]+)"', svg
    ) == [("4.0", "24.0")]
    ticks = re.findall(r'class="request outcome-(\w+)"[^>]*data-at="([\d.]+)"', svg)
    assert ticks == [("ok", "0.0"), ("ok", "2.0"), ("server_error", "4.0"), ("ok", "24.5")]
    assert 'data-delay-source="provider_retry_after"' in svg
    assert '<g class="deadline" data-at="30.0">' in svg and "(beyond the axis)" not in svg
    assert "budget: 3 of 10 status requests" in svg


def test_a_far_deadline_is_drawn_at_the_edge_without_squashing_the_requests() -> None:
    tl = build_timeline(
        _met_a_503(), deadline=T0 + timedelta(hours=5), budget_used=3, budget_max=10, now=T0
    )
    assert tl.end == T0 + timedelta(seconds=24.5)
    assert "deadline (beyond the axis)" in render_svg(tl)


def test_retry_after_is_read_as_seconds_or_an_http_date_and_anything_else_is_ignored() -> None:
    assert retry_after_end("120", T0) == T0 + timedelta(seconds=120)
    assert retry_after_end("Tue, 01 Dec 2026 12:05:00 GMT", T0) == T0 + timedelta(minutes=5)
    assert retry_after_end("soon", T0) is None
    assert retry_after_end("-5", T0) is None


def test_outcomes_follow_the_status_class_and_a_missing_answer_is_its_own() -> None:
    assert [outcome_of(s, {}) for s in (200, 202, 404, 429, 500)] == [
        "ok",
        "ok",
        "refused",
        "throttled",
        "server_error",
    ]
    assert outcome_of(None, {"transport_failure": "timeout"}) == "no_answer"


def test_provider_text_in_a_delay_source_is_escaped_in_the_svg() -> None:
    events = [
        _ev(
            1,
            EventKind.decision,
            0,
            delay_source="<script>",
            excerpt={"next_poll_at": (T0 + timedelta(seconds=5)).isoformat()},
        )
    ]
    svg = render_svg(build_timeline(events, deadline=T0, budget_used=0, budget_max=1, now=T0))
    assert "<script>" not in svg and "&lt;script&gt;" in svg


def test_a_stop_and_the_human_decision_after_it_are_marked_with_who_acted() -> None:
    events = [
        *_met_a_503()[:2],
        _ev(3, EventKind.escalated, 5, cause="request_budget_exhausted"),
        _ev(4, EventKind.human_decision, 9, cause="extend", actor="human:token:alice"),
    ]
    tl = build_timeline(events, deadline=T0, budget_used=2, budget_max=2, now=T0)
    assert [(m.kind, (m.at - T0).total_seconds()) for m in tl.marks] == [
        ("escalated", 5.0),
        ("human_decision", 9.0),
    ]
    svg = render_svg(tl)
    assert '<g class="mark mark-human_decision" data-at="9.0">' in svg
    assert "decided: extend (human:token:alice)" in svg


def test_a_wait_aimed_at_the_jobs_finish_shows_the_estimated_finish_it_aimed_past() -> None:
    finish = T0 + timedelta(seconds=60)
    events = [
        _ev(1, EventKind.create_accepted, 0, http_status=202, excerpt={"job_id": "j"}),
        _ev(
            2,
            EventKind.polled,
            3,
            http_status=200,
            delay_source="progress_estimate",
            excerpt={
                "next_poll_at": (finish + timedelta(seconds=1.8)).isoformat(),
                "estimated_finish": finish.isoformat(),
                "evidence": "pace 1.667 %/s since 2026-12-01T12:00:00+00:00",
            },
        ),
        _ev(3, EventKind.polled, 61.8, http_status=200, excerpt={"remote_state": "succeeded"}),
    ]
    tl = build_timeline(
        events, deadline=T0 + timedelta(hours=1), budget_used=2, budget_max=10, now=T0
    )
    assert [w.estimated_finish for w in tl.waits] == [finish]
    svg = render_svg(tl)
    assert re.search(r'class="estimated-finish"[^>]*data-at="60.0"', svg), svg
