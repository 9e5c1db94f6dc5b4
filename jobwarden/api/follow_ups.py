"""``POST /v1/operations/{id}/follow-ups``: start a capture, a refund, a rollback (issue 40).

The one start every door makes (tasks/follow_ups.py), as the token's principal and in
its tenant: another tenant's operation is the same 404 as one that does not exist. The
answer is intake's, for the new operation (201 created, or the first answer again for
the same instruction), with the link; a refusal is a problem naming what to fix:
the parent's state and the ones required (409 ``follow_up_not_allowed``), what remains
under the amount rule (409 ``amount_limit_exceeded``), a kind the parent's contract
does not declare or a bad command (422).
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from jobwarden.api.auth import Principal, Scope, require
from jobwarden.api.context import runtime_of
from jobwarden.api.intake import (
    HTTP_STATUSES,
    SubmissionAnswer,
    caller_of,
    submission_answer,
    trace_headers,
)
from jobwarden.api.problems import ProblemError
from jobwarden.api.queries import owned_operation
from jobwarden.api.responses import problem_responses
from jobwarden.api.views import NOT_FOUND, OperationId, storable
from jobwarden.models.errors import InvalidCommandError, LostRaceError, RefusedInputError
from jobwarden.models.intake.follow_ups import (
    AmountLimitError,
    FollowUpNotAllowedError,
    ParentStateError,
)
from jobwarden.tasks.follow_ups import FollowUpResult, start_follow_up
from jobwarden.tasks.intake import SubmitOutcome

router = APIRouter(tags=["follow-ups"])


class FollowUpBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Annotated[str, StringConstraints(pattern=r"^[a-z][a-z0-9_]{0,39}$")] = Field(
        description="the follow-up the parent's contract declares ([follow_ups.<kind>])"
    )
    command: dict[str, Any] = Field(description="the follow-up contract's command")
    instruction_id: (
        Annotated[str, StringConstraints(min_length=1, max_length=100), AfterValidator(storable)]
        | None
    ) = Field(
        None,
        description="required for a kind that may be many (each refund its own), refused for "
        "one that is at most one (a capture)",
    )


class FollowUpAnswer(SubmissionAnswer):
    follows: uuid.UUID = Field(description="the parent operation")
    follow_up_kind: str


def _refused(exc: RefusedInputError) -> ProblemError:
    if isinstance(exc, AmountLimitError):
        return ProblemError(
            409,
            "amount_limit_exceeded",
            str(exc),
            remaining=exc.remaining,
            limit=exc.limit,
            requested=exc.requested,
            already_requested=exc.already,
            errors=[{"path": f"command/{exc.field}", "message": f"at most {exc.remaining}"}],
        )
    if isinstance(exc, ParentStateError):
        return ProblemError(
            409,
            "follow_up_not_allowed",
            str(exc),
            parent_state=exc.state,
            required_states=exc.required.split(" or "),
        )
    if isinstance(exc, FollowUpNotAllowedError):
        return ProblemError(422, "follow_up_not_allowed", str(exc))
    extensions: dict[str, Any] = {}
    if isinstance(exc, InvalidCommandError):
        extensions["errors"] = [{"path": exc.pointer, "message": str(exc)}]
    return ProblemError(422, "invalid_submission", str(exc), **extensions)


def _respond(answer: FollowUpResult) -> JSONResponse:
    result = answer.submitted
    if result.outcome is SubmitOutcome.conflict:
        raise ProblemError(
            422,
            "idempotency_key_reused",
            "this follow-up instruction was started with another command; the stored "
            "operation is unchanged",
            operation_id=result.operation_id,
            fingerprint=result.fingerprint,
        )
    if result.outcome is SubmitOutcome.in_progress or result.operation_id is None:
        raise ProblemError(409, "conflict", "this follow-up is still being recorded; ask again")
    state = result.created_state if result.outcome is SubmitOutcome.replayed else result.state
    body = submission_answer(result, outcome=SubmitOutcome.created.value, state=str(state))
    body |= {"follows": answer.follows, "follow_up_kind": answer.follow_up_kind}
    headers = trace_headers(result.trace_id) | {"Location": body["links"]["self"]}
    return JSONResponse(body, status_code=201, headers=headers)


@router.post(
    "/v1/operations/{operation_id}/follow-ups",
    operation_id="start_follow_up",
    status_code=201,
    response_model=FollowUpAnswer,
    summary="Start a follow-up operation (a capture, a refund, a rollback)",
    responses=problem_responses(
        {
            400: "the body is not JSON",
            404: NOT_FOUND,
            409: "the parent's state does not allow it, the amount exceeds what remains "
            "(remaining names it), or it is still being recorded",
            422: "a kind the parent's contract does not declare, a bad instruction id or "
            "command, or the same instruction with another command",
        }
    ),
)
def start_operation_follow_up(
    operation_id: OperationId,
    body: FollowUpBody,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.submit))],
) -> JSONResponse:
    """A new operation following this one, with its own id, token, fingerprint and
    approval; the same instruction again answers the same operation."""
    row = owned_operation(request, principal, operation_id)
    try:
        answer = start_follow_up(
            row.operation_id,
            body.kind,
            body.command,
            # As POST /v1/operations names its submitter: the token's name.
            principal.name,
            instruction_id=body.instruction_id,
            tenant=principal.tenant,
            runtime=runtime_of(request),
            door="http",
            caller=caller_of(principal, http_statuses=HTTP_STATUSES),
        )
    except RefusedInputError as exc:
        raise _refused(exc) from None
    except LostRaceError:
        raise ProblemError(409, "conflict", "the operation is busy; ask again") from None
    return _respond(answer)
