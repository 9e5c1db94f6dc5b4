"""Action routes: cancel, approvals, decisions (issue 10, item 5).

Each records the authenticated principal as the actor through the one
intervention function every door uses (tasks/humans/interventions.py). The route
checks what it can answer precisely first — the tenant (404), the state
(409), who may approve (403), the fingerprint (409), the offered options
(422) — and the intervention checks again inside its own fenced write, so a
refusal that still reaches us there means the operation moved in between:
a state conflict (409), never a 500.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from jobwarden.api.auth import Principal, Scope, require
from jobwarden.api.context import runtime_of
from jobwarden.api.intake import SubmitWarning
from jobwarden.api.problems import ProblemError
from jobwarden.api.queries import owned_operation
from jobwarden.api.responses import problem_responses
from jobwarden.api.views import NOT_FOUND, OperationId, OperationLinks, operation_links, storable
from jobwarden.models.errors import (
    AnotherApproverNeededError,
    ApprovalRefusedError,
    LostRaceError,
    RefusedInputError,
    RequestDigestMismatchError,
)
from jobwarden.models.humans.approvals import SELF_APPROVAL, WINDOW_CLOSED, WINDOW_ENDED
from jobwarden.models.humans.identity import same_principal
from jobwarden.models.operation import Operation
from jobwarden.models.states import TERMINAL, OperationState
from jobwarden.tasks.humans import interventions

router = APIRouter(tags=["actions"])
BUSINESS_DECISIONS = ("resubmit", "accept_result")
NOT_JSON = "the body is not JSON"

# An approval lives at least a minute (time to act on it) and at most a week: an approval
# given long before the create would authorize a payload nobody looked at recently.
MIN_APPROVAL_SECONDS = 60
MAX_APPROVAL_SECONDS = 7 * 24 * 3600

# Constraints first, then the storable check: stripping must run before min_length.
Text = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=2000),
    AfterValidator(storable),
]


class CancelBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Text
    # While a pause holds the operation the cancel waits for the resume; true: it leaves now
    # (cancelling is how a person stops damage), and the operation's answer names who let it.
    send_during_pause: bool = False


class ApprovalBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    # The fingerprint the approver was shown (GET /v1/operations/{id}): a changed payload
    # has another one, and needs an approval of its own.
    fingerprint: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
    # The create's digest the approver was shown (create_request.request_digest): the
    # approval binds the request as it will leave; omitted, the one that would leave now.
    request_digest: Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")] | None = None
    valid_for_seconds: Annotated[float, Field(ge=MIN_APPROVAL_SECONDS, le=MAX_APPROVAL_SECONDS)] = (
        3600
    )


class DecisionBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    option: Annotated[str, StringConstraints(min_length=1, max_length=60), AfterValidator(storable)]
    note: Annotated[str, StringConstraints(max_length=2000), AfterValidator(storable)] = ""


class ActionAnswer(BaseModel):
    operation_id: uuid.UUID
    state: OperationState
    links: OperationLinks
    # A resubmission's new operation (a new token, linked both ways), and its first state.
    resubmitted_as: uuid.UUID | None = None
    resubmitted_state: OperationState | None = None
    # A resubmission's advice about now (as POST /v1/operations gives it): no_worker.
    warnings: list[SubmitWarning] = Field(default_factory=list)


class ApprovalAnswer(ActionAnswer):
    approvals_required: int = Field(
        description="how many distinct people approve (2: the two-person rule)"
    )
    approvals_given: int = Field(description="how many have, for this fingerprint, unexpired")
    detail: str | None = Field(None, description="what is still needed, while awaiting approval")


def _answer(row: Operation, state: str) -> ActionAnswer:
    return ActionAnswer(
        operation_id=row.operation_id,
        state=OperationState(state),
        links=operation_links(row.operation_id),
    )


def _moved(exc: Exception) -> ProblemError:
    """A refusal from inside the intervention, after the route's own checks passed."""
    if isinstance(exc, LostRaceError):
        return ProblemError(409, "conflict", "the operation is busy; ask again")
    return ProblemError(409, "conflict", str(exc))


@router.post(
    "/v1/operations/{operation_id}/cancel",
    operation_id="cancel_operation",
    response_model=ActionAnswer,
    status_code=202,
    responses=problem_responses(
        {400: NOT_JSON, 404: NOT_FOUND, 409: "the operation has ended, or is busy"}
    ),
)
def cancel_operation(
    operation_id: OperationId,
    body: CancelBody,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.cancel))],
) -> ActionAnswer:
    """Record the intent to cancel; a worker sends it and waits for the provider's confirmation.

    202 (RFC 9110 section 15.3.3): cancel_requested is our fact, cancelled the provider's.
    """
    row = owned_operation(request, principal, operation_id)
    if row.state in TERMINAL:
        raise ProblemError(409, "conflict", f"the operation has ended ({row.state.value})")
    try:
        state = interventions.request_cancel(
            str(row.operation_id),
            principal.author,
            body.reason,
            runtime=runtime_of(request),
            send_during_pause=body.send_during_pause,
        )
    except (RefusedInputError, LostRaceError) as exc:
        raise _moved(exc) from None
    return _answer(row, state)


@router.post(
    "/v1/operations/{operation_id}/approvals",
    operation_id="approve_operation",
    response_model=ApprovalAnswer,
    responses=problem_responses(
        {
            400: NOT_JSON,
            403: "the token lacks the approve scope, or submitted the operation itself",
            404: NOT_FOUND,
            409: "not awaiting approval, another fingerprint than the operation's, another "
            "request digest than the create that would leave (request_digest_mismatch), "
            "too late (approval_window_closed, business_deadline_passed), or a second "
            "approval by the same token (same_approver)",
        }
    ),
)
def approve_operation(
    operation_id: OperationId,
    body: ApprovalBody,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.approve))],
) -> ApprovalAnswer:
    """Approve the operation's fingerprint for a while; then its create may be sent.

    Under the two-person rule (the contract's ``approvals_required = 2``) the first
    approval answers with the state still awaiting_approval and says another approver
    must approve; the second, by another token, lets the create be sent.
    """
    row = owned_operation(request, principal, operation_id)
    rt = runtime_of(request)
    found = rt.found_context(row)  # the contract it was created under (invariant 16)
    required = found.contract.approvals_required if found is not None else 1
    if row.state is OperationState.approval_expired:
        raise ProblemError(409, WINDOW_CLOSED, WINDOW_ENDED)
    if row.state is not OperationState.awaiting_approval:
        raise ProblemError(
            409, "conflict", f"the operation is not awaiting approval ({row.state.value})"
        )
    # Four eyes: whoever submitted an operation does not also authorize it, unless the tenant
    # chose to allow it (jobwarden tenants allow-self-approval) and one approver is enough.
    allowed = principal.allows_self_approval and required == 1
    if same_principal(principal.actor, row.requested_by) and not allowed:
        raise ProblemError(
            403,
            SELF_APPROVAL,
            "this token's name submitted the operation; another approver must approve it",
        )
    if body.fingerprint != row.request_fingerprint:
        raise ProblemError(
            409,
            "fingerprint_mismatch",
            "the approval names a different fingerprint than the operation's; "
            "a changed payload needs a new approval",
        )
    try:
        state = interventions.approve(
            str(row.operation_id),
            body.fingerprint,
            principal.author,
            valid_for_seconds=body.valid_for_seconds,
            runtime=rt,
            request_digest=body.request_digest,
        )
    except RequestDigestMismatchError as exc:
        raise ProblemError(
            409,
            exc.reason,
            exc.detail,
            errors=[{"path": "request_digest", "message": "not the create that would leave now"}],
        ) from None
    except ApprovalRefusedError as exc:
        # Too late to be kept: refused with its reason, never accepted and then failed.
        raise ProblemError(409, exc.reason, exc.detail) from None
    except AnotherApproverNeededError as exc:
        raise ProblemError(
            403 if exc.reason == SELF_APPROVAL else 409, exc.reason, exc.detail
        ) from None
    except (RefusedInputError, LostRaceError) as exc:
        raise _moved(exc) from None
    waiting = state == OperationState.awaiting_approval.value
    return ApprovalAnswer(
        **_answer(row, state).model_dump(),
        approvals_required=required,
        # Still waiting after an approval: this one is the first of two.
        approvals_given=required - 1 if waiting else required,
        detail=f"1 of {required} approvals: {principal.actor}; another approver must approve"
        if waiting
        else None,
    )


@router.post(
    "/v1/operations/{operation_id}/decisions",
    operation_id="decide_operation",
    response_model=ActionAnswer,
    responses=problem_responses(
        {
            400: NOT_JSON,
            404: NOT_FOUND,
            409: "nothing to decide for this operation now",
            422: "the option is not offered now (offered lists those that are), or a bad body",
        }
    ),
)
def decide_operation(
    operation_id: OperationId,
    body: DecisionBody,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.decide))],
) -> ActionAnswer:
    """Pick one of the options offered now for a stopped operation (see GET .../{id})."""
    row = owned_operation(request, principal, operation_id)
    rt = runtime_of(request)
    try:
        offered = [
            o.kind.value for o in interventions.escalation_options(str(row.operation_id), rt)
        ]
    except RefusedInputError as exc:
        raise _moved(exc) from None
    if not offered:
        raise ProblemError(
            409, "conflict", f"nothing to decide: the operation is {row.state.value}"
        )
    if body.option not in offered:
        raise ProblemError(
            422,
            "option_not_offered",
            f"option {body.option!r} is not offered now; offered: {', '.join(offered)}",
            offered=offered,
            errors=[{"path": "option", "message": f"one of: {', '.join(offered)}"}],
        )
    if body.option in BUSINESS_DECISIONS and not body.note.strip():
        # Read later by someone who was not there: a business decision says why.
        raise ProblemError(
            422,
            "invalid_request",
            f"note: say why ({body.option} is a business decision)",
            errors=[{"path": "note", "message": "required for " + body.option}],
        )
    try:
        decided = interventions.decide_escalation(
            str(row.operation_id), body.option, principal.author, body.note, runtime=rt, door="http"
        )
    except (RefusedInputError, LostRaceError) as exc:
        raise _moved(exc) from None
    answer = _answer(row, decided.state)
    if decided.resubmitted_as is not None:
        answer.resubmitted_as = uuid.UUID(decided.resubmitted_as)
        if decided.resubmitted_state is not None:
            answer.resubmitted_state = OperationState(decided.resubmitted_state)
        answer.warnings = [SubmitWarning.model_validate(w.as_dict()) for w in decided.warnings]
    return answer
