"""The create step's decisions: before the request (one token, never a resend of a lost
create) and after each HTTP class its answer can be, in create_pending and reconciling.

Pure, table by table, the way step_helpers says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from jobwarden.models.actions import (
    Accept,
    Decided,
    DelaySource,
    Escalate,
    EscalationReason,
    Finish,
    Move,
    RequestPurpose,
    Retry,
    Send,
    Wait,
)
from jobwarden.models.create_decisions import after_create, before_create, before_reconcile
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.provider.requests import StepContext, create_request
from jobwarden.models.provider.signals import RawResponse, TransportFailure
from jobwarden.models.results.decisions import before_collect
from jobwarden.models.states import OperationState
from jobwarden.models.steps import CREATE
from tests.unit.factories import (
    BASE,
    NOW,
    TOKEN,
    claimed,
    context,
    contract,
    operation,
    planned,
    reply,
    walked,
)
from tests.unit.step_helpers import (
    AZURE,
    CONTEXTS,
    CREATE_DEADLINE,
    LOCATION,
    SANDBOX,
    TRANSPORT_FAILURES,
    backoff_wait,
    first_poll_wait,
    sent_create,
    token_of,
)

S = OperationState
R = EscalationReason
NO_STATUS_PATH = context(status=replace(contract().status, path=None))
AZURE_OP = "https://example.cognitiveservices.azure.com/operations/op-1?api-version=2024-01-01"


def http_date(at: datetime) -> str:
    return format_datetime(at, usegmt=True)


# --- create: before the request ------------------------------------------------------


@pytest.mark.parametrize("name", ["sandbox", "operation_location", "google_aip151", "openai_batch"])
def test_a_fresh_create_is_sent_once_with_the_operations_one_token(name: str) -> None:
    ctx = CONTEXTS[name]
    op = operation(S.create_pending)
    action = before_create(op, ctx, NOW).action
    assert isinstance(action, Send)
    assert action.request.purpose is RequestPurpose.create
    assert action.request.method == ctx.contract.create.method
    assert action.request.url == ctx.base_url + ctx.contract.create.path
    assert token_of(ctx, action.request) == TOKEN
    assert (action.event, action.counters, action.move_to) == (
        EventKind.create_sent,
        {"create_attempts": 1},
        None,
    )
    assert action.deadline == op.create_deadline
    # The first claim fixes the first-sent time that every retry sends again.
    assert planned(op, Decided(action=action)).changes == {
        "create_attempts": 1,
        "first_sent_at": NOW,
    }


@pytest.mark.parametrize("last", [EventKind.create_sent, EventKind.reconcile_sent])
@pytest.mark.parametrize(
    ("now", "overrides"),
    [
        (NOW, {}),
        (CREATE_DEADLINE + timedelta(seconds=1), {}),  # the deadline passed meanwhile
        (NOW, {"approval_expires_at": NOW - timedelta(seconds=1)}),  # so did the approval
    ],
)
def test_a_lost_create_response_moves_to_create_unknown_and_never_resends(
    last: EventKind, now: datetime, overrides: dict[str, Any]
) -> None:
    op = operation(S.create_pending, create_attempts=1, last_event_kind=last, **overrides)
    decided = before_create(op, SANDBOX, now)
    assert decided.action == Move(
        to=S.create_unknown,
        event=EventKind.create_ambiguous,
        cause="create_sent_without_recorded_outcome",
        wake_at=now,
    )
    p = planned(op, decided, now=now)
    assert walked(op.state, p) == [S.create_unknown]
    assert "create_attempts" not in p.changes  # nothing was sent, nothing is counted
    assert S.create_unknown not in CREATE.states  # a stale create message cannot resend it


@pytest.mark.parametrize(
    ("overrides", "now", "reason"),
    [
        ({}, CREATE_DEADLINE, "create_deadline_exceeded"),
        (
            {"approval_expires_at": NOW},
            NOW,
            "approval_expired before the create was sent",
        ),
        (
            {"approval_expires_at": NOW - timedelta(hours=1)},
            CREATE_DEADLINE + timedelta(hours=1),
            "approval_expired before the create was sent",
        ),
        # A 429 created nothing: its retry may give up at the deadline.
        (
            {"create_attempts": 2, "last_event_kind": EventKind.create_rate_limited},
            CREATE_DEADLINE,
            "create_deadline_exceeded",
        ),
    ],
)
def test_a_create_with_nothing_in_flight_fails_once_its_deadline_or_approval_has_passed(
    overrides: dict[str, Any], now: datetime, reason: str
) -> None:
    op = operation(S.create_pending, **overrides)
    decided = before_create(op, SANDBOX, now)
    assert decided.action == Finish(state=S.failed, reason=reason)
    assert walked(op.state, planned(op, decided, now=now)) == [S.failed]


def test_a_create_retried_after_a_429_is_sent_again_with_the_same_token() -> None:
    op = operation(
        S.create_pending, create_attempts=1, last_event_kind=EventKind.create_rate_limited
    )
    action = before_create(op, SANDBOX, NOW + timedelta(seconds=30)).action
    assert isinstance(action, Send)
    assert action.counters == {"create_attempts": 2}
    assert token_of(SANDBOX, action.request) == TOKEN


@pytest.mark.parametrize(
    ("before", "op"),
    [
        (
            before_create,
            operation(
                S.create_pending,
                create_attempts=1,
                last_event_kind=EventKind.create_rate_limited,  # a 429 with Retry-After: 30
                next_poll_at=NOW + timedelta(seconds=30),
            ),
        ),
        (
            before_reconcile,
            operation(
                S.create_unknown,
                create_attempts=1,
                last_event_kind=EventKind.create_ambiguous,  # a 503 with Retry-After: 30
                next_poll_at=NOW + timedelta(seconds=30),
            ),
        ),
        (
            before_collect,
            operation(
                S.result_collecting,
                remote_job_id="job-1",
                result_reference="/v1/jobs/job-1/result",
                transport_failures_used=1,  # a failed download that backs off 30 s
                next_poll_at=NOW + timedelta(seconds=30),
            ),
        ),
    ],
    ids=["create", "reconcile", "collect"],
)
def test_an_early_wake_up_sends_nothing_before_the_recorded_retry_time(
    before: Callable[[Operation, StepContext, datetime], Decided], op: Operation
) -> None:
    assert not isinstance(before(op, SANDBOX, NOW).action, Send)


# --- create: after the answer --------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "answer", "job_id", "status_url"),
    [
        ("sandbox", reply(201, {"id": "job-1"}), "job-1", f"{BASE}/v1/jobs/job-1"),
        # A body locator never takes a URL from a header.
        (
            "sandbox",
            reply(202, {"id": "job-1"}, headers={"location": "https://elsewhere.test/x"}),
            "job-1",
            f"{BASE}/v1/jobs/job-1",
        ),
        ("sandbox", reply(200, {"id": 42}), "42", f"{BASE}/v1/jobs/42"),
        (
            "google_aip151",
            reply(200, {"name": "operations/abc", "done": False}),
            "operations/abc",
            "https://example.googleapis.com/v1/operations/abc",
        ),
        (
            "openai_batch",
            reply(200, {"id": "batch_1", "status": "validating"}),
            "batch_1",
            "https://api.openai.com/v1/batches/batch_1",
        ),
        (
            "operation_location",
            reply(202, headers={"operation-location": AZURE_OP}),
            AZURE_OP,
            AZURE_OP,
        ),
        (
            "location",
            reply(202, headers={"location": "/v1/jobs/job-9"}),
            "/v1/jobs/job-9",
            f"{BASE}/v1/jobs/job-9",
        ),
    ],
)
@pytest.mark.parametrize("state", [S.create_pending, S.reconciling])
def test_a_2xx_naming_the_job_where_the_contract_says_is_accepted_with_a_first_poll(
    name: str, answer: RawResponse, job_id: str, status_url: str, state: S
) -> None:
    ctx = CONTEXTS[name]
    op = operation(state, create_attempts=1, last_event_kind=EventKind.create_sent)
    decided = after_create(op, ctx, create_request(ctx, op), answer, NOW, 1.0)
    event = EventKind.create_accepted if state is S.create_pending else EventKind.reconciled
    assert decided.action == Accept(
        job_id=job_id, status_url=status_url, wait=first_poll_wait(ctx), event=event
    )
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == [S.accepted]
    assert (p.changes["remote_job_id"], p.changes["status_url"]) == (job_id, status_url)


def test_a_replayed_create_is_recorded_as_a_replay() -> None:
    op, send = sent_create()
    answer = reply(200, {"id": "job-1"}, headers={"idempotent-replayed": "true"})
    action = after_create(op, SANDBOX, send.request, answer, NOW, 1.0).action
    assert isinstance(action, Accept)
    assert action.event is EventKind.create_replayed


def test_the_first_poll_honours_a_retry_after_on_the_create_answer() -> None:
    op, send = sent_create(AZURE)
    answer = reply(202, headers={"operation-location": AZURE_OP, "retry-after": "30"})
    action = after_create(op, AZURE, send.request, answer, NOW, 1.0).action
    assert isinstance(action, Accept)
    assert action.wait.until >= NOW + timedelta(seconds=30)
    assert action.wait.delay_source is DelaySource.provider_retry_after


@pytest.mark.parametrize(
    ("ctx", "answer"),
    [
        (AZURE, reply(202, headers={"operation-location": "https://evil.example/operations/1"})),
        # Same host, another port or scheme: another origin.
        (
            AZURE,
            reply(
                202, headers={"operation-location": "http://example.cognitiveservices.azure.com/o"}
            ),
        ),
        (LOCATION, reply(202, headers={"location": "http://127.0.0.1:9999/v1/jobs/job-1"})),
    ],
)
@pytest.mark.parametrize("state", [S.create_pending, S.reconciling])
def test_a_status_url_on_a_foreign_origin_is_a_contract_violation_and_never_accepted(
    ctx: StepContext, answer: RawResponse, state: S
) -> None:
    op = operation(state, create_attempts=1, last_event_kind=EventKind.create_sent)
    decided = after_create(op, ctx, create_request(ctx, op), answer, NOW, 1.0)
    assert isinstance(decided.action, Escalate)
    assert (decided.action.reason, decided.action.state) == (R.contract_violation, S.escalated)
    assert decided.action.detail.startswith("status URL on an origin the contract does not allow")
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == [S.escalated]
    assert "status_url" not in p.changes  # nothing will ever poll it


AMBIGUOUS: list[tuple[str, RawResponse, bool, str]] = [
    ("sandbox", reply(202), False, "http_202 without a usable job id"),
    # Never guess a URL: the sandbox names its job in the body, Azure in Operation-Location.
    (
        "sandbox",
        reply(202, headers={"location": f"{BASE}/v1/jobs/job-1"}),
        False,
        "http_202 without a usable job id",
    ),
    (
        "operation_location",
        reply(202, headers={"location": AZURE_OP}),
        False,
        "http_202 without a usable job id",
    ),
    ("sandbox", reply(200, {"id": ""}), False, "http_200 without a usable job id"),
    ("sandbox", reply(201, {"id": True}), False, "http_201 without a usable job id"),
    ("sandbox", reply(200, {"id": None}), False, "http_200 without a usable job id"),
    ("sandbox", reply(200, body_problem="malformed_json"), False, "malformed: http_200"),
    ("sandbox", reply(202, ["job-1"]), False, "malformed: http_202"),
    ("sandbox", reply(500), True, "server_error: http_500"),
    ("sandbox", reply(502), True, "server_error: http_502"),
    ("sandbox", reply(503), True, "server_error: http_503"),
    ("google_aip151", reply(504), True, "server_error: http_504"),
    ("sandbox", reply(302, headers={"location": "/v1/jobs/job-1"}), True, "transport: protocol"),
    ("sandbox", reply(100), True, "transport: protocol"),
] + [("sandbox", reply(None, failure=f), True, f"transport: {f}") for f in TRANSPORT_FAILURES]


@pytest.mark.parametrize(("name", "answer", "counts", "detail"), AMBIGUOUS)
@pytest.mark.parametrize(
    ("state", "to"), [(S.create_pending, S.create_unknown), (S.reconciling, S.reconciling)]
)
def test_an_ambiguous_create_answer_waits_to_reconcile_with_the_same_token(
    name: str, answer: RawResponse, counts: bool, detail: str, state: S, to: S
) -> None:
    ctx = CONTEXTS[name]
    op = operation(state, create_attempts=1, last_event_kind=EventKind.create_sent)
    decided = after_create(op, ctx, create_request(ctx, op), answer, NOW, 1.0)
    backoff = 2 * ctx.contract.poll.base_seconds  # attempt 1, u = 1
    assert decided.action == Retry(
        wait=backoff_wait(backoff),
        event=EventKind.create_ambiguous,
        to=to,
        detail=detail,
        counts_transport_failure=counts,
    )
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == ([to] if to is not state else [])
    assert p.changes.get("transport_failures_used", 0) == (1 if counts else 0)
    # Whatever came back, the next step reconciles under the same token.
    again = claimed(op, p)
    resend = before_reconcile(again, ctx, NOW + timedelta(seconds=backoff)).action
    assert isinstance(resend, Send)
    assert resend.request.purpose is RequestPurpose.create
    assert token_of(ctx, resend.request) == TOKEN
    assert resend.event is EventKind.reconcile_sent


@pytest.mark.parametrize("code", [400, 404, 405, 410, 413, 418, 451])
@pytest.mark.parametrize("state", [S.create_pending, S.reconciling])
def test_a_refused_create_fails_with_the_answer_in_its_own_event(code: int, state: S) -> None:
    op = operation(state, create_attempts=1, last_event_kind=EventKind.create_sent)
    answer = reply(code, {"error": "bad request"})
    decided = after_create(op, SANDBOX, create_request(SANDBOX, op), answer, NOW, 1.0)
    assert decided.action == Finish(
        state=S.failed, reason=f"http_{code}", event=EventKind.create_refused
    )
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == [S.failed]
    assert [e.kind for e in p.events] == [EventKind.create_refused]


@pytest.mark.parametrize(
    ("code", "reason", "detail"),
    [
        (401, R.authorization_denied, "HTTP 401 on create"),
        (403, R.authorization_denied, "HTTP 403 on create"),
        (422, R.contract_violation, "http_422 for our own token: same token, different request"),
    ],
)
@pytest.mark.parametrize("state", [S.create_pending, S.reconciling])
def test_denied_and_conflicting_creates_escalate_without_a_retry(
    code: int, reason: R, detail: str, state: S
) -> None:
    op = operation(state, create_attempts=1, last_event_kind=EventKind.create_sent)
    answer = reply(code, {"error": {"code": code}}, headers={"retry-after": "1"})
    decided = after_create(op, SANDBOX, create_request(SANDBOX, op), answer, NOW, 1.0)
    assert decided.action == Escalate(reason=reason, detail=detail, state=S.escalated)
    assert walked(op.state, planned(op, decided, answer=answer)) == [S.escalated]


@pytest.mark.parametrize("state", [S.create_pending, S.reconciling])
def test_a_409_in_flight_retries_the_same_token_later_until_the_create_deadline(state: S) -> None:
    # IETF Idempotency-Key draft / Azure repeatable requests: 409 while the provider still
    # processes the first request under our token; the same token, after Retry-After.
    op = operation(state, create_attempts=1, last_event_kind=EventKind.create_sent)
    answer = reply(409, {"error": {"code": "idempotency_key_in_use"}}, headers={"retry-after": "3"})
    decided = after_create(op, SANDBOX, create_request(SANDBOX, op), answer, NOW, 1.0)
    assert isinstance(decided.action, Retry)
    # The provider holds the request: the outcome is unknown until the same token learns it.
    assert decided.action.to is (None if state is S.reconciling else S.create_unknown)
    assert decided.action.event is EventKind.create_ambiguous
    assert decided.action.wait.delay_source is DelaySource.provider_retry_after
    assert decided.action.wait.until == NOW + timedelta(seconds=3)
    # Waiting for the first request is no failed attempt: past max_create_attempts the same
    # token is still sent later, within the create deadline (issue 18, item 8).
    spent = operation(state, create_attempts=SANDBOX.contract.limits.max_create_attempts)
    last = after_create(spent, SANDBOX, create_request(SANDBOX, spent), answer, NOW, 1.0)
    assert isinstance(last.action, Retry) and last.action.wait.until == NOW + timedelta(seconds=3)
    late = operation(state, create_attempts=9, create_deadline=NOW + timedelta(seconds=1))
    clipped = after_create(late, SANDBOX, create_request(SANDBOX, late), answer, NOW, 1.0)
    assert isinstance(clipped.action, Retry) and clipped.action.wait.clipped_to_deadline


def test_a_create_still_in_flight_at_its_deadline_escalates_and_never_fails_quietly() -> None:
    # A job may still come of the request the provider holds: `failed` would orphan it.
    op = operation(S.create_pending, create_attempts=3, last_event_kind=EventKind.create_sent)
    answer = reply(409, {"error": {"code": "idempotency_key_in_use"}}, headers={"retry-after": "9"})
    waited = after_create(op, SANDBOX, create_request(SANDBOX, op), answer, NOW, 1.0)
    assert walked(op.state, planned(op, waited, answer=answer)) == [S.create_unknown]
    late = operation(
        S.create_unknown,
        create_attempts=3,
        last_event_kind=EventKind.create_ambiguous,
        create_deadline=NOW - timedelta(seconds=1),
    )
    decided = before_reconcile(late, SANDBOX, NOW)
    assert isinstance(decided.action, Escalate)
    assert decided.action.reason is R.deadline_exceeded
    assert "create deadline passed while reconciling" in decided.action.detail


def test_a_conflict_status_in_flight_only_with_the_body_value_the_contract_names() -> None:
    spec = replace(
        SANDBOX.contract.create,
        in_flight_pointer="/error/code",
        in_flight_values=("idempotency_key_in_use",),
    )
    ctx = replace(SANDBOX, contract=replace(SANDBOX.contract, create=spec))
    op = operation(S.create_pending, create_attempts=1, last_event_kind=EventKind.create_sent)
    busy = reply(409, {"error": {"code": "idempotency_key_in_use"}})
    other = reply(409, {"error": {"code": "idempotency_key_reused"}})
    assert isinstance(after_create(op, ctx, create_request(ctx, op), busy, NOW, 1.0).action, Retry)
    mismatch = after_create(op, ctx, create_request(ctx, op), other, NOW, 1.0).action
    assert isinstance(mismatch, Escalate) and mismatch.reason is R.contract_violation


RATE_LIMITED: list[tuple[dict[str, str], Wait]] = [
    ({}, backoff_wait(0.4)),
    (
        {"retry-after": "30"},
        replace(backoff_wait(30), delay_source=DelaySource.provider_retry_after),
    ),
    (
        {"retry-after": http_date(NOW + timedelta(seconds=45))},
        replace(backoff_wait(45), delay_source=DelaySource.provider_retry_after),
    ),
    (
        {"retry-after": http_date(NOW - timedelta(hours=1))},
        replace(backoff_wait(0), delay_source=DelaySource.provider_retry_after),
    ),
    # Clipped to the create deadline; the deadline check takes over there.
    (
        {"retry-after": "100000"},
        Wait(
            until=CREATE_DEADLINE,
            delay_seconds=600.0,
            delay_source=DelaySource.provider_retry_after,
            clipped_to_deadline=True,
        ),
    ),
    (
        {"retry-after": http_date(NOW + timedelta(days=2))},
        Wait(
            until=CREATE_DEADLINE,
            delay_seconds=600.0,
            delay_source=DelaySource.provider_retry_after,
            clipped_to_deadline=True,
        ),
    ),
    ({"retry-after": "soon"}, backoff_wait(0.4)),
    ({"retry-after": "-5"}, backoff_wait(0.4)),
    ({"retry-after": "1.5"}, backoff_wait(0.4)),
    ({"retry-after": ""}, backoff_wait(0.4)),
]


@pytest.mark.parametrize(("headers", "wait"), RATE_LIMITED)
@pytest.mark.parametrize("state", [S.create_pending, S.reconciling])
def test_a_429_on_create_retries_the_same_token_no_earlier_than_retry_after(
    headers: dict[str, str], wait: Wait, state: S
) -> None:
    op = operation(state, create_attempts=1, last_event_kind=EventKind.create_sent)
    answer = reply(429, headers=headers)
    decided = after_create(op, SANDBOX, create_request(SANDBOX, op), answer, NOW, 1.0)
    assert decided.action == Retry(
        wait=wait,
        event=EventKind.create_rate_limited,
        to=None,  # a 429 created nothing: the state stays
        detail="rate_limited",
        counts_transport_failure=False,
    )
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == []
    assert p.changes["next_poll_at"] == wait.until
    assert p.next_at == wait.until


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (reply(429, headers={"retry-after": "3"}), "create_rate_limited"),  # try again later
        (reply(400, {"error": "bad request"}), "create_refused"),  # refused for good
    ],
)
def test_a_rate_limited_create_is_recorded_apart_from_a_refused_one(
    answer: RawResponse, kind: str
) -> None:
    op, send = sent_create()
    decided = after_create(op, SANDBOX, send.request, answer, NOW, 1.0)
    assert isinstance(decided.action, Retry | Finish)
    assert decided.action.event.value == kind
    assert [e.kind.value for e in planned(op, decided, answer=answer).events] == [kind]


def test_a_5xx_with_retry_after_on_create_waits_for_the_provider() -> None:
    op, send = sent_create()
    answer = reply(503, headers={"retry-after": "20"})
    action = after_create(op, SANDBOX, send.request, answer, NOW, 1.0).action
    assert isinstance(action, Retry)
    assert action.wait == replace(backoff_wait(20), delay_source=DelaySource.provider_retry_after)
    assert action.to is S.create_unknown


@pytest.mark.parametrize(
    ("state", "answer", "expected"),
    [
        (
            S.create_pending,
            reply(503),
            Move(
                to=S.create_unknown,
                event=EventKind.create_ambiguous,
                cause="server_error: http_503",
                wake_at=NOW,
            ),
        ),
        (
            S.create_pending,
            reply(None, failure=TransportFailure.read_timeout),
            Move(
                to=S.create_unknown,
                event=EventKind.create_ambiguous,
                cause="transport: read_timeout",
                wake_at=NOW,
            ),
        ),
        (
            S.create_pending,
            reply(202),
            Move(
                to=S.create_unknown,
                event=EventKind.create_ambiguous,
                cause="http_202 without a usable job id",
                wake_at=NOW,
            ),
        ),
        (
            S.create_pending,
            reply(429, headers={"retry-after": "5"}),
            Escalate(
                reason=R.rate_limited,
                detail="5 create attempts: http_429",
                state=S.escalated,
            ),
        ),
        (
            S.reconciling,
            reply(503),
            Escalate(
                reason=R.provider_failure,
                detail="5 create attempts: server_error: http_503",
                state=S.escalated,
            ),
        ),
        (
            S.reconciling,
            reply(None, failure=TransportFailure.connection_reset),
            Escalate(
                reason=R.provider_failure,
                detail="5 create attempts: transport: connection_reset",
                state=S.escalated,
            ),
        ),
        (
            S.reconciling,
            reply(429),
            Escalate(
                reason=R.rate_limited,
                detail="5 create attempts: http_429",
                state=S.escalated,
            ),
        ),
    ],
)
def test_spent_create_attempts_never_give_up_on_an_unreconciled_create(
    state: S, answer: RawResponse, expected: object
) -> None:
    # The snapshot after the fifth claim: create_attempts already counts this request.
    op = operation(state, create_attempts=5, last_event_kind=EventKind.create_sent)
    decided = after_create(op, SANDBOX, create_request(SANDBOX, op), answer, NOW, 1.0)
    assert decided.action == expected
    walked(op.state, planned(op, decided, answer=answer))


@pytest.mark.parametrize("answer", [reply(503), reply(429), reply(202)])
def test_a_create_below_its_attempt_limit_is_retried(answer: RawResponse) -> None:
    op = operation(S.create_pending, create_attempts=4, last_event_kind=EventKind.create_sent)
    action = after_create(op, SANDBOX, create_request(SANDBOX, op), answer, NOW, 1.0).action
    assert isinstance(action, Retry)


def test_a_different_job_id_under_the_same_token_is_a_contract_violation_keeping_both() -> None:
    op = operation(
        S.reconciling,
        create_attempts=2,
        remote_job_id="job-1",
        last_event_kind=EventKind.reconcile_sent,
    )
    answer = reply(200, {"id": "job-2"})
    decided = after_create(op, SANDBOX, create_request(SANDBOX, op), answer, NOW, 1.0)
    assert decided.action == Escalate(
        reason=R.contract_violation,
        detail="job id 'job-2' differs from known job id 'job-1' for the same token",
        state=S.escalated,
    )
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == [S.escalated]
    assert "remote_job_id" not in p.changes  # the row keeps the first job id ...
    (observed,) = [e for e in p.events if e.kind is EventKind.observed]
    assert observed.excerpt is not None
    assert observed.excerpt["job_id"] == "job-2"  # ... and the history the second


def test_the_same_job_id_under_the_same_token_is_reconciled() -> None:
    op = operation(S.reconciling, create_attempts=2, remote_job_id="job-1")
    answer = reply(200, {"id": "job-1"})
    action = after_create(op, SANDBOX, create_request(SANDBOX, op), answer, NOW, 1.0).action
    assert isinstance(action, Accept)
    assert (action.job_id, action.event) == ("job-1", EventKind.reconciled)


@pytest.mark.parametrize("state", [S.create_pending, S.reconciling])
def test_a_job_without_a_status_location_is_a_contract_violation_keeping_the_job_id(
    state: S,
) -> None:
    op = operation(state, create_attempts=1, last_event_kind=EventKind.create_sent)
    answer = reply(202, {"id": "job-1"})
    decided = after_create(op, NO_STATUS_PATH, create_request(SANDBOX, op), answer, NOW, 1.0)
    assert decided.action == Escalate(
        reason=R.contract_violation,
        detail="accepted without a status location the contract names",
        state=S.escalated,
        keep_job_id="job-1",
    )
    p = planned(op, decided, answer=answer)
    assert p.changes["remote_job_id"] == "job-1"
    assert walked(op.state, p) == [S.escalated]


@pytest.mark.parametrize("name", ["sandbox", "operation_location", "google_aip151", "openai_batch"])
@pytest.mark.parametrize(
    "answer",
    [
        reply(429, headers={"retry-after": "3"}),
        reply(503),
        reply(None, failure=TransportFailure.tls),
    ],
)
def test_every_retry_is_sent_again_with_the_same_provider_token(
    name: str, answer: RawResponse
) -> None:
    ctx = CONTEXTS[name]
    op, send = sent_create(ctx)
    decided = after_create(op, ctx, send.request, answer, NOW, 1.0)
    assert isinstance(decided.action, Retry)
    retry = decided.action
    assert retry.wait.delay_source in (DelaySource.provider_retry_after, DelaySource.local_backoff)
    later = claimed(op, planned(op, decided, answer=answer))
    before = before_create if later.state is S.create_pending else before_reconcile
    again = before(later, ctx, retry.wait.until).action
    assert isinstance(again, Send)
    assert again.request == send.request  # same URL, same body, same token
    assert token_of(ctx, again.request) == TOKEN
