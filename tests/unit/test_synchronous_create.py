"""A create answer that already says how the job ended is read through the state table:
straight to collection or to its end, recorded as a synchronous outcome."""

from __future__ import annotations

from jobwarden.models.actions import Accept, Collect, Finish
from jobwarden.models.create_decisions import after_create
from jobwarden.models.effects import plan
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.persistence.store import check_path
from jobwarden.models.plan import Plan
from jobwarden.models.provider.requests import create_request
from jobwarden.models.states import OperationState as S
from tests.unit.factories import BASE, NOW, answer, context, operation

CTX = context()


def _decide(body: object, status: int = 200) -> tuple[Operation, Plan]:
    op = operation(S.create_pending, create_attempts=1, last_event_kind=EventKind.create_sent)
    raw = answer(status, body)
    decided = after_create(op, CTX, create_request(CTX, op), raw, NOW, 1.0)
    return op, plan(op, decided, actor="w", now=NOW, answer=raw, max_countdown=60)


def test_a_create_answer_that_already_succeeded_goes_straight_to_collection() -> None:
    body = {"id": "job_9", "status": "succeeded", "result": {"url": f"{BASE}/v1/results/job_9"}}
    op, p = _decide(body)
    assert p.changes["state"] == S.result_collecting.value
    events = p.events
    assert [e.kind for e in events] == [
        EventKind.create_accepted,
        EventKind.decision,
        EventKind.decision,
    ]
    assert "synchronous outcome" in (events[1].cause or "")
    check_path(op.state, events, S.result_collecting)


def test_a_create_answer_that_already_failed_ends_the_operation_without_a_poll() -> None:
    _, p = _decide({"id": "job_9", "status": "failed"})
    assert p.changes["state"] == S.failed.value
    assert p.next_at is None


def test_a_result_answered_without_a_job_id_is_collected_under_the_operation() -> None:
    op = operation(S.create_pending, create_attempts=1, last_event_kind=EventKind.create_sent)
    raw = answer(200, {"status": "succeeded", "result": {"url": f"{BASE}/v1/results/r1"}})
    decided = after_create(op, CTX, create_request(CTX, op), raw, NOW, 1.0)
    assert isinstance(decided.action, Accept) and decided.action.job_id is None
    assert isinstance(decided.action.then, Collect)


def test_a_pending_create_answer_is_accepted_and_polled_as_before() -> None:
    _, p = _decide({"id": "job_9", "status": "queued"})
    assert p.changes["state"] == S.accepted.value
    assert p.next_at is not None


def test_a_create_body_without_a_state_says_nothing_about_the_end() -> None:
    op = operation(S.create_pending, create_attempts=1, last_event_kind=EventKind.create_sent)
    raw = answer(202, {"id": "job_9"})
    decided = after_create(op, CTX, create_request(CTX, op), raw, NOW, 1.0)
    assert isinstance(decided.action, Accept) and decided.action.then is None
    assert not isinstance(decided.action.then, Finish)
