"""Schedule routes: /v1/schedules (issue 22).

The tenant comes from the token, never from the body (invariant 12): a schedule of
another tenant is 404. Reading needs the ``read`` scope; declaring, pausing, resuming,
triggering and backfilling need ``submit`` (each of them makes or stops operations).
Every change is recorded in schedule_actions with the token's actor.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from jobwarden.api.auth import Principal, Scope, require
from jobwarden.api.context import runtime_of, settings_of
from jobwarden.api.problems import ProblemError
from jobwarden.api.responses import problem_responses
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.intake.submission import SubmissionRequest
from jobwarden.models.persistence import schedule_store
from jobwarden.models.persistence.db import snapshot, transaction
from jobwarden.models.schedules.slots import (
    NAME_PATTERN,
    ScheduleError,
    ScheduleStatus,
    next_slot,
    parse_spec,
    render_command,
    rfc3339,
    slot_key,
)
from jobwarden.tasks import schedules as ticks
from jobwarden.tasks.intake import LIMITS
from jobwarden.tasks.runtime import utcnow

router = APIRouter(tags=["schedules"])
NOT_FOUND = "no such schedule for this token's tenant"
Name = Annotated[str, Path(pattern=NAME_PATTERN.pattern, max_length=100)]


class ScheduleBody(BaseModel):
    """A schedule's declaration: the same fields as a [schedules.NAME] table in a file."""

    model_config = ConfigDict(extra="forbid")
    cron: str | None = Field(None, max_length=200, examples=["30 2 * * *"])
    interval_seconds: int | None = Field(None, ge=1)
    timezone: str = Field("UTC", max_length=64, examples=["Europe/Berlin"])
    start: datetime | None = None
    end: datetime | None = None
    jitter_seconds: int = Field(0, ge=0)
    provider: str = Field(max_length=200)
    command: dict[str, Any] = Field(description="the command template ({slot}, {slot_date} …)")
    overlap: str = Field("skip", examples=["skip", "buffer_one", "allow_all", "cancel_previous"])
    catchup_window_seconds: int = Field(900, ge=0)
    concurrency_key: str | None = Field(None, max_length=200)
    priority: int | None = Field(
        None, description="-10 to 10, default 0: the slots' priority at the rate limit"
    )


class BackfillBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    start: datetime = Field(alias="from")
    end: datetime = Field(alias="to")


class ScheduleSummary(BaseModel):
    """A schedule as listed: its timing, status, next slot and last slot with its operation."""

    tenant: str
    name: str
    status: str
    timing: str
    timezone: str
    overlap: str
    provider: str
    next_slot_at: str | None
    last_slot_at: str | None
    last_state: str | None
    last_operation_id: str | None
    last_operation_state: str | None
    missed: int
    source: str


class ScheduleSlot(BaseModel):
    slot_at: str
    state: str
    origin: str
    reason: str | None
    operation_id: str | None
    requested_by: str | None


class ScheduleDetail(ScheduleSummary):
    """One schedule with its last 50 slots."""

    slots: list[ScheduleSlot]


class ScheduleList(BaseModel):
    schedules: list[ScheduleSummary]


class ScheduleDeclared(ScheduleSummary):
    """What a declaration did (created, changed or unchanged) and the schedule now."""

    outcome: str


class TriggerAnswer(BaseModel):
    operation_id: str | None


class BackfillAnswer(BaseModel):
    claimed: int
    already_decided: int
    operations: list[str]


def _view(request: Request, tenant: str, name: str) -> dict[str, Any]:
    with snapshot(settings_of(request).database_url) as session:
        for view in schedule_store.views(session, tenant=tenant):
            if view.name == name:
                return view.as_dict()
    raise ProblemError(404, "not_found", NOT_FOUND)


@router.get(
    "/v1/schedules",
    operation_id="list_schedules",
    response_model=ScheduleList,
    responses=problem_responses({}),
)
def list_schedules(
    request: Request, principal: Annotated[Principal, Depends(require(Scope.read))]
) -> dict[str, Any]:
    """The tenant's schedules: status, next slot, last slot with its operation, missed count."""
    with snapshot(settings_of(request).database_url) as session:
        views = schedule_store.views(session, tenant=principal.tenant)
    return {"schedules": [v.as_dict() for v in views]}


@router.get(
    "/v1/schedules/{name}",
    operation_id="get_schedule",
    response_model=ScheduleDetail,
    responses=problem_responses({404: NOT_FOUND}),
)
def get_schedule(
    name: Name, request: Request, principal: Annotated[Principal, Depends(require(Scope.read))]
) -> dict[str, Any]:
    """One schedule, with its last 50 slots (state, reason, operation)."""
    view = _view(request, principal.tenant, name)
    with snapshot(settings_of(request).database_url) as session:
        row = schedule_store.find(session, principal.tenant, name)
        assert row is not None
        slots = schedule_store.slots_of(session, row.schedule_id)[-50:]
    view["slots"] = [
        {
            "slot_at": rfc3339(s.slot_at),
            "state": s.state,
            "origin": s.origin,
            "reason": s.reason,
            "operation_id": str(s.operation_id) if s.operation_id else None,
            "requested_by": s.requested_by,
        }
        for s in slots
    ]
    return view


@router.put(
    "/v1/schedules/{name}",
    operation_id="put_schedule",
    response_model=ScheduleDeclared,
    responses={
        201: {"model": ScheduleDeclared, "description": "created"},
        **problem_responses({422: "the declaration breaks a rule (the field is named)"}),
    },
)
def put_schedule(
    name: Name,
    body: ScheduleBody,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.submit))],
) -> JSONResponse:
    """Create or change a schedule (201 created, 200 changed or unchanged). A new schedule,
    or a changed timing, starts at its next slot: declaring never fires the past."""
    table = body.model_dump(exclude_none=True)
    for field in ("start", "end"):
        if isinstance(table.get(field), datetime):
            table[field] = table[field].isoformat()
    now = utcnow()
    try:
        spec = parse_spec(principal.tenant, name, table, key_limit=LIMITS.idempotency_key)
        first = next_slot(spec.timing, start=now) or now
        SubmissionRequest(
            tenant=spec.tenant,
            requested_by=principal.actor,
            provider=spec.provider,
            command=render_command(
                spec.command, name=name, slot_at=first, timezone=spec.timing.timezone
            ),
            idempotency_key=slot_key(name, first),
            concurrency_key=spec.concurrency_key,
            priority=spec.priority,
        ).check(limits=LIMITS, providers=runtime_of(request).contracts, derived_key=True)
    except RefusedInputError as exc:
        raise ProblemError(422, "invalid_request", str(exc)) from None
    with transaction(settings_of(request).database_url) as session:
        outcome = schedule_store.declare(
            session, spec, source="api", actor=principal.actor, now=now
        )
    view = _view(request, principal.tenant, name)
    return JSONResponse(
        {"outcome": outcome, **view}, status_code=201 if outcome == "created" else 200
    )


def _set_status(
    request: Request, principal: Principal, name: str, status: ScheduleStatus
) -> dict[str, Any]:
    with transaction(settings_of(request).database_url) as session:
        row = schedule_store.find(session, principal.tenant, name, lock=True)
        if row is None:
            raise ProblemError(404, "not_found", NOT_FOUND)
        schedule_store.set_status(session, row, status, actor=principal.actor, now=utcnow())
    return _view(request, principal.tenant, name)


@router.post(
    "/v1/schedules/{name}/pause",
    operation_id="pause_schedule",
    response_model=ScheduleSummary,
    responses=problem_responses({404: NOT_FOUND}),
)
def pause_schedule(
    name: Name, request: Request, principal: Annotated[Principal, Depends(require(Scope.submit))]
) -> dict[str, Any]:
    return _set_status(request, principal, name, ScheduleStatus.paused)


@router.post(
    "/v1/schedules/{name}/resume",
    operation_id="resume_schedule",
    response_model=ScheduleSummary,
    responses=problem_responses({404: NOT_FOUND}),
)
def resume_schedule(
    name: Name, request: Request, principal: Annotated[Principal, Depends(require(Scope.submit))]
) -> dict[str, Any]:
    return _set_status(request, principal, name, ScheduleStatus.active)


def _refused(exc: ScheduleError) -> ProblemError:
    if exc.field == "name":
        return ProblemError(404, "not_found", NOT_FOUND)
    if exc.field == "slot":
        return ProblemError(409, "conflict", str(exc))
    return ProblemError(422, "invalid_request", str(exc))


@router.post(
    "/v1/schedules/{name}/trigger",
    operation_id="trigger_schedule",
    response_model=TriggerAnswer,
    status_code=202,
    responses=problem_responses({404: NOT_FOUND, 409: "this second's slot is already decided"}),
)
def trigger_schedule(
    name: Name, request: Request, principal: Annotated[Principal, Depends(require(Scope.submit))]
) -> dict[str, Any]:
    """Fire one slot now (this second), whatever the overlap policy."""
    try:
        op = ticks.trigger(runtime_of(request), principal.tenant, name, actor=principal.actor)
    except ScheduleError as exc:
        raise _refused(exc) from None
    return {"operation_id": op}


@router.post(
    "/v1/schedules/{name}/backfill",
    operation_id="backfill_schedule",
    response_model=BackfillAnswer,
    status_code=202,
    responses=problem_responses({404: NOT_FOUND, 422: "a bad range (the field is named)"}),
)
def backfill_schedule(
    name: Name,
    body: BackfillBody,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.submit))],
) -> dict[str, Any]:
    """Fire every slot in [from, to] not fired yet; a second call claims nothing."""
    try:
        done = ticks.backfill(
            runtime_of(request),
            principal.tenant,
            name,
            start=body.start,
            end=body.end,
            actor=principal.actor,
        )
    except ScheduleError as exc:
        raise _refused(exc) from None
    return {
        "claimed": len(done.claimed),
        "already_decided": done.already,
        "operations": done.operations,
    }
