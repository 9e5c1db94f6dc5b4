"""The reconcile step's decisions: asking what became of an unknown create, under the same
token or by a lookup, and what each answer leads to.

Pure, table by table, the way step_helpers says.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from jobwarden.models.actions import Accept, Escalate, EscalationReason, RequestPurpose, Send
from jobwarden.models.contracts.contract import ReconciliationPath, ReconciliationSpec
from jobwarden.models.create_decisions import after_reconcile, before_reconcile
from jobwarden.models.history.chain import EventKind
from jobwarden.models.provider.requests import StepContext, create_request
from jobwarden.models.provider.signals import RawResponse, TransportFailure
from jobwarden.models.states import OperationState
from tests.unit.factories import (
    BASE,
    NOW,
    TOKEN,
    context,
    contract,
    operation,
    planned,
    reply,
    walked,
)
from tests.unit.step_helpers import (
    CONTEXTS,
    CREATE_DEADLINE,
    LOOKUP,
    SANDBOX,
    first_poll_wait,
    sent_reconcile,
    token_of,
)

S = OperationState
R = EscalationReason
NO_RECONCILIATION = context(reconciliation=ReconciliationSpec(path=ReconciliationPath.none))


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
