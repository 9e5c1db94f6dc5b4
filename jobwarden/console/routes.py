"""The console's routes under /console: login, the queue, operation pages, live updates.

Every page needs a session (jobwarden.console.session) whose token holds the
``read`` scope; a decision needs ``decide``, an approval ``approve`` and a cancel
``cancel``, as over the HTTP API. A finished operation's result downloads from
/console/operations/{id}/result under the session's token, exactly as
GET /v1/operations/{id}/result serves it (same scope, same tenant, same digest
check). Every POST carries the session's CSRF token in its form. Search and bulk
decisions live in jobwarden/console/search.py.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Depends, Header, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.concurrency import run_in_threadpool

from jobwarden.api import results
from jobwarden.api.auth import Principal, Scope, secret_hash
from jobwarden.api.context import runtime_of, settings_of
from jobwarden.api.intake import caller_of
from jobwarden.api.problems import ProblemError
from jobwarden.api.queries import decode_cursor, encode_cursor, parse_operation_id
from jobwarden.console import session as sessions
from jobwarden.console.live import LiveHub, Marker
from jobwarden.console.pages import (
    APPROVAL_SECONDS,
    breaker_incidents,
    needs_a_human,
    operation_page,
)
from jobwarden.models.errors import AnotherApproverNeededError, LostRaceError, RefusedInputError
from jobwarden.models.humans.approvals import SELF_APPROVAL
from jobwarden.models.persistence import query_store, store
from jobwarden.models.persistence.db import snapshot
from jobwarden.models.states import AUTOMATION_STOPPED, TERMINAL
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.follow_ups import start_follow_up
from jobwarden.tasks.heartbeat import no_worker
from jobwarden.tasks.humans import interventions
from jobwarden.tasks.runtime import utcnow

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=str(HERE / "templates"))
router = APIRouter(prefix="/console", include_in_schema=False)
STOPPED = {s.value for s in TERMINAL | AUTOMATION_STOPPED} | {S.awaiting_approval.value}
ENDED = {s.value for s in TERMINAL}
MAX_FORM_FIELD = 2000
# No console form has more than a dozen fields; a body with more is not one of ours.
MAX_FORM_FIELDS = 50
# An idle stream sends a comment this often, so a vanished viewer is noticed and dropped.
KEEPALIVE_SECONDS = 15
RECONNECT_MS = 3000
NO_REASON = "a decision needs a reason: say why, for whoever reads the history"
NO_CANCEL_REASON = "a cancel needs a reason: say why, for whoever reads the history"


class ConsoleError(Exception):
    """A refusal shown as a page: the status and a sentence naming what was wrong (and the
    headers a client acts on, such as Retry-After)."""

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})


async def form_of(request: Request) -> dict[str, str]:
    """An application/x-www-form-urlencoded body (the only kind the console's forms send)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise ConsoleError(415, "a console form is sent as application/x-www-form-urlencoded")
    # surrogateescape keeps bytes that are not UTF-8 (raw or %-encoded) as lone surrogates,
    # so the check below can name the field that holds them instead of guessing.
    body = (await request.body()).decode("utf-8", "surrogateescape")
    try:
        pairs = parse_qsl(
            body, keep_blank_values=True, max_num_fields=MAX_FORM_FIELDS, errors="surrogateescape"
        )
    except ValueError:
        # parse_qsl raises ValueError past max_num_fields: the stranger's mistake, a 400 page.
        raise ConsoleError(400, f"a console form has at most {MAX_FORM_FIELDS} fields") from None
    fields = dict(pairs)
    for name, value in fields.items():
        problem = _unreadable(name) or _unreadable(value)
        if problem is not None:
            raise ConsoleError(400, f"{_shown(name)}: {problem}")
        if len(value) > MAX_FORM_FIELD:
            raise ConsoleError(422, f"{name}: at most {MAX_FORM_FIELD} characters")
    return fields


def _unreadable(text: str) -> str | None:
    """Why a form's text cannot be used (not UTF-8, or a NUL Postgres refuses), if so."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "not valid UTF-8"
    if "\x00" in text:
        return "contains a NUL character"
    return None


def _shown(name: str) -> str:
    """A field's name as a page may show it: as sent when plain, else escaped and cut."""
    if name.isascii() and name.isprintable() and len(name) <= 40:
        return name
    return ascii(name[:40])


Form = Annotated[dict[str, str], Depends(form_of)]


def cursor_at(raw: str | None) -> query_store.Position | None:
    """The position a page's ``cursor`` names; a page naming the parameter when it is bad."""
    if not raw:
        return None
    try:
        return decode_cursor(raw)
    except ProblemError:
        raise ConsoleError(422, "cursor: not a cursor this console returned") from None


def session_of(request: Request) -> sessions.ConsoleSession:
    current = sessions.current(request)
    if Scope.read not in current.principal.scopes:
        raise ConsoleError(403, "this token lacks the 'read' scope the console needs")
    return current


Session = Annotated[sessions.ConsoleSession, Depends(session_of)]


def checked(current: sessions.ConsoleSession, form: dict[str, str], scope: Scope) -> Principal:
    """The session's principal for a POST: its CSRF token must match, and the scope held."""
    if not sessions.csrf_matches(current, form.get("csrf", "")):
        raise ConsoleError(403, "csrf: the form's token does not match this session; reload")
    if scope not in current.principal.scopes:
        raise ConsoleError(403, f"this token lacks the {scope.value!r} scope")
    return current.principal


def page(
    request: Request,
    name: str,
    context: dict[str, Any],
    status: int = 200,
    headers: Mapping[str, str] | None = None,
) -> HTMLResponse:
    if "session" in context and not name.startswith("_"):
        # A whole page for a signed-in person carries the banner (templates/_no_worker.html)
        # when no worker consumes the operations' queue; a live fragment does not ask.
        warning = no_worker(runtime_of(request).redis, settings_of(request))
        context = {**context, "no_worker": warning}
    return templates.TemplateResponse(
        request, name, context, status_code=status, headers=dict(headers or {})
    )


def see_other(url: str) -> RedirectResponse:
    # 303 (RFC 9110 §15.4.4): after a POST the browser GETs the page, so a reload never
    # repeats a decision.
    return RedirectResponse(url, status_code=303)


def _login_page(request: Request, error: str | None = None, status: int = 200) -> Response:
    nonce = sessions.new_login_nonce()
    response = page(request, "login.html", {"nonce": nonce, "error": error}, status=status)
    sessions.remember_login_nonce(request, response, nonce)
    return response


@router.get("/login")
def login_form(request: Request) -> Response:
    return _login_page(request)


@router.post("/login")
def login(request: Request, form: Form) -> Response:
    if not sessions.login_nonce_matches(request, form.get("csrf", "")):
        raise ConsoleError(403, "csrf: the login form expired or was not ours; reload it")
    token = form.get("token", "").strip()
    principal = sessions.principal_for_hash(request, secret_hash(token)) if token else None
    if principal is None or Scope.read not in principal.scopes:
        return _login_page(request, "token: unknown or revoked, or without the read scope", 401)
    response = see_other("/console/")
    sessions.start(request, response, secret_hash(token))
    return response


@router.post("/logout")
def logout(current: Session, form: Form) -> Response:
    if not sessions.csrf_matches(current, form.get("csrf", "")):
        raise ConsoleError(403, "csrf: the form's token does not match this session; reload")
    response = see_other("/console/login")
    sessions.end(response)
    return response


@router.get("/")
def queue(request: Request, current: Session, cursor: str | None = None) -> HTMLResponse:
    after = cursor_at(cursor)
    groups, total, nxt = needs_a_human(
        settings_of(request).database_url, current.principal, limit=100, after=after
    )
    incidents = breaker_incidents(settings_of(request).database_url, current.principal)
    return page(
        request,
        "queue.html",
        {
            "session": current,
            "incidents": incidents,
            "groups": groups,
            "total": total,
            "next": f"/console/?cursor={encode_cursor(nxt)}" if nxt else None,
        },
    )


def _owned_page(request: Request, current: sessions.ConsoleSession, raw_id: str) -> Any:
    try:
        op_id = parse_operation_id(raw_id)
    except ProblemError:
        raise ConsoleError(404, "no such operation in this tenant") from None
    found = operation_page(
        settings_of(request).database_url, runtime_of(request), current.principal, op_id, utcnow()
    )
    if found is None:
        raise ConsoleError(404, "no such operation in this tenant")
    return found


@router.get("/operations/{operation_id}")
def operation(
    request: Request, operation_id: str, current: Session, done: str | None = None
) -> HTMLResponse:
    found = _owned_page(request, current, operation_id)
    return page(
        request,
        "operation.html",
        {
            "session": current,
            "op": found,
            "done": done,
            "no_reason": NO_REASON,
        },
    )


@router.get("/operations/{operation_id}/live")
def operation_live(request: Request, operation_id: str, current: Session) -> HTMLResponse:
    """The part of the operation page that changes while it runs (swapped in by console.js)."""
    found = _owned_page(request, current, operation_id)
    return page(request, "_live.html", {"session": current, "op": found})


def _marker(database_url: str, op_id: uuid.UUID) -> Marker | None:
    with snapshot(database_url) as session:
        row = store.load(session, op_id)
    return Marker(version=row.version, state=row.state.value) if row is not None else None


def hub_of(request: Request) -> LiveHub:
    hub = getattr(request.app.state, "console_hub", None)
    if hub is None:
        url = settings_of(request).database_url

        async def read(op_id: uuid.UUID) -> Marker | None:
            return await run_in_threadpool(_marker, url, op_id)

        hub = LiveHub(read, interval=1.0)
        request.app.state.console_hub = hub
    assert isinstance(hub, LiveHub)
    return hub


@router.get("/operations/{operation_id}/stream")
async def operation_stream(request: Request, operation_id: str) -> EventSourceResponse:
    """Server-sent events (WHATWG HTML §9.2, text/event-stream, framed by sse-starlette):
    ``changed`` with the new version whenever the row changes, ``end`` once automation
    has stopped. sse-starlette sends the keep-alive comment and notices a viewer who left
    (the disconnect cancels the generator, so the hub drops its watch)."""
    current = await run_in_threadpool(session_of, request)
    try:
        op_id = parse_operation_id(operation_id)
    except ProblemError:
        raise ConsoleError(404, "no such operation in this tenant") from None

    def owned() -> bool:
        with snapshot(settings_of(request).database_url) as session:
            found = query_store.operation_for_tenant(session, current.principal.tenant, op_id)
        return found is not None

    if not await run_in_threadpool(owned):
        raise ConsoleError(404, "no such operation in this tenant")
    hub = hub_of(request)

    async def events() -> AsyncIterator[ServerSentEvent]:
        # How long a browser waits before reconnecting after the stream drops.
        yield ServerSentEvent(retry=RECONNECT_MS)
        async with hub.watch(op_id) as changes:
            while True:
                marker = await changes.get()
                if marker is None:
                    yield ServerSentEvent(json.dumps({"state": None}), event="end")
                    return
                changed = {"version": marker.version, "state": marker.state}
                yield ServerSentEvent(json.dumps(changed), event="changed")
                if marker.state in STOPPED:
                    # ``ended``: nothing may be asked of it any more (the page drops its
                    # cancel form, which sits outside the part that is swapped in).
                    ended = {"state": marker.state, "ended": marker.state in ENDED}
                    yield ServerSentEvent(json.dumps(ended), event="end")
                    return

    return EventSourceResponse(
        events(),
        ping=KEEPALIVE_SECONDS,
        headers={"Cache-Control": "no-store"},
    )


@router.api_route("/operations/{operation_id}/result", methods=["GET", "HEAD"])
def result_download(
    request: Request,
    operation_id: str,
    current: Session,
    range_: Annotated[str | None, Header(alias="Range")] = None,
    if_range: Annotated[str | None, Header(alias="If-Range")] = None,
) -> Response:
    """The operation's collected result, as GET /v1/operations/{id}/result serves it
    (the same function: the digest checked before the first byte, ranges, the
    attachment disposition), authorised by the session's token instead of a header."""
    try:
        parse_operation_id(operation_id)
        return results.get_result(operation_id, request, current.principal, range_, if_range)
    except ProblemError as exc:
        raise ConsoleError(exc.status, exc.detail, exc.headers) from None


def _moved(exc: Exception) -> ConsoleError:
    if isinstance(exc, LostRaceError):
        return ConsoleError(409, "the operation is busy; try again")
    return ConsoleError(409, str(exc))


@router.post("/operations/{operation_id}/decisions")
def decide(request: Request, operation_id: str, current: Session, form: Form) -> Response:
    principal = checked(current, form, Scope.decide)
    found = _owned_page(request, current, operation_id)
    option = form.get("option", "")
    note = form.get("note", "").strip()
    if not note:
        raise ConsoleError(422, f"note: {NO_REASON}")
    offered = [o.kind.value for o in found.options]
    if option not in offered:
        raise ConsoleError(
            422, f"option: {option!r} is not offered now; offered: {', '.join(offered) or 'none'}"
        )
    try:
        interventions.decide_escalation(
            str(found.row.operation_id),
            option,
            principal.author,
            note,
            runtime=runtime_of(request),
            door="http",
        )
    except (RefusedInputError, LostRaceError) as exc:
        raise _moved(exc) from None
    return see_other(f"/console/operations/{found.row.operation_id}?done={option}")


@router.post("/operations/{operation_id}/approvals")
def approve(request: Request, operation_id: str, current: Session, form: Form) -> Response:
    principal = checked(current, form, Scope.approve)
    found = _owned_page(request, current, operation_id)
    row = found.row
    if row.state is not S.awaiting_approval:
        raise ConsoleError(409, f"the operation is not awaiting approval ({row.state.value})")
    if found.self_approval_refused:
        raise ConsoleError(
            403, "this token's name submitted the operation; another approver must approve it"
        )
    if found.approved_already:
        raise ConsoleError(409, "you approved already; another approver must approve")
    if form.get("fingerprint") != row.request_fingerprint:
        raise ConsoleError(
            409, "fingerprint: not the operation's; a changed payload needs a new approval"
        )
    # Valid no longer than the page said: the approval window's end, at the latest.
    expires = found.approval_expires_if_now
    valid_for = (expires - utcnow()).total_seconds() if expires else float(APPROVAL_SECONDS)
    try:
        interventions.approve(
            str(row.operation_id),
            row.request_fingerprint,
            principal.author,
            valid_for_seconds=max(valid_for, 1.0),
            runtime=runtime_of(request),
            # The digest the page showed: a create that changed since is refused.
            request_digest=form.get("request_digest") or None,
        )
    except AnotherApproverNeededError as exc:
        raise ConsoleError(403 if exc.reason == SELF_APPROVAL else 409, exc.detail) from None
    except (RefusedInputError, LostRaceError) as exc:
        raise _moved(exc) from None
    return see_other(f"/console/operations/{row.operation_id}?done=approved")


@router.post("/operations/{operation_id}/follow-ups")
def follow_up(request: Request, operation_id: str, current: Session, form: Form) -> Response:
    """Start a follow-up, as POST /v1/operations/{id}/follow-ups does (same scope, same
    call); the page of the new operation follows, or the refusal naming what to fix."""
    principal = checked(current, form, Scope.submit)
    found = _owned_page(request, current, operation_id)
    try:
        command = json.loads(form.get("command", ""))
    except ValueError:
        raise ConsoleError(422, "command: not a JSON object") from None
    try:
        answer = start_follow_up(
            found.row.operation_id,
            form.get("kind", ""),
            command,
            principal.name,
            instruction_id=form.get("instruction_id", "").strip() or None,
            tenant=principal.tenant,
            runtime=runtime_of(request),
            door="http",
            caller=caller_of(principal),
        )
    except RefusedInputError as exc:
        raise ConsoleError(409 if "remaining" in str(exc) else 422, str(exc)) from None
    except LostRaceError as exc:
        raise _moved(exc) from None
    if answer.operation_id is None or answer.outcome.value == "conflict":
        raise ConsoleError(409, "this instruction was started with another command")
    return see_other(f"/console/operations/{answer.operation_id}?done=follow-up")


@router.post("/operations/{operation_id}/cancel")
def cancel(request: Request, operation_id: str, current: Session, form: Form) -> Response:
    """Record the intent to cancel, as POST /v1/operations/{id}/cancel does (same scope,
    same intervention); a worker sends it and waits for the provider's confirmation."""
    principal = checked(current, form, Scope.cancel)
    found = _owned_page(request, current, operation_id)
    if not found.cancellable:
        raise ConsoleError(409, f"the operation has ended ({found.row.state.value})")
    reason = form.get("reason", "").strip()
    if not reason:
        raise ConsoleError(422, f"reason: {NO_CANCEL_REASON}")
    try:
        interventions.request_cancel(
            str(found.row.operation_id), principal.author, reason, runtime=runtime_of(request)
        )
    except (RefusedInputError, LostRaceError) as exc:
        raise _moved(exc) from None
    return see_other(f"/console/operations/{found.row.operation_id}?done=cancel")
