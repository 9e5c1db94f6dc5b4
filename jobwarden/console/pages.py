"""What each console page shows, assembled from the stores the HTTP API reads.

Plain functions from a database URL, a runtime and the principal to the values a
template renders; no request objects, so each is callable from a test.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jobwarden.api.auth import Principal
from jobwarden.console.timeline import build_timeline, render_svg
from jobwarden.models.contracts.contract import DEFAULT_APPROVAL_WINDOW_SECONDS
from jobwarden.models.history.archive import as_chained
from jobwarden.models.history.chain import ChainedEvent, EventDraft, EventKind
from jobwarden.models.history.excerpts import redacted
from jobwarden.models.history.verification import ChainProblem
from jobwarden.models.humans.approvals import (
    approval_window_end,
    given_approvals,
    on_behalf_of,
    standing,
)
from jobwarden.models.humans.escalation import Option
from jobwarden.models.humans.identity import same_principal
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import breaker_store, query_store, result_rows, store
from jobwarden.models.persistence.breaker_store import Incident
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.result_rows import StoredResultRow
from jobwarden.models.provider.outgoing import ShownRequest
from jobwarden.models.results.access import validated
from jobwarden.models.states import AUTOMATION_STOPPED, OFFERS_OPTIONS, TERMINAL
from jobwarden.models.states import OperationState as S
from jobwarden.observability.story import event_line
from jobwarden.tasks.follow_ups import family
from jobwarden.tasks.history_archive import archived_events
from jobwarden.tasks.humans.interventions import escalation_options
from jobwarden.tasks.provider.edge import secret_forms, shown_create_request
from jobwarden.tasks.runtime import Runtime

# What an approval is valid for when given from the console (the HTTP API's default).
APPROVAL_SECONDS = 3600


def time_left(deadline: datetime | None, now: datetime) -> str:
    if deadline is None:
        return "-"
    seconds = (deadline - now).total_seconds()
    text = _span(timedelta(seconds=abs(seconds)))
    return f"{text} left" if seconds >= 0 else f"passed {text} ago"


def stopped_line(row: Any) -> str:
    """The one-line story of an operation waiting for a human, told as its stop was."""
    if row["state"] == S.awaiting_approval.value:
        draft = EventDraft(
            kind=EventKind.approval_requested,
            actor=row["requested_by"],
            at=row["updated_at"],
            cause=f"submitted by {row['requested_by']}",
        )
    else:
        draft = EventDraft(
            kind=EventKind.escalated,
            actor="jobwarden",
            at=row["updated_at"],
            cause=row["escalation_reason"] or row["state"],
            excerpt={"detail": row.get("escalation_detail") or row["state"]},
        )
    chained = ChainedEvent(
        operation_id=str(row["operation_id"]), seq=0, draft=draft, prev_hash="", hash=""
    )
    return event_line(chained)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueGroup:
    reason: str
    count: int
    rows: list[dict[str, Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class IncidentEntry:
    """A provider breaker's escalation as the queue shows it: once, with what it holds."""

    incident: Incident
    held: int  # the tenant's operations its pause holds
    first: list[uuid.UUID]  # the first few of them, by id


# The operations a breaker's entry names; the count says how many more it holds.
INCIDENT_NAMES = 10


def breaker_incidents(database_url: str, principal: Principal) -> list[IncidentEntry]:
    """The open provider breakers holding the tenant's operations: one entry each."""
    with transaction(database_url) as session:
        entries = []
        for incident in breaker_store.all_active(session):
            count, first = breaker_store.held(
                session, incident.pause_id, principal.tenant, limit=INCIDENT_NAMES
            )
            if count:
                entries.append(IncidentEntry(incident=incident, held=count, first=first))
    return entries


def needs_a_human(
    database_url: str, principal: Principal, *, limit: int, after: query_store.Position | None
) -> tuple[list[QueueGroup], int, query_store.Position | None]:
    """The tenant's operations waiting for a human, grouped by reason (awaiting approval
    under its state's name), oldest first within a group; the page's groups, the total
    and where the next page starts."""
    with transaction(database_url) as session:
        counts = query_store.escalation_counts(session, principal.tenant)
        page = query_store.escalations(session, principal.tenant, limit=limit, after=after)
    totals: dict[str, int] = {}
    for state, reason, count in counts:
        totals[reason or state] = totals.get(reason or state, 0) + count
    grouped: dict[str, list[dict[str, Any]]] = {key: [] for key in totals}
    for row in page.rows:
        key = row["escalation_reason"] or row["state"]
        grouped.setdefault(key, []).append({**row, "line": stopped_line(row)})
    groups = [
        QueueGroup(reason=key, count=totals.get(key, len(rows)), rows=rows)
        for key, rows in grouped.items()
    ]
    # The group whose oldest member has waited longest comes first.
    groups.sort(
        key=lambda g: (not g.rows, g.rows[0]["updated_at"].timestamp() if g.rows else 0, g.reason)
    )
    return groups, sum(totals.values()), page.next


@dataclass(frozen=True, slots=True, kw_only=True)
class StoryLine:
    at: datetime
    actor: str
    text: str
    delay_source: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class OperationPage:
    row: Operation
    running: bool
    counters: list[tuple[str, int, int | None]]
    deadlines: list[tuple[str, datetime | None, str]]
    story: list[StoryLine]
    verified: bool
    chain_problems: list[str]
    command: Any
    options: list[Option]
    # When the wait for approval ends (the earlier of the approval window and the business
    # deadline), and what an approval given now is valid until: never past that end.
    approval_window_ends: datetime | None
    approval_window_left: str
    approval_expires_if_now: datetime | None
    self_approval_refused: bool
    # The two-person rule: how many approve, who already has (this wait, this fingerprint,
    # unexpired), and whether the viewer is one of them (then no Approve button).
    approvals_required: int
    approvals_given: list[str]
    approved_already: bool
    cancellable: bool  # not ended: the cancel form is offered
    timeline_svg: str
    create_request: ShownRequest | None  # None: the provider is no longer configured
    result: ResultBlock | None  # None: nothing was collected (or kept)
    # The create's body indented for reading (JSON only; None: shown as sent). The page
    # shows the exact bytes too: the approval binds those, not this rendering.
    create_body_readable: str | None
    # The family (issue 40): what it follows, its follow-ups, the amounts so far
    # (tasks/follow_ups.family), and the follow-ups its state allows starting now.
    family: dict[str, Any]
    follow_up_kinds: list[str]


def readable_body(body: str | None) -> str | None:
    """A JSON body indented two spaces, keys in their order; None when it is not JSON."""
    if body is None:
        return None
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResultBlock:
    """A collected result as GET /v1/operations/{id}/result serves it: its digest, size,
    item count, what it is (validated, kept after failing validation, accepted by a
    person) and the console's download link, which checks the digest as the API does."""

    sha256: str
    size_bytes: int
    size: str  # as a person reads it: "1.4 MiB"
    items: int | None
    content_type: str
    validated: str  # "validated", "accepted as it is", "failed validation (kept)"
    where: str  # "inline in the database" or the result store's location
    download: str


def result_block(row: Operation, result: StoredResultRow | None) -> ResultBlock | None:
    if result is None:
        return None
    checked = validated(row.state.value)
    return ResultBlock(
        sha256=result.sha256,
        size_bytes=result.size_bytes,
        size=byte_size(result.size_bytes),
        items=result.record_count,
        content_type=result.content_type or "application/octet-stream",
        validated=(
            "accepted as it is"
            if checked == "accepted"
            else "validated"
            if checked
            else "failed validation (kept)"
        ),
        where=result.location or "inline in the database",
        download=f"/console/operations/{row.operation_id}/result",
    )


def byte_size(n: int) -> str:
    """A size in binary units, as a person reads it (the exact bytes are shown beside)."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _approval_window_ends(
    row: Operation, events: list[ChainedEvent], window: timedelta
) -> datetime | None:
    """The end of the wait for approval; None unless the operation is awaiting one."""
    if row.state is not S.awaiting_approval:
        return None
    entered = [ev.draft.at for ev in events if ev.draft.to_state == S.awaiting_approval.value]
    since = entered[-1] if entered else row.created_at
    return approval_window_end(row, waiting_since=since, window=window)


def operation_page(
    database_url: str, rt: Runtime, principal: Principal, operation_id: uuid.UUID, now: datetime
) -> OperationPage | None:
    """Everything the operation page shows; None when the tenant has no such operation."""
    with transaction(database_url) as session:
        row = query_store.operation_for_tenant(session, principal.tenant, operation_id)
        if row is None:
            return None
    # An archived history (tasks/history_archive.py) is read back from its segment.
    _, archived, segment = archived_events(database_url, rt.settings.result_store, operation_id)
    with transaction(database_url) as session:
        kept = [as_chained(str(operation_id), ev) for ev in archived]
        events = [*(ev for ev in kept if ev is not None), *store.events_for(session, operation_id)]
        problems = [ChainProblem(seq=0, problem=p) for p in segment] or store.verify(
            session, operation_id, archived=archived
        )
        result = result_rows.result_of(session, operation_id)
    ctx = rt.found_context(row)
    contract = ctx.contract if ctx is not None else None
    limits = contract.limits if contract is not None else None
    options = (
        escalation_options(str(operation_id), runtime=rt)
        if row.state in OFFERS_OPTIONS and contract is not None
        else []
    )
    secrets = secret_forms(contract) if contract is not None else ()
    timeline = build_timeline(
        events,
        deadline=row.result_deadline,
        budget_used=row.status_requests_used,
        budget_max=row.max_status_requests,
        now=now,
    )
    shown = shown_create_request(ctx, row) if ctx is not None else None
    window = limits.approval_window_seconds if limits else DEFAULT_APPROVAL_WINDOW_SECONDS
    window_ends = _approval_window_ends(row, events, timedelta(seconds=window))
    required = contract.approvals_required if contract is not None else 1
    given = (
        [
            g.approver
            for g in standing(
                given_approvals(events),
                row.request_fingerprint,
                now,
                shown.digest if shown is not None else None,
            )
        ]
        if row.state is S.awaiting_approval
        else []
    )
    startable = contract.follow_ups.items() if contract is not None else ()
    return OperationPage(
        family=family(rt, row),
        follow_up_kinds=sorted(k for k, spec in startable if row.state in spec.parent_states),
        row=row,
        running=row.state not in TERMINAL | AUTOMATION_STOPPED | {S.awaiting_approval},
        counters=[
            ("status requests", row.status_requests_used, row.max_status_requests),
            ("transport failures", row.transport_failures_used, row.max_transport_failures),
            (
                "create attempts",
                row.create_attempts,
                limits.max_create_attempts if limits else None,
            ),
            (
                "result fetches",
                row.result_fetch_attempts,
                limits.max_result_fetches if limits else None,
            ),
        ],
        deadlines=_deadlines(row, events, now),
        story=[
            StoryLine(
                at=ev.draft.at,
                actor=ev.draft.actor,
                text=event_line(ev).split(" ", 1)[-1],
                delay_source=ev.draft.delay_source,
            )
            for ev in events
        ],
        verified=not problems,
        chain_problems=[f"event {p.seq}: {p.problem}" for p in problems],
        command=redacted(dict(row.command), secrets),
        options=options,
        approval_window_ends=window_ends,
        approval_window_left=time_left(window_ends, now),
        approval_expires_if_now=(
            min(now + timedelta(seconds=APPROVAL_SECONDS), window_ends)
            if window_ends is not None
            else None
        ),
        self_approval_refused=refuses_self_approval(
            row, principal, required, behalf_of=on_behalf_of(events)
        ),
        approvals_required=required,
        approvals_given=given,
        approved_already=any(same_principal(principal.actor, who) for who in given),
        cancellable=row.state not in TERMINAL,
        timeline_svg=render_svg(timeline),
        create_request=shown,
        result=result_block(row, result),
        create_body_readable=readable_body(shown.body) if shown is not None else None,
    )


# Before approval (or admission) the provider's deadlines are not running: they move by
# the wait when it ends (models/humans/approvals.py), so a countdown now would be a promise the
# page cannot keep.
NOT_STARTED = frozenset({S.awaiting_approval, S.queued})


def _waiting_since(row: Operation, events: list[ChainedEvent]) -> datetime:
    """When the operation entered the state it waits in (its intent, or its admission)."""
    entered = [e.draft.at for e in events if e.draft.to_state == row.state.value]
    return entered[-1] if entered else row.created_at


# When each deadline is met: the first event entering one of these states (the create's by
# the row's accepted_at). A met deadline is no longer a countdown: the page says it was met.
MET_ON_ENTERING = {
    "result": frozenset({S.result_collecting.value, S.succeeded.value}),
    "cancel": frozenset({S.cancelled.value}),
    "collect": frozenset(
        {S.succeeded.value, S.result_validation_failed.value, S.result_accepted.value}
    ),
}


def met_at(row: Operation, events: list[ChainedEvent], name: str) -> datetime | None:
    """When the operation did what deadline ``name`` bounds; None if it has not (yet)."""
    if name == "create":
        return row.accepted_at
    states = MET_ON_ENTERING.get(name, frozenset())
    return next((e.draft.at for e in events if e.draft.to_state in states), None)


def _deadlines(
    row: Operation, events: list[ChainedEvent], now: datetime
) -> list[tuple[str, datetime | None, str]]:
    since = _waiting_since(row, events)
    waiting = row.state in NOT_STARTED
    shown: list[tuple[str, datetime | None, str]] = []
    for name, at in (
        ("create", row.create_deadline),
        ("result", row.result_deadline),
        ("cancel", row.cancel_deadline),
        ("collect", row.collect_deadline),
    ):
        met = met_at(row, events, name) if at is not None else None
        if waiting and at is not None and name in ("create", "result"):
            span = at - since
            started = "approved" if row.state is S.awaiting_approval else "admitted"
            shown.append((name, None, f"{_span(span)} from when it is {started}"))
        elif at is None:
            shown.append((name, at, "-"))
        elif met is not None:
            early = (at - met).total_seconds()
            side = "before" if early >= 0 else "after"
            shown.append((name, at, f"met, {_span(timedelta(seconds=abs(early)))} {side} it"))
        elif row.state in TERMINAL:
            # Ended without doing what it bounds: no deadline is running any more.
            ended = f"ended {row.state.value}"
            shown.append((name, at, f"missed: {ended}" if at <= row.updated_at else ended))
        else:
            shown.append((name, at, time_left(at, now)))
    timer = "approval window" if row.state is S.awaiting_approval else "next poll"
    left = "-" if row.state in TERMINAL else time_left(row.next_poll_at, now)
    shown.append((timer, row.next_poll_at, left))
    return shown


def _span(span: timedelta) -> str:
    seconds = max(span.total_seconds(), 0.0)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def refuses_self_approval(
    row: Operation, principal: Principal, required: int = 1, *, behalf_of: str | None = None
) -> bool:
    """The four-eyes rule of POST /v1/operations/{id}/approvals (jobwarden/api/actions.py):
    whoever submitted an operation does not also approve it, unless the tenant allows it
    and one approver is enough (never under the two-person rule); the principal a
    schedule submitted it on behalf of never does."""
    if behalf_of is not None and same_principal(principal.actor, behalf_of):
        return True
    return same_principal(principal.actor, row.requested_by) and not (
        principal.allows_self_approval and required == 1
    )
