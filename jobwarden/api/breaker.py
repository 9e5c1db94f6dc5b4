"""Provider breaker routes (issue 39): a provider's breaker state, and a person's hold or
close.

A breaker pauses a provider over every tenant, so its state is shown to any token that can
read (its operations are among those held) and holding or closing it needs the ``pause``
and ``operate`` scopes, as resuming a pause over every tenant does. The author recorded is
the authenticated principal (invariant 15), through the one function every door calls
(tasks/provider/breaker.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints

from jobwarden.api.auth import Principal, Scope, require
from jobwarden.api.context import runtime_of
from jobwarden.api.problems import ProblemError
from jobwarden.api.responses import problem_responses
from jobwarden.api.views import storable
from jobwarden.models.errors import LostRaceError, RefusedInputError
from jobwarden.tasks.humans import breakers
from jobwarden.tasks.humans.breakers import BreakerView
from jobwarden.tasks.runtime import Runtime

router = APIRouter(tags=["breaker"])
NO_PROVIDER = "no such provider"
NOT_OPEN = "the provider's breaker is not open"
ProviderName = Annotated[
    str, Path(min_length=1, max_length=200, description="the provider's contract name")
]


class IncidentView(BaseModel):
    incident_id: uuid.UUID
    pause_id: uuid.UUID
    state: str = Field(description="open, probing, held or closed")
    reason: str = Field(description="the escalation reason it stands for")
    evidence: dict[str, Any] = Field(
        description="counts, first and last failing operations, sample answers"
    )
    opened_at: datetime
    probe_due_at: datetime
    probe_operation_id: uuid.UUID | None
    probes: int
    held_by: str | None
    closed_at: datetime | None
    closed_by: str | None


class BreakerAnswer(BaseModel):
    provider: str
    enabled: bool = Field(description="the contract has a [breaker] table")
    state: str = Field(description="closed, open, probing or held")
    incident: IncidentView | None = Field(description="the active incident, else the last one")


class CloseBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    note: Annotated[str, StringConstraints(max_length=2000), AfterValidator(storable)] = ""


def _answer(view: BreakerView) -> BreakerAnswer:
    found = view.incident
    incident = None
    if found is not None:
        incident = IncidentView(
            incident_id=found.incident_id,
            pause_id=found.pause_id,
            state=found.state.value,
            reason=found.reason,
            evidence=dict(found.evidence),
            opened_at=found.opened_at,
            probe_due_at=found.probe_due_at,
            probe_operation_id=found.probe_operation_id,
            probes=found.probes,
            held_by=found.held_by,
            closed_at=found.closed_at,
            closed_by=found.closed_by,
        )
    return BreakerAnswer(
        provider=view.provider, enabled=view.enabled, state=view.state, incident=incident
    )


def _known(request: Request, provider: str) -> None:
    if provider not in runtime_of(request).contracts:
        raise ProblemError(404, "not_found", f"no provider {provider!r}")


def _operator(principal: Principal) -> None:
    if Scope.operate not in principal.scopes:
        raise ProblemError(
            403,
            "insufficient_scope",
            "a breaker holds every tenant's operations: holding or closing it needs the "
            f"'operate' scope; the token has {sorted(s.value for s in principal.scopes)}",
            required_scope=Scope.operate.value,
        )


@router.get(
    "/v1/providers/{provider}/breaker",
    operation_id="show_breaker",
    response_model=BreakerAnswer,
    responses=problem_responses({404: NO_PROVIDER}),
)
def show_breaker(
    provider: ProviderName,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.read))],
) -> BreakerAnswer:
    """The provider's breaker: closed, or open since when, why, and the evidence it saw."""
    _known(request, provider)
    return _answer(breakers.show(provider, runtime=runtime_of(request)))


@router.post(
    "/v1/providers/{provider}/breaker/hold",
    operation_id="hold_breaker",
    response_model=BreakerAnswer,
    responses=problem_responses(
        {403: "the token lacks the pause and operate scopes", 404: NO_PROVIDER, 409: NOT_OPEN}
    ),
)
def hold_breaker(
    provider: ProviderName,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.pause))],
) -> BreakerAnswer:
    """Hold the open breaker: no half-open probe until someone closes it."""
    return _decided(
        request,
        provider,
        principal,
        lambda rt: breakers.hold(provider, principal.author, runtime=rt),
    )


@router.post(
    "/v1/providers/{provider}/breaker/close",
    operation_id="close_breaker",
    response_model=BreakerAnswer,
    responses=problem_responses(
        {403: "the token lacks the pause and operate scopes", 404: NO_PROVIDER, 409: NOT_OPEN}
    ),
)
def close_breaker(
    provider: ProviderName,
    body: CloseBody,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.pause))],
) -> BreakerAnswer:
    """Close the breaker: its pause is resumed and the operations it parked wake spread by
    the provider's rate limit (never a burst)."""
    return _decided(
        request,
        provider,
        principal,
        lambda rt: breakers.close(provider, principal.author, body.note, runtime=rt),
    )


def _decided(
    request: Request, provider: str, principal: Principal, decide: Callable[[Runtime], object]
) -> BreakerAnswer:
    """An operator's decision on the breaker (hold or close), then the breaker as it is now:
    409 when there is nothing to decide on (not open, or another decision won the race)."""
    _operator(principal)
    _known(request, provider)
    rt = runtime_of(request)
    try:
        decide(rt)
    except (RefusedInputError, LostRaceError) as exc:
        raise ProblemError(409, "conflict", str(exc)) from None
    return _answer(breakers.show(provider, runtime=rt))
