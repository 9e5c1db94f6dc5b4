"""Search and bulk decisions by filter, over the HTTP API's keyset-paginated list.

A bulk decision is shown first as a dry run (how many operations the filter
matches now); the confirming form carries that count, and is refused if the
filter matches a different number by then. Each operation then gets its own
human_decision event with the operator as actor, through
tasks/interventions.decide_escalation, as if decided one by one.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from fastapi import Request
from fastapi.responses import HTMLResponse, Response

from jobwarden.api.auth import Scope
from jobwarden.api.context import runtime_of, settings_of
from jobwarden.api.queries import encode_cursor
from jobwarden.console.routes import (
    NO_REASON,
    ConsoleError,
    Form,
    Session,
    checked,
    cursor_at,
    page,
    router,
)
from jobwarden.models.actions import EscalationReason
from jobwarden.models.errors import LostRaceError, RefusedInputError
from jobwarden.models.humans.escalation import OptionKind
from jobwarden.models.persistence import query_store
from jobwarden.models.persistence.db import snapshot
from jobwarden.models.persistence.tables import NEEDS_A_HUMAN
from jobwarden.models.states import OperationState
from jobwarden.tasks.humans import interventions

PAGE = 50
# One bulk decision touches at most this many operations; a larger outage is decided in
# several rounds, each with its own dry run.
MAX_BULK = 500
FILTERS = ("state", "reason", "provider", "remote_job_id", "idempotency_key", "since")


def parse_filter(tenant: str, params: dict[str, str], *, limit: int) -> query_store.OperationFilter:
    """The search form's fields as the list query; ConsoleError (422) naming a bad field."""
    state = params.get("state") or None
    reason = params.get("reason") or None
    if state is not None and state not in OperationState.__members__:
        raise ConsoleError(422, f"state: {state!r} is not a state")
    if reason is not None and reason not in EscalationReason.__members__:
        raise ConsoleError(422, f"reason: {reason!r} is not an escalation reason")
    since = None
    if params.get("since"):
        try:
            since = datetime.fromisoformat(params["since"])
        except ValueError:
            raise ConsoleError(422, "since: not a date and time (YYYY-MM-DDTHH:MM)") from None
        # The browser's datetime-local input has no zone: the console speaks UTC.
        since = since if since.tzinfo is not None else since.replace(tzinfo=UTC)
    texts: dict[str, str | None] = {}
    for name, longest in (("provider", 200), ("remote_job_id", 500), ("idempotency_key", 255)):
        value = params.get(name) or None
        if value is not None and (len(value) > longest or "\x00" in value):
            raise ConsoleError(422, f"{name}: at most {longest} characters, no NUL")
        texts[name] = value
    return query_store.OperationFilter(
        tenant=tenant,
        limit=limit,
        state=OperationState(state) if state else None,
        reason=reason,
        since=since,
        provider=texts["provider"],
        remote_job_id=texts["remote_job_id"],
        idempotency_key=texts["idempotency_key"],
    )


def _filters(request: Request) -> dict[str, str]:
    return {k: request.query_params.get(k, "") for k in FILTERS}


def _choices() -> dict[str, Any]:
    return {
        "states": [s.value for s in OperationState],
        "reasons": [r.value for r in EscalationReason],
        "human_states": [s.value for s in NEEDS_A_HUMAN],
        "options": [o.value for o in OptionKind],
    }


@router.get("/search")
def search(request: Request, current: Session, cursor: str | None = None) -> HTMLResponse:
    params = _filters(request)
    query = parse_filter(current.principal.tenant, params, limit=PAGE)
    # Newest first: an operator searching is mostly after what just happened.
    query = replace(query, newest_first=True, after=cursor_at(cursor) if cursor else None)
    with snapshot(settings_of(request).database_url) as session:
        found = query_store.list_operations(session, query)
    given = {k: v for k, v in params.items() if v}
    nxt = (
        f"/console/search?{urlencode({**given, 'cursor': encode_cursor(found.next)})}"
        if found.next
        else None
    )
    return page(
        request,
        "search.html",
        {"session": current, "rows": found.rows, "params": params, "next": nxt, **_choices()},
    )


def matching(database_url: str, f: query_store.OperationFilter) -> list[dict[str, Any]]:
    """Every operation the bulk filter matches, up to MAX_BULK + 1 (one more says: too many)."""
    rows: list[dict[str, Any]] = []
    after = None
    with snapshot(database_url) as session:
        while len(rows) <= MAX_BULK:
            found = query_store.list_operations(session, replace(f, after=after))
            rows.extend(dict(r) for r in found.rows)
            if found.next is None:
                break
            after = found.next
    return rows[: MAX_BULK + 1]


def _bulk_filter(current: Any, params: dict[str, str]) -> query_store.OperationFilter:
    state = params.get("state") or OperationState.escalated.value
    if state not in {s.value for s in NEEDS_A_HUMAN}:
        raise ConsoleError(422, "state: bulk decisions are for operations waiting for a human")
    return parse_filter(current.principal.tenant, {**params, "state": state}, limit=200)


@router.get("/bulk")
def bulk_form(request: Request, current: Session) -> HTMLResponse:
    params = _filters(request)
    option = request.query_params.get("option", "")
    context: dict[str, Any] = {"session": current, "params": params, "option": option}
    if option:
        if option not in OptionKind.__members__:
            raise ConsoleError(422, f"option: {option!r} is not an option")
        rows = matching(settings_of(request).database_url, _bulk_filter(current, params))
        context |= {"dry_run": True, "count": len(rows), "rows": rows[:20], "max": MAX_BULK}
    return page(request, "bulk.html", {**context, **_choices()})


@router.post("/bulk")
def bulk_apply(request: Request, current: Session, form: Form) -> Response:
    principal = checked(current, form, Scope.decide)
    option = form.get("option", "")
    if option not in OptionKind.__members__:
        raise ConsoleError(422, f"option: {option!r} is not an option")
    note = form.get("note", "").strip()
    if not note:
        raise ConsoleError(422, f"note: {NO_REASON}")
    params = {k: form.get(k, "") for k in FILTERS}
    rows = matching(settings_of(request).database_url, _bulk_filter(current, params))
    if len(rows) > MAX_BULK:
        raise ConsoleError(422, f"the filter matches more than {MAX_BULK}; narrow it")
    if str(len(rows)) != form.get("expected_count"):
        raise ConsoleError(
            409,
            f"expected_count: the filter now matches {len(rows)}, not "
            f"{form.get('expected_count')}; look at the dry run again",
        )
    rt = runtime_of(request)
    applied: list[str] = []
    skipped: list[tuple[str, str]] = []
    for row in rows:
        op_id = str(row["operation_id"])
        try:
            # Each operation on its own: one refusal (moved meanwhile, option not offered
            # for it) is reported and the rest still get their decision.
            interventions.decide_escalation(op_id, option, principal.author, note, runtime=rt)
        except (RefusedInputError, LostRaceError) as exc:
            skipped.append((op_id, str(exc)))
        else:
            applied.append(op_id)
    return page(
        request,
        "bulk.html",
        {
            "session": current,
            "params": params,
            "option": option,
            "applied": applied,
            "skipped": skipped,
            "done": True,
            **_choices(),
        },
    )
