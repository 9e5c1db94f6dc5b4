"""`jobwarden watch` and `jobwarden list`, and what `show` and `history` add for operators.

Imported by jobwarden/cli/main.py at start-up, so only typer and rich are imported at module
level: each command imports what it runs (``jobwarden --help`` needs no driver).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from jobwarden.cli import output

if TYPE_CHECKING:
    from jobwarden.cli.deadlines import DeadlineView
    from jobwarden.models.history.chain import ChainedEvent
    from jobwarden.models.humans.escalation import Option
    from jobwarden.models.operation import Operation
    from jobwarden.models.persistence.api_store import IntakeEntry
    from jobwarden.models.provider.outgoing import ShownRequest

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

# Postgres is read at most this often per watcher, however short --interval is asked.
MIN_WATCH_INTERVAL = 0.2
# The live view keeps the end of the story: an operator scrolls with `history` for more.
STORY_LINES = 15
# Exit codes of `watch`: 0 succeeded, 1 any other end or a stop that needs a human.
WATCH_SUCCEEDED, WATCH_OTHERWISE = 0, 1


def _fail(line: str, code: int = 2) -> typer.Exit:
    err.print(line, markup=False, highlight=False)
    return typer.Exit(code)


def _secrets_and_request(row: Operation) -> tuple[tuple[str, ...], ShownRequest | None]:
    """The credential's forms and the create as it leaves; nothing where the provider is
    no longer configured (the command is then redacted by key name only)."""
    try:
        from jobwarden.tasks.provider.edge import secret_forms, shown_create_request
        from jobwarden.tasks.runtime import current

        ctx = current().context_for(row)
    except Exception:  # a provider no longer configured (or no settings): nothing to build
        return (), None
    return secret_forms(ctx.contract), shown_create_request(ctx, row)


def request_lines(shown: ShownRequest | None) -> list[str]:
    """The create as `show` prints it: request line, every header, the body as sent."""
    from jobwarden.observability.story import shown as printable

    if shown is None:
        return ["request          (provider not configured here: cannot be shown)"]
    return [
        # Named apart from the body: the exact commit or digest an approval lets through.
        *(
            f"reference        {ref.pointer} -> {printable(ref.value, limit=None)} "
            f"({ref.kind.value})"
            for ref in shown.references
        ),
        f"request          {shown.method} {printable(shown.url, limit=None)}",
        *(
            f"  header         {name}: {printable(value, limit=None)}"
            for name, value in shown.headers
        ),
        "  body           " + (printable(shown.body, limit=None) if shown.body else "(none)"),
        # What an approval binds: `jobwarden approve --request-digest` names it.
        f"request digest   {shown.digest}",
    ]


def show_lines(row: Operation) -> list[str]:
    """What `show` adds to the summary: what an approver checks before approving."""
    from jobwarden.models.history.excerpts import redacted
    from jobwarden.observability.story import shown

    secrets, request = _secrets_and_request(row)
    command = json.dumps(redacted(dict(row.command), secrets), ensure_ascii=False, sort_keys=True)
    return [
        f"fingerprint      {row.request_fingerprint}",
        *request_lines(request),
        f"command          {shown(command, limit=None)}",
        f"requested by     {row.requested_by}"
        + (f", authorized by {row.authorized_by}" if row.authorized_by else ""),
    ]


def show_record(
    row: Operation, deadlines: Sequence[DeadlineView], offered: Sequence[Option]
) -> dict[str, Any]:
    """`show --json`: what `show` prints, as one object (the command redacted alike)."""
    from jobwarden.models.history.excerpts import redacted

    secrets, request = _secrets_and_request(row)
    return {
        "operation_id": str(row.operation_id),
        "tenant": row.tenant,
        "provider": row.provider,
        "state": row.state.value,
        "escalation_reason": row.escalation_reason,
        "escalation_detail": row.escalation_detail,
        "remote_job_id": row.remote_job_id,
        "status_requests": {
            "used": row.status_requests_used,
            "max": row.max_status_requests,
            "reserved": row.reserved_request,
        },
        "transport_failures": {
            "used": row.transport_failures_used,
            "max": row.max_transport_failures,
        },
        "deadlines": [d.as_dict() for d in deadlines],
        "next_poll_at": row.next_poll_at.isoformat() if row.next_poll_at else None,
        "progress": row.progress,
        "trace_id": row.trace_id,
        "concurrency_key": row.concurrency_key,
        "version": row.version,
        "event_count": row.event_count,
        "contract_digest": row.contract_digest,
        "resubmit_of": str(row.resubmit_of) if row.resubmit_of else None,
        "resubmitted_as": str(row.resubmitted_as) if row.resubmitted_as else None,
        "fingerprint": row.request_fingerprint,
        "request": None
        if request is None
        else {
            "method": request.method,
            "url": request.url,
            "headers": [[name, value] for name, value in request.headers],
            "body": request.body,
            "digest": request.digest,
            "references": [
                {"path": ref.pointer, "value": ref.value, "kind": ref.kind.value}
                for ref in request.references
            ],
        },
        "command": redacted(dict(row.command), secrets),
        "requested_by": row.requested_by,
        "authorized_by": row.authorized_by,
        "options": [{"option": o.kind.value, "label": o.label} for o in offered],
    }


def event_record(ev: ChainedEvent) -> dict[str, Any]:
    """One event for `history --json` and `watch --json`: its fields and its story line."""
    from jobwarden.observability.story import event_line

    d = ev.draft
    return {
        "seq": ev.seq,
        "at": d.at.isoformat() if isinstance(d.at, datetime) else str(d.at),
        "actor": d.actor,
        "kind": d.kind.value,
        "from_state": d.from_state,
        "to_state": d.to_state,
        "cause": d.cause,
        "delay_source": d.delay_source,
        "http_status": d.http_status,
        "provider_request_id": d.provider_request_id,
        "excerpt": d.excerpt,
        "line": event_line(ev).split(" ", 1)[-1],
        "hash": ev.hash,
    }


def intake_record(a: IntakeEntry) -> dict[str, Any]:
    """One submission attempt for `history --json`."""
    return {
        "at": a.at.isoformat(),
        "door": a.door,
        "actor": a.actor,
        "outcome": a.outcome,
        "idempotency_key": a.idempotency_key,
        "fingerprint": a.fingerprint,
        "http_status": a.http_status,
        "trace_id": a.trace_id,
        "detail": a.detail,
    }


def dated_line(ev: ChainedEvent) -> str:
    """One event for `history`: date and time (UTC), the actor, what happened."""
    from jobwarden.observability.story import event_line, shown

    at = ev.draft.at
    stamp = at.strftime("%Y-%m-%d %H:%M:%S%z") if isinstance(at, datetime) else str(at)
    return f"{stamp}  {shown(ev.draft.actor, limit=40):<20}  {event_line(ev).split(' ', 1)[-1]}"


def list_command(
    tenant: Annotated[str, typer.Option(envvar="JOBWARDEN_TENANT")] = "default",
    state: Annotated[str | None, typer.Option(envvar="JOBWARDEN_LIST_STATE")] = None,
    reason: Annotated[
        str | None, typer.Option(help="Escalation reason.", envvar="JOBWARDEN_LIST_REASON")
    ] = None,
    provider: Annotated[str | None, typer.Option(envvar="JOBWARDEN_LIST_PROVIDER")] = None,
    remote_job_id: Annotated[
        str | None, typer.Option(envvar="JOBWARDEN_LIST_REMOTE_JOB_ID")
    ] = None,
    key: Annotated[
        str | None, typer.Option("--key", help="Idempotency key.", envvar="JOBWARDEN_LIST_KEY")
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(help="Created at or after (ISO 8601).", envvar="JOBWARDEN_LIST_SINCE"),
    ] = None,
    limit: Annotated[int, typer.Option(envvar="JOBWARDEN_LIST_LIMIT")] = 50,
    cursor: Annotated[
        str | None,
        typer.Option(help="Continue where a page ended.", envvar="JOBWARDEN_LIST_CURSOR"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", envvar="JOBWARDEN_LIST_JSON")] = False,
) -> None:
    """A tenant's operations, oldest first, with the filters of GET /v1/operations."""
    # The core's cursor, not the HTTP door's: `list` runs on the core install (issue 36).
    from jobwarden.config.settings import get_settings
    from jobwarden.models.actions import EscalationReason
    from jobwarden.models.persistence import query_store
    from jobwarden.models.persistence.db import snapshot
    from jobwarden.models.persistence.query_store import (
        MAX_LIMIT,
        InvalidCursorError,
        decode_cursor,
        encode_cursor,
    )
    from jobwarden.models.states import OperationState
    from jobwarden.observability.story import shown

    try:
        parsed_state = OperationState(state) if state is not None else None
        parsed_reason = EscalationReason(reason).value if reason is not None else None
    except ValueError as exc:
        raise _fail(f"error: --state/--reason: {exc}") from None
    try:
        parsed_since = datetime.fromisoformat(since) if since is not None else None
    except ValueError:
        raise _fail(f"error: --since is not an ISO 8601 time: {since!r}") from None
    if parsed_since is not None and parsed_since.tzinfo is None:
        raise _fail("error: --since needs a UTC offset (e.g. 2026-01-01T00:00:00+00:00)")
    if not 1 <= limit <= MAX_LIMIT:
        raise _fail(f"error: --limit must be between 1 and {MAX_LIMIT}")
    try:
        after = decode_cursor(cursor) if cursor is not None else None
    except InvalidCursorError:
        raise _fail(f"error: --cursor is not one `list` printed: {cursor!r}") from None
    query = query_store.OperationFilter(
        tenant=tenant,
        limit=limit,
        state=parsed_state,
        reason=parsed_reason,
        provider=provider,
        remote_job_id=remote_job_id,
        idempotency_key=key,
        since=parsed_since,
        after=after,
    )
    with snapshot(get_settings().database_url) as session:
        page = query_store.list_operations(session, query)
    next_cursor = encode_cursor(page.next) if page.next is not None else None
    if as_json:
        rows = [{k: v for k, v in r.items()} for r in page.rows]
        print(json.dumps({"operations": rows, "next_cursor": next_cursor}, default=str))
        return
    output.table(
        console,
        ("OPERATION", "CREATED (UTC)", "PROVIDER", "STATE", "REASON", "REMOTE JOB", "KEY"),
        [
            (
                r["operation_id"],
                f"{r['created_at'].astimezone(UTC):%Y-%m-%d %H:%M:%S}",
                r["provider"],
                r["state"],
                r["escalation_reason"],
                shown(r["remote_job_id"], limit=40) if r["remote_job_id"] else None,
                shown(r["idempotency_key"], limit=40),
            )
            for r in page.rows
        ],
    )
    if next_cursor is not None:
        err.print(f"more: --cursor {next_cursor}", markup=False, highlight=False)


# --- watch ---------------------------------------------------------------------------


def _stopped(row: Operation) -> bool:
    from jobwarden.models.states import AUTOMATION_STOPPED, TERMINAL

    return row.state in TERMINAL or row.state in AUTOMATION_STOPPED


def _header(row: Operation) -> Table:
    from jobwarden.observability.story import shown

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold")
    table.add_column()
    reason = f" ({row.escalation_reason})" if row.escalation_reason else ""
    table.add_row("operation", str(row.operation_id))
    table.add_row("provider", f"{row.provider} / tenant {row.tenant}")
    table.add_row("state", f"{row.state.value}{reason}")
    table.add_row("remote job", shown(row.remote_job_id or "-", limit=60))
    table.add_row("status requests", f"{row.status_requests_used} of {row.max_status_requests}")
    table.add_row("next poll", row.next_poll_at.isoformat() if row.next_poll_at else "-")
    return table


def view(row: Operation, story: Sequence[str]) -> Group:
    """The live view: the operation's facts, a progress bar, the end of its story."""
    progress = row.progress if row.progress is not None else 0.0
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        "progress",
        ProgressBar(total=100.0, completed=max(0.0, min(100.0, progress)), width=40),
        f"{progress:.0f}%" if row.progress is not None else "-",
    )
    lines = [Text(line) for line in story[-STORY_LINES:]]
    return Group(_header(row), bar, Text(""), *lines)


def _read(url: str, op_id: uuid.UUID, known: int) -> tuple[Operation | None, list[ChainedEvent]]:
    """The row, and its events only when the row says there are new ones (two reads at most)."""
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import snapshot

    with snapshot(url) as session:
        row = store.load(session, op_id)
        if row is None or row.event_count == known:
            return row, []
        return row, store.events_for(session, op_id)[known:]


def follow(
    url: str,
    op_id: uuid.UUID,
    *,
    interval: float,
    on_change: Callable[[Operation, list[str], list[ChainedEvent]], None],
    sleep: Callable[[float], None] = time.sleep,
) -> Operation:
    """Read the operation every ``interval`` seconds (at least MIN_WATCH_INTERVAL) until it
    stops; returns its last row.

    ``on_change(row, story, new_events)`` runs after each read that found something new
    (``story`` holds every event's line so far).
    """
    pace = max(interval, MIN_WATCH_INTERVAL)
    story: list[str] = []
    last_version = -1
    while True:
        row, events = _read(url, op_id, len(story))
        if row is None:
            raise _fail(f"no operation {op_id}", 1)
        story.extend(dated_line(ev) for ev in events)
        if row.version != last_version or events:
            last_version = row.version
            on_change(row, story, events)
        if _stopped(row):
            return row
        sleep(pace)


def watch_command(
    operation_id: str,
    interval: Annotated[
        float,
        typer.Option(
            help=f"Seconds between reads of Postgres (at least {MIN_WATCH_INTERVAL}).",
            envvar="JOBWARDEN_WATCH_INTERVAL",
        ),
    ] = 1.0,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            envvar="JOBWARDEN_WATCH_JSON",
            help="JSON lines: one object per event as it is recorded, then one "
            '{"stopped": ...} object.',
        ),
    ] = False,
) -> None:
    """Follow an operation live (progress and story) until it stops.

    Exits 0 when it succeeded, 1 when it ended otherwise or stopped for a human.
    """
    from jobwarden.config.settings import get_settings
    from jobwarden.models.states import OperationState

    try:
        op_id = uuid.UUID(operation_id)
    except ValueError:
        raise _fail(f"not an operation id: {operation_id!r}") from None
    pace = interval
    url = get_settings().database_url
    if as_json:

        def records(row: Operation, story: list[str], new: list[ChainedEvent]) -> None:
            for ev in new:
                output.emit_json(event_record(ev))

        row = follow(url, op_id, interval=pace, on_change=records)
    elif console.is_terminal:
        with Live(console=console, auto_refresh=False, transient=False) as live:

            def redraw(row: Operation, story: list[str], new: list[ChainedEvent]) -> None:
                live.update(view(row, story), refresh=True)

            row = follow(url, op_id, interval=pace, on_change=redraw)
    else:
        # Not a terminal (a pipe, a log): each new event once, as a line.

        def append(row: Operation, story: list[str], new: list[ChainedEvent]) -> None:
            for ev in new:
                console.print(dated_line(ev), markup=False, highlight=False)

        row = follow(url, op_id, interval=pace, on_change=append)
    code = WATCH_SUCCEEDED if row.state is OperationState.succeeded else WATCH_OTHERWISE
    if as_json:
        output.emit_json(
            {
                "stopped": row.state.value,
                "escalation_reason": row.escalation_reason,
                "escalation_detail": row.escalation_detail,
                "exit_code": code,
            }
        )
    else:
        reason = (
            f" ({row.escalation_reason}: {row.escalation_detail})" if row.escalation_reason else ""
        )
        console.print(f"stopped: {row.state.value}{reason}", markup=False, highlight=False)
    raise typer.Exit(code)
