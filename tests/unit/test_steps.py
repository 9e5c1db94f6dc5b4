"""Every step's decisions, table by table: each HTTP class each step can meet, in each state.

Pure: frozen operations, shipped contracts (varied with ``dataclasses.replace``), answers
built by hand, a fixed ``NOW`` and ``u = 1`` (the full backoff ceiling). A claim is
simulated as the runner does it: ``plan`` the ``Send``, apply its changes, then ask
``after`` with that snapshot.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from jobwarden.models.actions import (
    Accept,
    Collect,
    Decided,
    DelaySource,
    Escalate,
    EscalationReason,
    Finish,
    Move,
    NotYet,
    ProviderRequest,
    RequestPurpose,
    Retry,
    Send,
    Succeed,
    Wait,
)
from jobwarden.models.contract import JobLocator, ReconciliationPath, ReconciliationSpec
from jobwarden.models.create_decisions import (
    after_create,
    after_reconcile,
    before_create,
    before_reconcile,
)
from jobwarden.models.digests import DigestCheck
from jobwarden.models.history import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.requests import StepContext, create_request
from jobwarden.models.result_decisions import after_collect, before_collect
from jobwarden.models.results import ResultVerdict
from jobwarden.models.signals import RawResponse, TransportFailure
from jobwarden.models.states import OperationState
from jobwarden.models.steps import (
    CREATE,
    after_cancel,
    after_poll,
    before_cancel,
    before_poll,
    unsent,
)
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

S = OperationState
R = EscalationReason

SANDBOX = context()
AZURE = context("operation_location")
GOOGLE = context("google_aip151")
OPENAI = context("openai_batch")
# The sandbox with its status URL in the Location header, as a contract may say (no path
# templates then: the job is known by that URL).
LOCATION = context(
    create=replace(contract().create, job_locator=JobLocator.location, job_id_pointer=None),
    status=replace(contract().status, path=None),
    cancel=None,
)
LOOKUP = context(
    reconciliation=ReconciliationSpec(
        path=ReconciliationPath.lookup_by_reference,
        lookup_path="/v1/jobs?reference={token}",
        lookup_job_id_pointer="/data/0/id",
    )
)
NO_RECONCILIATION = context(reconciliation=ReconciliationSpec(path=ReconciliationPath.none))
SANDBOX_RESULT = SANDBOX.contract.result
assert SANDBOX_RESULT is not None
NO_STATUS_PATH = context(status=replace(contract().status, path=None))
CONTEXTS: dict[str, StepContext] = {
    "sandbox": SANDBOX,
    "operation_location": AZURE,
    "google_aip151": GOOGLE,
    "openai_batch": OPENAI,
    "location": LOCATION,
    "lookup": LOOKUP,
}
AZURE_OP = "https://example.cognitiveservices.azure.com/operations/op-1?api-version=2024-01-01"
CREATE_DEADLINE = NOW + timedelta(minutes=10)  # the factory's
RESULT_DEADLINE = NOW + timedelta(hours=1)
COLLECT_DEADLINE = NOW + timedelta(minutes=15)
TRANSPORT_FAILURES = list(TransportFailure)
RESULT = json.dumps(
    {"items": [{"id": 1}, {"id": 2}], "failed_items": [], "record_count": 2}
).encode()
SHA = hashlib.sha256(RESULT).hexdigest()


def http_date(at: datetime) -> str:
    return format_datetime(at, usegmt=True)


def token_of(ctx: StepContext, request: ProviderRequest) -> object:
    """The provider token where the contract says it travels."""
    spec = ctx.contract.create
    if spec.token_placement.value == "header":
        return request.headers.get(spec.token_name)
    assert isinstance(request.json_body, dict)
    return request.json_body.get(spec.token_name)


def sent_create(ctx: StepContext = SANDBOX, **overrides: Any) -> tuple[Operation, Send]:
    """A create_pending operation right after its create claim committed."""
    op = operation(S.create_pending, **overrides)
    decided = before_create(op, ctx, NOW)
    assert isinstance(decided.action, Send)
    return claimed(op, planned(op, decided)), decided.action


def sent_reconcile(
    ctx: StepContext = SANDBOX, state: S = S.create_unknown, **overrides: Any
) -> tuple[Operation, Send]:
    values: dict[str, Any] = {"create_attempts": 1, "last_event_kind": EventKind.create_ambiguous}
    op = operation(state, **(values | overrides))
    decided = before_reconcile(op, ctx, NOW)
    assert isinstance(decided.action, Send)
    return claimed(op, planned(op, decided)), decided.action


def first_poll_wait(ctx: StepContext, now: datetime = NOW) -> Wait:
    initial = ctx.contract.poll.initial_delay_seconds
    return Wait(
        until=now + timedelta(seconds=initial),
        delay_seconds=initial,
        delay_source=DelaySource.initial_delay,
        clipped_to_deadline=False,
        cause="first_poll",
    )


def backoff_wait(seconds: float, cause: str = "wait") -> Wait:
    return Wait(
        until=NOW + timedelta(seconds=seconds),
        delay_seconds=seconds,
        delay_source=DelaySource.local_backoff,
        clipped_to_deadline=False,
        cause=cause,
    )


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
            {"create_attempts": 2, "last_event_kind": EventKind.create_refused},
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
    op = operation(S.create_pending, create_attempts=1, last_event_kind=EventKind.create_refused)
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
                last_event_kind=EventKind.create_refused,  # a 429 with Retry-After: 30
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
        event=EventKind.create_refused,
        to=None,  # a 429 created nothing: the state stays
        detail="rate_limited",
        counts_transport_failure=False,
    )
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == []
    assert p.changes["next_poll_at"] == wait.until
    assert p.next_at == wait.until


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


# --- reconcile -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "path"),
    [(S.create_unknown, [S.reconciling, S.escalated]), (S.reconciling, [S.escalated])],
)
def test_without_a_reconciliation_path_an_unknown_create_escalates_unknown_state(
    state: S, path: list[S]
) -> None:
    op = operation(state, create_attempts=1)
    decided = before_reconcile(op, NO_RECONCILIATION, NOW)
    assert decided.action == Escalate(
        reason=R.unknown_state,
        detail="create outcome unknown and the contract has no reconciliation "
        "path: at-most-once cannot be proven",
        state=S.escalated,
    )
    assert walked(op.state, planned(op, decided)) == path


@pytest.mark.parametrize("state", [S.create_unknown, S.reconciling])
@pytest.mark.parametrize("ctx", [SANDBOX, LOOKUP], ids=["same_token", "lookup"])
def test_reconciliation_after_the_create_deadline_escalates_deadline_exceeded(
    state: S, ctx: StepContext
) -> None:
    op = operation(state, create_attempts=1)
    decided = before_reconcile(op, ctx, CREATE_DEADLINE)
    assert decided.action == Escalate(
        reason=R.deadline_exceeded,
        detail="create deadline passed while reconciling",
        state=S.escalated,
    )
    assert walked(op.state, planned(op, decided, now=CREATE_DEADLINE))[-1] is S.escalated


@pytest.mark.parametrize(
    ("name", "purpose", "url", "cause"),
    [
        ("sandbox", RequestPurpose.create, f"{BASE}/v1/jobs", "same_token_retry"),
        ("google_aip151", RequestPurpose.create, None, "same_token_retry"),
        ("operation_location", RequestPurpose.create, None, "same_token_retry"),
        (
            "lookup",
            RequestPurpose.lookup,
            f"{BASE}/v1/jobs?reference={TOKEN}",
            "lookup_by_reference",
        ),
    ],
)
@pytest.mark.parametrize(
    ("state", "move_to"), [(S.create_unknown, S.reconciling), (S.reconciling, None)]
)
def test_reconciliation_asks_under_the_same_token_and_counts_the_attempt(
    name: str,
    purpose: RequestPurpose,
    url: str | None,
    cause: str,
    state: S,
    move_to: S | None,
) -> None:
    ctx = CONTEXTS[name]
    op = operation(state, create_attempts=2)
    action = before_reconcile(op, ctx, NOW).action
    assert isinstance(action, Send)
    assert action.request.purpose is purpose
    if purpose is RequestPurpose.create:
        assert action.request == create_request(ctx, op, op.first_sent_at or NOW)
        assert token_of(ctx, action.request) == TOKEN
    else:
        assert (action.request.method, action.request.url) == ("GET", url)
    assert (action.event, action.counters, action.move_to, action.cause) == (
        EventKind.reconcile_sent,
        {"create_attempts": 3},
        move_to,
        cause,
    )
    assert action.deadline == op.create_deadline


def test_a_lookup_contract_without_a_lookup_path_resends_the_same_token() -> None:
    ctx = context(reconciliation=replace(LOOKUP.contract.reconciliation, lookup_path=None))
    action = before_reconcile(operation(S.create_unknown, create_attempts=1), ctx, NOW).action
    assert isinstance(action, Send)
    assert action.request.purpose is RequestPurpose.create


@pytest.mark.parametrize(
    ("ctx", "body", "job_id"),
    [
        (LOOKUP, {"data": [{"id": "job-7"}]}, "job-7"),
        (
            context(
                reconciliation=replace(
                    LOOKUP.contract.reconciliation, lookup_job_id_pointer="/items/0/job"
                )
            ),
            {"items": [{"job": "job-8"}]},
            "job-8",
        ),
        (
            context(
                reconciliation=replace(LOOKUP.contract.reconciliation, lookup_job_id_pointer=None)
            ),
            {"data": [{"id": "job-9"}]},
            "job-9",
        ),
    ],
    ids=["default_pointer", "contract_pointer", "no_pointer"],
)
def test_a_lookup_that_finds_our_job_is_reconciled_with_the_contracts_status_url(
    ctx: StepContext, body: object, job_id: str
) -> None:
    op, send = sent_reconcile(ctx)
    assert send.request.purpose is RequestPurpose.lookup
    answer = reply(200, body)
    decided = after_reconcile(op, ctx, send.request, answer, NOW, 1.0)
    assert decided.action == Accept(
        job_id=job_id,
        status_url=f"{BASE}/v1/jobs/{job_id}",
        wait=first_poll_wait(ctx),
        event=EventKind.reconciled,
    )
    assert walked(op.state, planned(op, decided, answer=answer)) == [S.accepted]


@pytest.mark.parametrize(
    "answer",
    [
        reply(200, {"data": []}),
        reply(200, {"data": [{"id": ""}]}),
        reply(200, {}),
        reply(404, {"error": "no such reference"}),
    ],
)
def test_a_lookup_that_finds_nothing_sends_the_create_with_the_same_token(
    answer: RawResponse,
) -> None:
    op, send = sent_reconcile(LOOKUP)
    decided = after_reconcile(op, LOOKUP, send.request, answer, NOW, 1.0)
    code = answer.observation.status_code
    assert decided.action == Send(
        request=create_request(LOOKUP, op),
        event=EventKind.reconcile_sent,
        counters={"create_attempts": 3},
        move_to=None,
        cause=f"lookup found no job under our token (http {code})",
        excerpt={"attempt": 3},
        deadline=op.create_deadline,
    )
    assert token_of(LOOKUP, decided.action.request) == TOKEN
    assert decided.answered == "lookup response"
    p = planned(op, decided, answer=answer)
    assert [e.kind for e in p.events] == [EventKind.observed, EventKind.reconcile_sent]


@pytest.mark.parametrize(
    "answer",
    [
        reply(503),
        reply(None, failure=TransportFailure.read_timeout),
        reply(429, headers={"retry-after": "60"}),
        reply(200, body_problem="malformed_json"),
    ],
    ids=["503", "read_timeout", "429", "malformed"],
)
def test_a_lookup_that_could_not_be_read_never_sends_the_create(answer: RawResponse) -> None:
    op, send = sent_reconcile(LOOKUP)
    action = after_reconcile(op, LOOKUP, send.request, answer, NOW, 1.0).action
    assert not isinstance(action, Send)


def test_a_lookup_that_finds_a_job_the_contract_cannot_poll_keeps_its_id() -> None:
    ctx = context(
        reconciliation=LOOKUP.contract.reconciliation,
        status=replace(contract().status, path=None),
    )
    op, send = sent_reconcile(ctx)
    answer = reply(200, {"data": [{"id": "job-7"}]})
    decided = after_reconcile(op, ctx, send.request, answer, NOW, 1.0)
    assert decided.action == Escalate(
        reason=R.contract_violation,
        detail="lookup found a job but the contract has no status path",
        state=S.escalated,
        keep_job_id="job-7",
    )
    p = planned(op, decided, answer=answer)
    assert p.changes["remote_job_id"] == "job-7"
    assert walked(op.state, p) == [S.escalated]


def test_a_same_token_reconciliation_answer_is_read_as_a_create_answer() -> None:
    op, send = sent_reconcile(SANDBOX)
    assert op.state is S.reconciling
    answer = reply(200, {"id": "job-1"})
    action = after_reconcile(op, SANDBOX, send.request, answer, NOW, 1.0).action
    assert action == Accept(
        job_id="job-1",
        status_url=f"{BASE}/v1/jobs/job-1",
        wait=first_poll_wait(SANDBOX),
        event=EventKind.reconciled,
    )


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


# --- poll: before the request and a reserved request not sent ------------------------


def polling(state: S, **overrides: Any) -> Operation:
    values: dict[str, Any] = {
        "remote_job_id": "job-1",
        "status_url": f"{BASE}/v1/jobs/job-1",
        "accepted_at": NOW - timedelta(minutes=1),
        "next_poll_at": NOW,
        "status_requests_used": 3,
        "cancel_deadline": NOW + timedelta(minutes=5) if state is S.cancelling else None,
    }
    return operation(state, **(values | overrides))


@pytest.mark.parametrize(
    ("state", "move_to", "deadline"),
    [
        (S.accepted, S.observing, RESULT_DEADLINE),
        (S.observing, None, RESULT_DEADLINE),
        (S.cancelling, None, NOW + timedelta(minutes=5)),
    ],
)
def test_a_due_poll_reserves_one_status_request_before_it_is_sent(
    state: S, move_to: S | None, deadline: datetime
) -> None:
    op = polling(state)
    decided = before_poll(op, SANDBOX, NOW)
    assert decided.action == Send(
        request=ProviderRequest(
            purpose=RequestPurpose.status, method="GET", url=f"{BASE}/v1/jobs/job-1"
        ),
        event=EventKind.poll_sent,
        counters={"status_requests_used": 4},
        move_to=move_to,
        excerpt={"request": 4, "of": 50},
        deadline=deadline,
    )
    p = planned(op, decided)
    assert p.changes["status_requests_used"] == 4
    assert walked(op.state, p) == ([move_to] if move_to else [])


@pytest.mark.parametrize("state", [S.accepted, S.observing, S.cancelling])
def test_an_early_poll_wake_up_writes_nothing(state: S) -> None:
    op = polling(state, next_poll_at=NOW + timedelta(seconds=1))
    decided = before_poll(op, SANDBOX, NOW)
    assert decided.action == NotYet(until=None)
    assert planned(op, decided).empty


@pytest.mark.parametrize(
    ("state", "overrides", "now", "reason", "path"),
    [
        (S.accepted, {}, RESULT_DEADLINE, R.deadline_exceeded, [S.observing, S.result_timed_out]),
        (S.observing, {}, RESULT_DEADLINE, R.deadline_exceeded, [S.result_timed_out]),
        # The deadline is checked first, even on a wake-up that looks early.
        (
            S.observing,
            {"next_poll_at": RESULT_DEADLINE + timedelta(hours=1)},
            RESULT_DEADLINE,
            R.deadline_exceeded,
            [S.result_timed_out],
        ),
        (
            S.cancelling,
            {},
            NOW + timedelta(minutes=5),
            R.cancellation_unconfirmed,
            [S.cancellation_unconfirmed],
        ),
        (
            S.accepted,
            {"status_requests_used": 50},
            NOW,
            R.request_budget_exhausted,
            [S.observing, S.escalated],
        ),
        (
            S.observing,
            {"status_requests_used": 50},
            NOW,
            R.request_budget_exhausted,
            [S.escalated],
        ),
        (
            S.cancelling,
            {"status_requests_used": 50},
            NOW,
            R.cancellation_unconfirmed,
            [S.cancellation_unconfirmed],
        ),
        (S.observing, {"status_url": None}, NOW, R.contract_violation, [S.escalated]),
        # Invariant 10 again before every poll: the credential never leaves the contract.
        (
            S.observing,
            {"status_url": "https://evil.example/v1/jobs/job-1"},
            NOW,
            R.contract_violation,
            [S.escalated],
        ),
        (
            S.cancelling,
            {"status_url": "https://evil.example/v1/jobs/job-1"},
            NOW,
            R.contract_violation,
            [S.cancellation_unconfirmed],
        ),
    ],
)
def test_a_poll_past_its_deadline_or_budget_stops_before_any_request(
    state: S, overrides: dict[str, Any], now: datetime, reason: R, path: list[S]
) -> None:
    op = polling(state, **overrides)
    decided = before_poll(op, SANDBOX, now)
    assert isinstance(decided.action, Escalate)
    assert decided.action.reason is reason
    assert walked(op.state, planned(op, decided, now=now)) == path


@pytest.mark.parametrize("state", [S.accepted, S.observing, S.cancelling])
def test_a_poll_woken_before_the_providers_last_retry_after_waits_it_out(state: S) -> None:
    # e.g. a person's cancel or resume wakes the operation at once (next_poll_at = now).
    op = polling(state, poll_not_before=NOW + timedelta(seconds=25))
    decided = before_poll(op, SANDBOX, NOW)
    assert decided.action == Wait(
        until=NOW + timedelta(seconds=25),
        delay_seconds=25.0,
        delay_source=DelaySource.provider_retry_after,
        clipped_to_deadline=False,
        cause="the provider's last Retry-After still holds",
    )
    p = planned(op, decided)
    # Nothing is sent; the wait's commit reserves the one request it waits for.
    assert (p.changes["status_requests_used"], p.changes["reserved_request"]) == (
        op.status_requests_used + 1,
        op.status_requests_used + 1,
    )
    assert walked(op.state, p) == []
    # A reservation already standing is not doubled.
    reserved = replace(
        op,
        status_requests_used=op.status_requests_used + 1,
        reserved_request=op.status_requests_used + 1,
    )
    again = planned(reserved, before_poll(reserved, SANDBOX, NOW))
    assert "status_requests_used" not in again.changes
    assert "reserved_request" not in again.changes


def status_read(ctx: StepContext, body: object) -> Decided:
    """after_poll on a claimed status request (the poll's own tables are test_decisions')."""
    op = polling(S.observing, status_requests_used=4, status_url=f"{ctx.base_url}/j/1")
    request = ProviderRequest(
        purpose=RequestPurpose.status, method="GET", url=f"{ctx.base_url}/j/1"
    )
    return after_poll(op, ctx, request, reply(200, body), NOW, 1.0)


@pytest.mark.parametrize(
    ("name", "body", "ref", "expected"),
    [
        (
            "sandbox",
            {"status": "succeeded", "result": {"url": "/v1/jobs/job-1/result", "sha256": SHA}},
            "/v1/jobs/job-1/result",
            {"expected_sha256": SHA},
        ),
        # The contract promises a checksum: its absence is carried, and fails validation later.
        (
            "sandbox",
            {"status": "succeeded", "result": {"url": "/r"}},
            "/r",
            {"expected_sha256": None},
        ),
        (
            "google_aip151",
            {"name": "operations/abc", "done": True, "response": {"rows": 3}},
            None,
            {"inline": {"rows": 3}},
        ),
        (
            "openai_batch",
            {"id": "batch_1", "status": "completed", "output_file_id": "file-1"},
            "file-1",
            {},
        ),
    ],
)
def test_a_finished_job_is_collected_with_what_its_status_promised_and_a_fetch_deadline(
    name: str, body: object, ref: str | None, expected: dict[str, Any]
) -> None:
    ctx = CONTEXTS[name]
    window = timedelta(seconds=ctx.contract.limits.result_fetch_deadline_seconds)
    decided = status_read(ctx, body)
    assert decided.action == Collect(result_ref=ref, expected=expected, deadline=NOW + window)


def test_a_result_reference_that_is_not_a_usable_url_is_a_contract_violation() -> None:
    decided = status_read(
        SANDBOX, {"status": "succeeded", "result": {"url": "/r\n/x", "sha256": SHA}}
    )
    assert isinstance(decided.action, Escalate)
    assert decided.action.reason is R.contract_violation


def test_progress_100_is_not_success() -> None:
    decided = status_read(SANDBOX, {"status": "running", "progress": 100})
    assert isinstance(decided.action, Wait)
    assert decided.changes["progress"] == 100.0


@pytest.mark.parametrize(
    ("state", "state_after"),
    [(S.observing, S.result_timed_out), (S.cancelling, S.cancellation_unconfirmed)],
)
def test_a_status_request_whose_deadline_passed_after_the_claim_is_not_sent(
    state: S, state_after: S
) -> None:
    op = polling(state)
    decided = before_poll(op, SANDBOX, NOW)
    assert isinstance(decided.action, Send)
    after_claim = claimed(op, planned(op, decided))
    late = unsent(after_claim, decided.action, decided.action.deadline or NOW)
    assert late is not None
    assert isinstance(late.action, Escalate)
    assert late.action.detail.endswith("; reserved request not sent")
    assert late.action.state is state_after
    assert walked(after_claim.state, planned(after_claim, late)) == [state_after]


@pytest.mark.parametrize(
    ("overrides", "reason"),
    [
        ({}, "create_deadline_exceeded; reserved create not sent"),
        (
            {"approval_expires_at": NOW + timedelta(seconds=1)},
            "approval_expired before the create was sent; reserved create not sent",
        ),
    ],
)
def test_a_create_whose_deadline_passed_after_the_claim_fails_unsent(
    overrides: dict[str, Any], reason: str
) -> None:
    op, send = sent_create(**overrides)
    assert op.last_event_kind is EventKind.create_sent
    late = unsent(op, send, CREATE_DEADLINE)
    assert late == Decided(action=Finish(state=S.failed, reason=reason))
    assert walked(op.state, planned(op, late, now=CREATE_DEADLINE)) == [S.failed]


@pytest.mark.parametrize("ctx", [SANDBOX, LOOKUP], ids=["same_token", "lookup"])
def test_a_reconciliation_whose_deadline_passed_after_the_claim_escalates_unsent(
    ctx: StepContext,
) -> None:
    op, send = sent_reconcile(ctx)
    late = unsent(op, send, CREATE_DEADLINE + timedelta(seconds=1))
    assert late == Decided(
        action=Escalate(
            reason=R.deadline_exceeded,
            detail="create deadline passed while reconciling; reserved request not sent",
            state=S.escalated,
        )
    )


def test_a_claimed_request_before_its_deadline_is_sent() -> None:
    just_before = CREATE_DEADLINE - timedelta(microseconds=1)
    op, send = sent_create()
    assert unsent(op, send, just_before) is None
    op, send = sent_reconcile(LOOKUP)
    assert unsent(op, send, just_before) is None
    poll = polling(S.observing)
    status = before_poll(poll, SANDBOX, NOW).action
    assert isinstance(status, Send)
    assert unsent(poll, status, RESULT_DEADLINE - timedelta(microseconds=1)) is None
    cancel = before_cancel(cancelling_requested(), SANDBOX, NOW).action
    assert isinstance(cancel, Send)
    assert unsent(cancelling_requested(), cancel, NOW + timedelta(days=30)) is None


# --- cancel --------------------------------------------------------------------------


def cancelling_requested(**overrides: Any) -> Operation:
    values: dict[str, Any] = {
        "remote_job_id": "job-1",
        "status_url": f"{BASE}/v1/jobs/job-1",
        "accepted_at": NOW - timedelta(minutes=1),
        "cancel_deadline": NOW + timedelta(minutes=5),
        "next_poll_at": NOW,
        "last_event_kind": EventKind.cancel_requested,
    }
    return operation(S.cancel_requested, **(values | overrides))


@pytest.mark.parametrize(
    ("ctx", "overrides", "url", "deadline", "wake_at"),
    [
        (
            SANDBOX,
            {},
            f"{BASE}/v1/jobs/job-1/cancel",
            NOW + timedelta(minutes=5),
            NOW + timedelta(seconds=0.2),
        ),
        # No recorded deadline: the contract's cancel bound from now.
        (
            SANDBOX,
            {"cancel_deadline": None},
            f"{BASE}/v1/jobs/job-1/cancel",
            NOW + timedelta(seconds=60),
            NOW + timedelta(seconds=0.2),
        ),
        # The first confirmation poll never lies past the cancel deadline.
        (
            OPENAI,
            {"remote_job_id": "batch_1", "cancel_deadline": NOW + timedelta(seconds=10)},
            "https://api.openai.com/v1/batches/batch_1/cancel",
            NOW + timedelta(seconds=10),
            NOW + timedelta(seconds=10),
        ),
        (
            GOOGLE,
            {"remote_job_id": "operations/abc"},
            "https://example.googleapis.com/v1/operations/abc:cancel",
            NOW + timedelta(minutes=5),
            NOW + timedelta(seconds=2),
        ),
    ],
)
def test_a_cancel_is_claimed_moving_to_cancelling_with_a_confirmation_timer(
    ctx: StepContext,
    overrides: dict[str, Any],
    url: str,
    deadline: datetime,
    wake_at: datetime,
) -> None:
    op = cancelling_requested(**overrides)
    decided = before_cancel(op, ctx, NOW)
    assert decided.action == Send(
        request=ProviderRequest(purpose=RequestPurpose.cancel, method="POST", url=url),
        event=EventKind.cancel_sent,
        move_to=S.cancelling,
        changes={"cancel_deadline": deadline},
        wake_at=wake_at,
    )
    p = planned(op, decided)
    assert walked(op.state, p) == [S.cancelling]
    assert (p.changes["cancel_deadline"], p.changes["next_poll_at"]) == (deadline, wake_at)


@pytest.mark.parametrize(
    ("ctx", "overrides"),
    [(AZURE, {}), (SANDBOX, {"remote_job_id": None})],
    ids=["no_cancel_endpoint", "no_remote_job"],
)
def test_a_cancel_that_cannot_be_sent_is_cancellation_unconfirmed(
    ctx: StepContext, overrides: dict[str, Any]
) -> None:
    op = cancelling_requested(**overrides)
    decided = before_cancel(op, ctx, NOW)
    detail = (
        "the contract has no cancel endpoint"
        if ctx.contract.cancel is None
        else "no remote job id is known to cancel"
    )
    assert decided.action == Escalate(
        reason=R.cancellation_unconfirmed, detail=detail, state=S.cancellation_unconfirmed
    )
    assert walked(op.state, planned(op, decided)) == [S.cancelling, S.cancellation_unconfirmed]


def test_a_cancel_url_on_a_foreign_origin_is_never_sent() -> None:
    cancel = SANDBOX.contract.cancel
    assert cancel is not None
    ctx = context(cancel=replace(cancel, path="https://evil.example/v1/jobs/{job_id}/cancel"))
    op = cancelling_requested()
    decided = before_cancel(op, ctx, NOW)
    assert isinstance(decided.action, Escalate)
    # While a cancel is ours every stop is cancellation_unconfirmed, whatever the reason.
    assert (decided.action.reason, decided.action.state) == (
        R.contract_violation,
        S.cancellation_unconfirmed,
    )
    assert walked(op.state, planned(op, decided)) == [S.cancelling, S.cancellation_unconfirmed]


def test_the_first_confirming_poll_after_a_cancel_honours_the_providers_last_retry_after() -> None:
    op = cancelling_requested(poll_not_before=NOW + timedelta(seconds=40))
    action = before_cancel(op, SANDBOX, NOW).action
    assert isinstance(action, Send)
    assert action.wake_at == NOW + timedelta(seconds=40)


def sent_cancel() -> tuple[Operation, Send]:
    op = cancelling_requested()
    decided = before_cancel(op, SANDBOX, NOW)
    assert isinstance(decided.action, Send)
    return claimed(op, planned(op, decided)), decided.action


@pytest.mark.parametrize("code", [401, 403])
def test_a_denied_cancel_escalates_authorization_denied_as_cancellation_unconfirmed(
    code: int,
) -> None:
    op, send = sent_cancel()
    answer = reply(code)
    decided = after_cancel(op, SANDBOX, send.request, answer, NOW, 1.0)
    assert decided.action == Escalate(
        reason=R.authorization_denied,
        detail=f"HTTP {code} on cancel",
        state=S.cancellation_unconfirmed,
    )
    assert walked(op.state, planned(op, decided, answer=answer)) == [S.cancellation_unconfirmed]


@pytest.mark.parametrize(
    "answer",
    [
        reply(200, {"id": "job-1", "status": "cancelled"}),  # still only a status read confirms
        reply(202, {"status": "cancelling"}),
        reply(204),
        reply(400),
        reply(404),
        reply(409),
        reply(410),
        reply(422),
        reply(429, headers={"retry-after": "5"}),
        reply(500),
        reply(503),
        reply(200, body_problem="malformed_json"),
    ]
    + [reply(None, failure=f) for f in TRANSPORT_FAILURES],
)
def test_any_other_cancel_answer_waits_for_a_status_read_to_confirm(answer: RawResponse) -> None:
    op, send = sent_cancel()
    assert op.state is S.cancelling
    decided = after_cancel(op, SANDBOX, send.request, answer, NOW, 1.0)
    code = answer.observation.status_code
    assert SANDBOX.contract.cancel is not None
    # The contract's accepted statuses tell "received" from "not accepted" in the history;
    # either way only a status read may say the job is cancelled.
    cause = (
        "cancel sent; confirm by status reads"
        if code in SANDBOX.contract.cancel.accepted_statuses
        else f"cancel not accepted (http {code or '-'}): the status reads say what the job does"
    )
    assert decided.action == Wait(
        until=NOW + timedelta(seconds=0.2),
        delay_seconds=0.2,
        delay_source=DelaySource.initial_delay,
        clipped_to_deadline=False,
        cause=cause,
    )
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == []  # sending a cancel is not cancelled
    assert [e.kind for e in p.events] == [EventKind.observed, EventKind.decision]


# --- collect -------------------------------------------------------------------------


def collecting(**overrides: Any) -> Operation:
    values: dict[str, Any] = {
        "remote_job_id": "job-1",
        "status_url": f"{BASE}/v1/jobs/job-1",
        "accepted_at": NOW - timedelta(minutes=1),
        "result_reference": "/v1/jobs/job-1/result",
        "validation_summary": {"expected": {"expected_sha256": SHA}},
        "next_poll_at": NOW,
        "collect_deadline": COLLECT_DEADLINE,
        "result_fetch_attempts": 1,
    }
    return operation(S.result_collecting, **(values | overrides))


def test_a_contract_without_a_result_succeeds_without_a_download() -> None:
    op = collecting()
    decided = before_collect(op, context(result=None), NOW)
    assert decided.action == Succeed(
        verdict=None,
        content=None,
        content_type=None,
        note="contract declares no result; nothing to fetch",
    )
    p = planned(op, decided)
    assert walked(op.state, p) == [S.succeeded]
    assert p.result is None


@pytest.mark.parametrize(
    "summary", [None, {}, {"expected": {}}, {"expected": {"inline": None}}, {"expected": None}]
)
def test_a_missing_inline_result_is_unavailable(summary: dict[str, Any] | None) -> None:
    op = collecting(remote_job_id="operations/abc", validation_summary=summary)
    decided = before_collect(op, GOOGLE, NOW)
    assert decided.action == Finish(
        state=S.result_unavailable,
        reason="inline result missing",
        event=EventKind.result_rejected,
        summary={"valid": False, "problem": "inline result missing"},
    )
    assert walked(op.state, planned(op, decided)) == [S.result_unavailable]


def test_an_inline_result_is_validated_and_stored_without_a_request() -> None:
    inline = {"rows": 3, "url": "gs://bucket/out"}
    op = collecting(validation_summary={"expected": {"inline": inline}})
    decided = before_collect(op, GOOGLE, NOW)
    content = json.dumps(inline, separators=(",", ":")).encode()
    assert isinstance(decided.action, Succeed)
    assert (decided.action.content, decided.action.content_type) == (content, "application/json")
    assert decided.action.verdict is not None
    assert decided.action.verdict.valid
    assert decided.action.verdict.sha256 == hashlib.sha256(content).hexdigest()
    assert planned(op, decided).result is not None


@pytest.mark.parametrize(
    ("ctx", "overrides", "url"),
    [
        (SANDBOX, {}, f"{BASE}/v1/jobs/job-1/result"),
        (SANDBOX, {"result_reference": f"{BASE}/v1/jobs/job-1/result?sig=x"}, None),
        (
            OPENAI,
            {"remote_job_id": "batch_1", "result_reference": "file-1"},
            "https://api.openai.com/v1/files/file-1/content",
        ),
        (
            AZURE,
            {"result_reference": "https://example.cognitiveservices.azure.com/reports/1"},
            "https://example.cognitiveservices.azure.com/reports/1",
        ),
        (
            context(result=replace(SANDBOX_RESULT, allowed_origins=("https://files.example.com",))),
            {"result_reference": "https://files.example.com/r/1"},
            "https://files.example.com/r/1",
        ),
    ],
)
def test_a_result_on_an_allowed_origin_is_fetched(
    ctx: StepContext, overrides: dict[str, Any], url: str | None
) -> None:
    op = collecting(**overrides)
    expected = url or op.result_reference
    decided = before_collect(op, ctx, NOW)
    assert decided.action == Send(
        request=ProviderRequest(
            purpose=RequestPurpose.result,
            method="GET",
            url=str(expected),
            headers={"accept-encoding": "identity"},  # any digest field is checked
        ),
        event=EventKind.result_fetch_sent,
        counters={"result_fetch_attempts": 2},
        excerpt={"url": str(expected).split("?")[0]},
        deadline=COLLECT_DEADLINE,
    )
    p = planned(op, decided)
    assert walked(op.state, p) == []
    assert p.changes == {"result_fetch_attempts": 2}  # counted before the download leaves


@pytest.mark.parametrize(
    "ref",
    [
        "https://evil.example/r",
        "http://127.0.0.1:9999/r",  # another port is another origin
        "https://127.0.0.1:8765/r",  # and so is another scheme
    ],
)
def test_a_result_on_a_foreign_origin_is_a_contract_violation_and_never_requested(
    ref: str,
) -> None:
    op = collecting(result_reference=ref)
    decided = before_collect(op, SANDBOX, NOW)
    assert not isinstance(decided.action, Send)
    assert isinstance(decided.action, Escalate)
    assert (decided.action.reason, decided.action.state) == (R.contract_violation, S.escalated)
    assert decided.action.detail.startswith("result URL on an origin the contract does not allow")
    assert walked(op.state, planned(op, decided)) == [S.escalated]


@pytest.mark.parametrize("ref", ["//evil.example/r", "ftp://evil.example/r", "file:///etc/passwd"])
def test_a_reference_that_is_not_an_absolute_http_url_stays_on_the_providers_base(
    ref: str,
) -> None:
    action = before_collect(collecting(result_reference=ref), SANDBOX, NOW).action
    assert isinstance(action, Send)
    assert action.request.url.startswith(BASE + "/")


@pytest.mark.parametrize(
    ("overrides", "now", "reason", "detail"),
    [
        ({}, COLLECT_DEADLINE, R.deadline_exceeded, "result fetch deadline passed"),
        (
            {"result_fetch_attempts": 5},  # the contract's default max_result_fetches
            NOW,
            R.provider_failure,
            "result fetched 5 times without a usable answer",
        ),
    ],
)
def test_a_result_download_past_its_deadline_or_fetch_budget_is_never_sent(
    overrides: dict[str, Any], now: datetime, reason: R, detail: str
) -> None:
    op = collecting(**overrides)
    decided = before_collect(op, SANDBOX, now)
    assert decided.action == Escalate(reason=reason, detail=detail, state=S.escalated)
    assert walked(op.state, planned(op, decided, now=now)) == [S.escalated]


def test_a_result_download_whose_deadline_passed_after_the_claim_is_not_sent() -> None:
    op, send = sent_collect()
    assert op.result_fetch_attempts == 2
    assert unsent(op, send, COLLECT_DEADLINE - timedelta(microseconds=1)) is None
    late = unsent(op, send, COLLECT_DEADLINE)
    assert late == Decided(
        action=Escalate(
            reason=R.deadline_exceeded,
            detail="result fetch deadline passed; reserved download not sent",
            state=S.escalated,
        )
    )


def test_a_result_without_a_reference_is_unavailable() -> None:
    decided = before_collect(collecting(result_reference=None), SANDBOX, NOW)
    assert decided.action == Finish(
        state=S.result_unavailable,
        reason="no result reference",
        event=EventKind.result_rejected,
        summary={"valid": False, "problem": "no result reference"},
    )


def sent_collect(**overrides: Any) -> tuple[Operation, Send]:
    op = collecting(**overrides)
    decided = before_collect(op, SANDBOX, NOW)
    assert isinstance(decided.action, Send)
    return claimed(op, planned(op, decided)), decided.action


@pytest.mark.parametrize("code", [200, 202, 203])
def test_a_valid_result_succeeds_with_its_verdict_and_bytes(code: int) -> None:
    op, send = sent_collect()
    answer = reply(code, content=RESULT, content_type="application/json; charset=utf-8")
    decided = after_collect(op, SANDBOX, send.request, answer, NOW, 1.0)
    assert decided.action == Succeed(
        verdict=ResultVerdict(
            valid=True,
            problem=None,
            sha256=SHA,
            size_bytes=len(RESULT),
            record_count=2,
            succeeded_items=2,
            failed_items=[],
            # The sandbox's status body promises a sha256 of the bytes: checked and recorded.
            digests=(
                DigestCheck(
                    source="status body /result/sha256",
                    algorithm="sha256",
                    ours=SHA,
                    theirs=SHA,
                    matches=True,
                ),
            ),
        ),
        content=RESULT,
        content_type="application/json; charset=utf-8",
    )
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == [S.succeeded]
    assert p.result is not None
    assert p.result.content == RESULT


def _bytes(doc: object) -> bytes:
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    ("content", "content_type", "sha", "problem"),
    [
        (RESULT, "application/json", "0" * 64, "checksum mismatch"),
        (RESULT, "text/csv", SHA, "content type 'text/csv', expected 'application/json'"),
        (RESULT, None, SHA, "no content type; expected 'application/json'"),
        (RESULT, "application/json", None, "the provider gave no checksum"),
        (b"not json", "application/json", None, "the provider gave no checksum"),
        (
            b"not json",
            "application/json",
            hashlib.sha256(b"not json").hexdigest(),
            "result is not valid JSON",
        ),
        (
            _bytes({"items": [1], "failed_items": [], "record_count": 5}),
            "application/json",
            hashlib.sha256(
                _bytes({"items": [1], "failed_items": [], "record_count": 5})
            ).hexdigest(),
            "record count 5 but 1 items and 0 failed",
        ),
        (
            _bytes({"items": [1], "failed_items": [2, 3]}),
            "application/json",
            hashlib.sha256(_bytes({"items": [1], "failed_items": [2, 3]})).hexdigest(),
            "2 of 3 items failed",
        ),
        (
            _bytes({"rows": []}),
            "application/json",
            hashlib.sha256(_bytes({"rows": []})).hexdigest(),
            "result has no item list at /items",
        ),
    ],
)
def test_an_invalid_result_ends_in_result_validation_failed_with_its_summary(
    content: bytes, content_type: str | None, sha: str | None, problem: str
) -> None:
    op, send = sent_collect(validation_summary={"expected": {"expected_sha256": sha}})
    answer = reply(200, content=content, content_type=content_type)
    decided = after_collect(op, SANDBOX, send.request, answer, NOW, 1.0)
    assert isinstance(decided.action, Finish)
    assert (decided.action.state, decided.action.reason, decided.action.event) == (
        S.result_validation_failed,
        problem,
        EventKind.result_rejected,
    )
    assert decided.action.summary is not None
    assert (decided.action.summary["valid"], decided.action.summary["problem"]) == (False, problem)
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == [S.result_validation_failed]
    assert p.changes["validation_summary"] == decided.action.summary
    assert p.result is None


@pytest.mark.parametrize("code", [401, 403])
def test_a_denied_result_download_escalates_authorization_denied(code: int) -> None:
    op, send = sent_collect()
    decided = after_collect(op, SANDBOX, send.request, reply(code), NOW, 1.0)
    assert decided.action == Escalate(
        reason=R.authorization_denied,
        detail=f"HTTP {code} fetching the result",
        state=S.escalated,
    )
    assert walked(op.state, planned(op, decided, answer=reply(code))) == [S.escalated]


@pytest.mark.parametrize("code", [404, 410])
def test_a_result_that_is_gone_is_unavailable(code: int) -> None:
    op, send = sent_collect()
    decided = after_collect(op, SANDBOX, send.request, reply(code), NOW, 1.0)
    problem = f"HTTP {code} fetching the result"
    assert decided.action == Finish(
        state=S.result_unavailable,
        reason=problem,
        event=EventKind.result_rejected,
        summary={"valid": False, "problem": problem},
    )


COLLECT_FAILURES = [
    reply(500),
    reply(502),
    reply(503),
    reply(400),
    reply(409),
    reply(422),
    reply(429),
    reply(302, headers={"location": "https://evil.example/r"}),
] + [reply(None, failure=f) for f in TRANSPORT_FAILURES]


@pytest.mark.parametrize("answer", COLLECT_FAILURES)
@pytest.mark.parametrize(("used", "delay"), [(0, 0.4), (1, 0.8), (2, 1.6)])
def test_a_failed_result_download_spends_the_transport_budget_and_backs_off(
    answer: RawResponse, used: int, delay: float
) -> None:
    op, send = sent_collect(transport_failures_used=used)
    decided = after_collect(op, SANDBOX, send.request, answer, NOW, 1.0)
    assert decided.action == backoff_wait(delay, cause="result fetch failed; retry")
    assert decided.changes == {"transport_failures_used": used + 1}
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == []
    assert p.changes["transport_failures_used"] == used + 1


@pytest.mark.parametrize("answer", COLLECT_FAILURES)
def test_a_failed_result_download_past_the_budget_escalates_provider_failure(
    answer: RawResponse,
) -> None:
    op, send = sent_collect(transport_failures_used=3)  # the factory's budget is 3
    decided = after_collect(op, SANDBOX, send.request, answer, NOW, 1.0)
    assert decided.action == Escalate(
        reason=R.provider_failure,
        detail="transport failure budget spent fetching the result",
        state=S.escalated,
    )
    assert decided.changes == {"transport_failures_used": 4}


def test_a_rate_limited_result_download_waits_for_retry_after() -> None:
    op, send = sent_collect()
    answer = reply(429, headers={"retry-after": "120"})
    action = after_collect(op, SANDBOX, send.request, answer, NOW, 1.0).action
    assert isinstance(action, Wait)
    assert action.until >= NOW + timedelta(seconds=120)
