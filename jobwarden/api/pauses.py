"""Pause routes (issue 39): pause a provider's share or one operation, resume, list.

Each records the authenticated principal as the author through the one function every
door calls (tasks/humans/pauses.py). The tenant comes from the token (invariant 12): a
token with the ``pause`` scope pauses its own operations and its own tenant's share of a
provider; a pause over every tenant needs the ``operate`` scope too. A resume is a
recorded decision on the pause (``POST .../resume``), not a DELETE: the pause row stays
as the record of the incident.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Query, Request
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from jobwarden.api.auth import Principal, Scope, require
from jobwarden.api.context import runtime_of
from jobwarden.api.problems import ProblemError
from jobwarden.api.queries import owned_operation
from jobwarden.api.responses import problem_responses
from jobwarden.api.views import NOT_FOUND, OperationId, StorableStr, storable
from jobwarden.models.errors import LostRaceError, RefusedInputError
from jobwarden.models.humans.pauses import MAX_REASON, Pause, PauseScope
from jobwarden.tasks.humans import pauses

router = APIRouter(tags=["pauses"])
NO_PAUSE = "no such pause for the token's tenant"

Reason = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_REASON),
    AfterValidator(storable),
]
PauseId = Annotated[uuid.UUID, Path(description="the pause's id (pause_id in its answer)")]
ProviderName = Annotated[
    str, Path(min_length=1, max_length=200, description="the provider's contract name")
]


EXTEND = "also the bounded extend option, once per operation: +15 min, +4 checks"


class OperationPauseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: Reason
    extend: bool = Field(False, description=EXTEND)


class PauseBody(OperationPauseBody):
    all_tenants: bool = Field(
        False, description="every tenant's operations at the provider (the operate scope)"
    )


class ResumeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: Annotated[str, StringConstraints(max_length=2000), AfterValidator(storable)] = ""
    extend: bool = Field(False, description=EXTEND)


class PauseView(BaseModel):
    pause_id: uuid.UUID
    scope: PauseScope
    provider: str
    tenant: str | None = Field(description="None: every tenant's operations at the provider")
    operation_id: uuid.UUID | None
    reason: str
    evidence: dict[str, Any] | None
    paused_by: str
    since: datetime
    resumed_by: str | None
    resumed_at: datetime | None


class PauseAnswer(PauseView):
    started: bool = Field(description="False: that scope was already paused; this pause holds it")
    parked: int = Field(description="operations this call parked")


class ResumeAnswer(PauseView):
    woken: int = Field(description="operations woken, spread by the provider's rate limit")


class PauseList(BaseModel):
    items: list[PauseView]


def _view(p: Pause) -> dict[str, Any]:
    return {
        "pause_id": p.pause_id,
        "scope": p.scope,
        "provider": p.provider,
        "tenant": p.tenant,
        "operation_id": p.operation_id,
        "reason": p.reason,
        "evidence": dict(p.evidence) if p.evidence is not None else None,
        "paused_by": p.author,
        "since": p.started_at,
        "resumed_by": p.resumed_by,
        "resumed_at": p.resumed_at,
    }


def _operator(principal: Principal) -> None:
    if Scope.operate not in principal.scopes:
        raise ProblemError(
            403,
            "insufficient_scope",
            "a pause over every tenant needs the 'operate' scope; the token has "
            f"{sorted(s.value for s in principal.scopes)}",
            required_scope=Scope.operate.value,
        )


@router.post(
    "/v1/providers/{provider}/pause",
    operation_id="pause_provider",
    response_model=PauseAnswer,
    status_code=201,
    responses=problem_responses(
        {
            403: "the token lacks the pause scope (or operate, for all_tenants)",
            404: "no such provider",
        }
    ),
)
def pause_provider(
    provider: ProviderName,
    body: PauseBody,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.pause))],
) -> PauseAnswer:
    """Pause the token's tenant's operations at a provider (every tenant's with
    ``all_tenants``): nothing is sent and no budget spent until it is resumed; deadlines keep
    running. Pausing what is already paused answers the pause holding it (``started`` false).
    """
    if body.all_tenants:
        _operator(principal)
    rt = runtime_of(request)
    if provider not in rt.contracts:
        raise ProblemError(404, "not_found", f"no provider {provider!r}")
    try:
        done = pauses.pause_provider(
            provider,
            body.reason,
            principal.author,
            tenant=None if body.all_tenants else principal.tenant,
            extend=body.extend,
            runtime=rt,
        )
    except (RefusedInputError, LostRaceError) as exc:
        raise ProblemError(409, "conflict", str(exc)) from None
    return PauseAnswer(**_view(done.pause), started=done.started, parked=done.parked)


@router.post(
    "/v1/operations/{operation_id}/pause",
    operation_id="pause_operation",
    response_model=PauseAnswer,
    status_code=201,
    responses=problem_responses({404: NOT_FOUND}),
)
def pause_operation(
    operation_id: OperationId,
    body: OperationPauseBody,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.pause))],
) -> PauseAnswer:
    """Pause one operation of the token's tenant: it sends nothing until resumed."""
    row = owned_operation(request, principal, operation_id)
    try:
        done = pauses.pause_operation(
            str(row.operation_id),
            body.reason,
            principal.author,
            tenant=principal.tenant,
            extend=body.extend,
            runtime=runtime_of(request),
        )
    except (RefusedInputError, LostRaceError) as exc:
        raise ProblemError(409, "conflict", str(exc)) from None
    return PauseAnswer(**_view(done.pause), started=done.started, parked=done.parked)


@router.post(
    "/v1/pauses/{pause_id}/resume",
    operation_id="resume_pause",
    response_model=ResumeAnswer,
    responses=problem_responses(
        {403: "a pause over every tenant needs the operate scope", 404: NO_PAUSE}
    ),
)
def resume_pause(
    pause_id: PauseId,
    body: ResumeBody,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.pause))],
) -> ResumeAnswer:
    """Resume a pause: what it parked wakes spread by the provider's rate limit (never a
    burst). Resuming a resumed pause wakes whatever it left parked, and changes nothing else.
    """
    rt = runtime_of(request)
    found = pauses.find_pause(pause_id, runtime=rt)
    if found is None or found.tenant not in (None, principal.tenant):
        raise ProblemError(404, "not_found", NO_PAUSE)
    if found.tenant is None:
        _operator(principal)
    try:
        done = pauses.resume(
            str(pause_id), principal.author, body.note, extend=body.extend, runtime=rt
        )
    except (RefusedInputError, LostRaceError) as exc:
        raise ProblemError(409, "conflict", str(exc)) from None
    return ResumeAnswer(**_view(done.pause), woken=done.woken)


@router.get(
    "/v1/pauses",
    operation_id="list_pauses",
    response_model=PauseList,
    responses=problem_responses({}),
)
def list_pauses(
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.read))],
    every: Annotated[bool, Query(alias="all", description="resumed pauses too")] = False,
    # Storable: a NUL in the filter reached Postgres as a 500 (schemathesis found it).
    provider: Annotated[StorableStr | None, Query(max_length=200)] = None,
) -> PauseList:
    """The pauses holding the token's tenant's operations (its own, and those over every
    tenant), newest first."""
    found = pauses.pauses(
        active_only=not every,
        provider=provider,
        tenant=principal.tenant,
        runtime=runtime_of(request),
    )
    return PauseList(items=[PauseView(**_view(p)) for p in found])
