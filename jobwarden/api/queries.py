"""Read routes: an operation, a tenant's operations, its story, escalations (issue 10, item 4).

Every route reads only the principal's tenant: another tenant's operation, a
malformed id and an unknown id all answer the same 404 problem (RFC 9110
section 15.5.5 lets a server not disclose that a resource exists), so the
answer never reveals that someone else's operation is there.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from jobwarden.api.auth import Principal, Scope, require
from jobwarden.api.context import runtime_of, settings_of
from jobwarden.api.problems import ProblemError
from jobwarden.api.responses import problem_responses
from jobwarden.api.views import (
    NOT_FOUND,
    NOT_FOUND_DETAIL,
    CancelRequest,
    ChainProblemView,
    ChainView,
    Counter,
    CreateRequest,
    DateTimeParam,
    Deadlines,
    Escalation,
    EscalationCounts,
    EscalationList,
    EventView,
    Follows,
    FollowUp,
    FollowUpAmounts,
    HoldView,
    IntakeAttempt,
    OfferedOption,
    OperationId,
    OperationList,
    OperationStory,
    OperationSummary,
    OperationView,
    PageLinks,
    ReferenceView,
    ResultView,
    StorableStr,
    WaitingOperation,
    operation_links,
    result_path,
)
from jobwarden.models.actions import EscalationReason
from jobwarden.models.history.verification import ChainProblem
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import api_store, query_store, result_rows, store
from jobwarden.models.persistence.db import snapshot, transaction
from jobwarden.models.persistence.result_rows import StoredResultRow
from jobwarden.models.results.access import validated
from jobwarden.models.states import OFFERS_OPTIONS, OperationState
from jobwarden.tasks import follow_ups
from jobwarden.tasks.history_archive import archived_events
from jobwarden.tasks.humans.interventions import escalation_options
from jobwarden.tasks.provider.edge import shown_create_request
from jobwarden.tasks.runtime import Runtime

router = APIRouter(tags=["operations"])

# The page sizes and the cursor are the core's (the CLI pages without FastAPI); the MCP tools
# and the console take them from here, with the cursor's 422 below.
MAX_LIMIT = query_store.MAX_LIMIT
DEFAULT_LIMIT = query_store.DEFAULT_LIMIT
encode_cursor = query_store.encode_cursor


def parse_operation_id(raw: str) -> uuid.UUID:
    """The id in the path; a malformed one is simply not found (404, like another tenant's)."""
    try:
        return uuid.UUID(raw)
    except ValueError:
        raise ProblemError(404, "not_found", NOT_FOUND_DETAIL) from None


def owned_operation(request: Request, principal: Principal, raw_id: str) -> Operation:
    """The principal's tenant's operation named in the path, or the one 404 problem."""
    operation_id = parse_operation_id(raw_id)
    with snapshot(settings_of(request).database_url) as session:
        row = query_store.operation_for_tenant(session, principal.tenant, operation_id)
    if row is None:
        raise ProblemError(404, "not_found", NOT_FOUND_DETAIL)
    return row


def decode_cursor(cursor: str) -> query_store.Position:
    """The position a cursor names; 422 naming the ``cursor`` parameter when it is not one."""
    try:
        return query_store.decode_cursor(cursor)
    except query_store.InvalidCursorError:
        raise ProblemError(
            422,
            "invalid_request",
            "query/cursor: not a cursor this API returned",
            errors=[{"path": "query/cursor", "message": "not a cursor this API returned"}],
        ) from None


def _next_link(request: Request, position: query_store.Position | None) -> str | None:
    if position is None:
        return None
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "cursor"]
    params.append(("cursor", encode_cursor(position)))
    return f"{request.url.path}?{urlencode(params)}"


def _link_header(response: Response, link: str | None) -> None:
    # RFC 8288 section 3: Link: <target>; rel="next", beside the same link in the body.
    if link is not None:
        response.headers["Link"] = f'<{link}>; rel="next"'


def _counter(used: int, limit: int | None) -> Counter:
    return Counter(used=used, max=limit, text=f"{used} of {limit if limit is not None else '?'}")


def result_of(database_url: str, operation_id: uuid.UUID) -> StoredResultRow | None:
    """The operation's result row (no tenant check: call it for an owned operation)."""
    with snapshot(database_url) as session:
        return result_rows.result_of(session, operation_id)


def _result_view(row: Operation, result: StoredResultRow | None) -> ResultView | None:
    if result is None:
        return None
    return ResultView(
        location=result.location,
        sha256=result.sha256,
        size_bytes=result.size_bytes,
        content_type=result.content_type,
        validated=validated(row.state),
        download=result_path(row.operation_id),
    )


def operation_view(rt: Runtime, row: Operation, result: StoredResultRow | None) -> OperationView:
    """What both doors (HTTP and MCP) show of an operation, with its result if collected."""
    found = rt.found_context(row)
    contract = found.contract if found is not None else None
    limits = contract.limits if contract is not None else None
    escalation = None
    if row.state in OFFERS_OPTIONS or row.escalation_reason is not None:
        offered = (
            escalation_options(str(row.operation_id), runtime=rt)
            if row.state in OFFERS_OPTIONS and contract is not None
            else []
        )
        escalation = Escalation(
            reason=row.escalation_reason,
            detail=row.escalation_detail,
            options=[OfferedOption(option=o.kind.value, label=o.label) for o in offered],
        )
    cancel = (
        CancelRequest(
            requested_by=row.cancel_requested_by,
            reason=row.cancel_reason,
            send_during_pause_by=row.cancel_during_pause_by,
        )
        if row.cancel_requested_by is not None
        else None
    )
    family = follow_ups.family(rt, row)
    follows = None
    if row.follows is not None and row.follow_up_kind is not None:
        follows = Follows(
            operation_id=row.follows, kind=row.follow_up_kind, amount=row.follow_up_amount
        )
    return OperationView(
        operation_id=row.operation_id,
        tenant=row.tenant,
        provider=row.provider,
        state=row.state,
        remote_job_id=row.remote_job_id,
        idempotency_key=row.idempotency_key,
        source_event_id=row.source_event_id,
        fingerprint=row.request_fingerprint,
        trace_id=row.trace_id,
        requested_by=row.requested_by,
        authorized_by=row.authorized_by,
        approval_expires_at=row.approval_expires_at,
        created_at=row.created_at,
        accepted_at=row.accepted_at,
        updated_at=row.updated_at,
        resubmit_of=row.resubmit_of,
        resubmitted_as=row.resubmitted_as,
        priority=row.priority,
        follows=follows,
        follow_ups=[FollowUp.model_validate(m) for m in family["follow_ups"]],
        follow_up_amounts={
            kind: FollowUpAmounts.model_validate(a) for kind, a in family["amounts"].items()
        },
        deadlines=Deadlines(
            create=row.create_deadline,
            result=row.result_deadline,
            cancel=row.cancel_deadline,
            collect=row.collect_deadline,
            business=row.business_deadline,
        ),
        next_poll_at=row.next_poll_at,
        poll_not_before=row.poll_not_before,
        counters={
            "status_requests": _counter(row.status_requests_used, row.max_status_requests),
            "transport_failures": _counter(row.transport_failures_used, row.max_transport_failures),
            "create_attempts": _counter(
                row.create_attempts, limits.max_create_attempts if limits else None
            ),
            "result_fetches": _counter(
                row.result_fetch_attempts, limits.max_result_fetches if limits else None
            ),
        },
        progress=row.progress,
        last_remote_state=row.last_remote_state,
        last_http_status=row.last_http_status,
        escalation=escalation,
        cancel=cancel,
        hold=(
            HoldView(
                pause_id=row.hold.pause_id,
                paused_by=row.hold.author,
                reason=row.hold.reason,
                since=row.hold.started_at,
                parked=row.held_by == row.hold.pause_id,
            )
            if row.hold is not None
            else None
        ),
        validation_summary=dict(row.validation_summary) if row.validation_summary else None,
        create_request=_create_request(rt, row),
        result=_result_view(row, result),
        links=operation_links(row.operation_id),
    )


def _create_request(rt: Runtime, row: Operation) -> CreateRequest | None:
    ctx = rt.found_context(row)
    if ctx is None:
        return None
    shown = shown_create_request(ctx, row)
    return CreateRequest(
        method=shown.method,
        url=shown.url,
        headers=dict(shown.headers),
        body=shown.body,
        fingerprint=shown.fingerprint,
        transport_headers=list(shown.transport_headers),
        request_digest=shown.digest,
        credential_from=shown.credential_from,
        references=[
            ReferenceView(path=ref.pointer, value=ref.value, kind=ref.kind.value)
            for ref in shown.references
        ],
    )


def _summary(row: Mapping[str, Any]) -> dict[str, Any]:
    return {**row, "links": operation_links(row["operation_id"])}


@router.get(
    "/v1/operations/{operation_id}",
    operation_id="get_operation",
    response_model=OperationView,
    responses=problem_responses({404: NOT_FOUND}),
)
def get_operation(
    operation_id: OperationId,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.read))],
) -> OperationView:
    """One operation of the caller's tenant: state, counters, deadlines, escalation options."""
    row = owned_operation(request, principal, operation_id)
    result = result_of(settings_of(request).database_url, row.operation_id)
    return operation_view(runtime_of(request), row, result)


class ListParams(BaseModel):
    """The list's query parameters; an unknown one is refused, not ignored."""

    model_config = ConfigDict(extra="forbid")
    state: OperationState | None = None
    reason: EscalationReason | None = None
    provider: Annotated[StorableStr | None, Field(min_length=1, max_length=200)] = None
    remote_job_id: Annotated[StorableStr | None, Field(min_length=1, max_length=500)] = None
    idempotency_key: Annotated[StorableStr | None, Field(min_length=1, max_length=255)] = None
    since: DateTimeParam | None = None
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT
    cursor: Annotated[str | None, Field(min_length=1, max_length=200)] = None


class PageParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    limit: Annotated[int, Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT
    cursor: Annotated[str | None, Field(min_length=1, max_length=200)] = None


@router.get(
    "/v1/operations",
    operation_id="list_operations",
    response_model=OperationList,
    responses=problem_responses({}),
)
def list_operations(
    request: Request,
    response: Response,
    principal: Annotated[Principal, Depends(require(Scope.read))],
    params: Annotated[ListParams, Query()],
) -> OperationList:
    """The tenant's operations, oldest first, one keyset page at a time (follow links.next)."""
    query = query_store.OperationFilter(
        tenant=principal.tenant,
        limit=params.limit,
        state=params.state,
        reason=params.reason.value if params.reason is not None else None,
        provider=params.provider,
        remote_job_id=params.remote_job_id,
        idempotency_key=params.idempotency_key,
        since=params.since,
        after=decode_cursor(params.cursor) if params.cursor is not None else None,
    )
    with snapshot(settings_of(request).database_url) as session:
        page = query_store.list_operations(session, query)
    link = _next_link(request, page.next)
    _link_header(response, link)
    return OperationList(
        operations=[OperationSummary.model_validate(_summary(r)) for r in page.rows],
        links=PageLinks(next=link),
    )


@router.get(
    "/v1/operations/{operation_id}/events",
    operation_id="list_operation_events",
    response_model=OperationStory,
    responses=problem_responses({404: NOT_FOUND}),
)
def operation_events(
    operation_id: OperationId,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.read))],
) -> OperationStory:
    """The operation's story: every event, whether its hash chain verifies, every intake attempt."""
    row = owned_operation(request, principal, operation_id)
    settings = settings_of(request)
    # An archived history (tasks/history_archive.py) is read back from its segment.
    _, archived, segment = archived_events(
        settings.database_url, settings.result_store, row.operation_id
    )
    with transaction(settings.database_url) as session:
        events = [
            *({"seq": ev.seq, **ev.fields} for ev in archived),
            *query_store.history(session, row.operation_id),
        ]
        problems = [ChainProblem(seq=0, problem=p) for p in segment] or store.verify(
            session, row.operation_id, archived=archived
        )
        attempts = api_store.intake_for_operation(session, row.operation_id)
    return OperationStory(
        operation_id=row.operation_id,
        state=row.state,
        events=[EventView.model_validate(e) for e in events],
        chain=ChainView(
            verified=not problems,
            problems=[ChainProblemView(seq=p.seq, problem=p.problem) for p in problems],
        ),
        intake=[
            IntakeAttempt(
                at=a.at,
                door=a.door,
                actor=a.actor,
                token_id=a.token_id,
                idempotency_key=a.idempotency_key,
                fingerprint=a.fingerprint,
                outcome=a.outcome,
                http_status=a.http_status,
                trace_id=a.trace_id,
                detail=a.detail,
            )
            for a in attempts
        ],
        links=operation_links(row.operation_id),
    )


@router.get(
    "/v1/escalations",
    operation_id="list_escalations",
    response_model=EscalationList,
    tags=["escalations"],
    responses=problem_responses({}),
)
def list_escalations(
    request: Request,
    response: Response,
    principal: Annotated[Principal, Depends(require(Scope.read))],
    params: Annotated[PageParams, Query()],
) -> EscalationList:
    """What needs a human in the tenant (stopped or awaiting approval), longest waiting first."""
    after = decode_cursor(params.cursor) if params.cursor is not None else None
    with transaction(settings_of(request).database_url) as session:
        counts = query_store.escalation_counts(session, principal.tenant)
        page = query_store.escalations(session, principal.tenant, limit=params.limit, after=after)
    by_reason: dict[str, int] = {}
    by_state: dict[str, int] = {}
    for state, reason, count in counts:
        by_state[state] = by_state.get(state, 0) + count
        # Awaiting approval has no escalation reason: it is counted under its state's name.
        key = reason or state
        by_reason[key] = by_reason.get(key, 0) + count
    link = _next_link(request, page.next)
    _link_header(response, link)
    return EscalationList(
        counts=EscalationCounts(
            total=sum(by_state.values()), by_reason=by_reason, by_state=by_state
        ),
        escalations=[
            WaitingOperation.model_validate({**_summary(r), "waiting_since": r["updated_at"]})
            for r in page.rows
        ],
        links=PageLinks(next=link),
    )
