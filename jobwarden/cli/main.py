"""The `jobwarden` command: operate, inspect and demo. Every flag has a JOBWARDEN_ twin."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from jobwarden.cli import output
from jobwarden.cli.app import CliTyper
from jobwarden.cli.follow_ups import family_lines, follow_up_command
from jobwarden.cli.history import archive_command, partitions_command
from jobwarden.cli.identity import Approver, BreakGlass, TokenFile, decision_author, submitter
from jobwarden.cli.keys import keys_app
from jobwarden.cli.pauses import breaker_app, pause_app, pauses_command, resume_command
from jobwarden.cli.providers import contract_versions, migrate_command, running_report
from jobwarden.cli.receipts import receipt_command
from jobwarden.cli.result import result_command
from jobwarden.cli.schedules import schedules_app
from jobwarden.cli.serve import serve_api, tenants_app, tokens_app
from jobwarden.cli.watch import (
    dated_line,
    event_record,
    intake_record,
    list_command,
    show_lines,
    show_record,
    watch_command,
)
from jobwarden.config.settings import get_settings
from jobwarden.models.errors import JobwardenError

if TYPE_CHECKING:
    from jobwarden.models.history.chain import ChainedEvent, StoredEvent
    from jobwarden.models.history.verification import ChainProblem
    from jobwarden.models.operation import Operation

EXIT_CODES: dict[int, str] = {
    0: "done (submit: created, replayed or duplicate_event; watch: the operation succeeded)",
    1: "a check found a problem or the thing named is not there: verify found an altered or "
    "missing event, receipt verify a receipt that does not verify, a check an invalid "
    "file, keys check planted keys, watch an end other "
    "than succeeded or a stop for a human; no such operation, token or schedule",
    2: "a mistake in the command line, a JOBWARDEN_ setting or a decision, named in one "
    "line on stderr (nothing was changed)",
    3: "submit: conflict, the idempotency key was used for a different request (nothing "
    "was touched); follow-up: the same instruction with another command",
    4: "submit, follow-up: in progress, the key's first request is still being recorded: "
    "retry later",
}
"""The exit codes of every `jobwarden` command, stable for scripts (issue 36, point 7).

The codes keep their meaning across releases; `jobwarden --help` prints this table, and
the reference docs are generated from it.
"""

SUBMIT_EXIT_CODES = {"conflict": 3, "in_progress": 4}


def exit_codes_epilog() -> str:
    """The exit code table as the help epilog prints it."""
    # \b keeps click from re-wrapping the block into one paragraph.
    return "\b\nExit codes:\n" + "\n".join(
        f"  {code}  {meaning}" for code, meaning in EXIT_CODES.items()
    )


app = CliTyper(
    add_completion=False,
    no_args_is_help=True,
    help="Drive long-running jobs at external HTTP APIs, safely.",
    epilog=exit_codes_epilog(),
)
providers_app = CliTyper(no_args_is_help=True, help="Provider contracts.")
db_app = CliTyper(no_args_is_help=True, help="The Postgres schema.")
app.add_typer(providers_app, name="providers")
app.add_typer(db_app, name="db")
app.add_typer(tokens_app, name="tokens")
app.add_typer(tenants_app, name="tenants")
app.add_typer(schedules_app, name="schedules")
app.add_typer(keys_app, name="keys")
app.add_typer(pause_app, name="pause")
app.add_typer(breaker_app, name="breaker")
app.command("resume")(resume_command)
app.command("pauses")(pauses_command)
providers_app.command("migrate")(migrate_command)
app.command("list")(list_command)
app.command("watch")(watch_command)
app.command("result")(result_command)
app.command("archive")(archive_command)
app.command("partitions")(partitions_command)
app.command("receipt")(receipt_command)
app.command("follow-up")(follow_up_command)
console = Console(soft_wrap=True)
# soft_wrap: an error is one line whatever the terminal width (scripts grep for it).
err = Console(stderr=True, soft_wrap=True)


def _print_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        console.print(f"jobwarden {version('jobwarden')}")
        raise typer.Exit(0)


@app.callback()
def _load_settings(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="Print the version."
        ),
    ] = False,
) -> None:
    """Read JOBWARDEN_* once, up front: a bad value stops every command with one clear error."""
    get_settings()


@providers_app.command("check")
def providers_check(
    directory: Annotated[
        Path | None,
        typer.Option(
            "--dir", envvar="JOBWARDEN_PROVIDERS_DIR", help="Directory of provider contracts."
        ),
    ] = None,
    running: Annotated[
        bool,
        typer.Option(
            help="Also report which running operations use which contract version.",
            envvar="JOBWARDEN_CHECK_RUNNING",
        ),
    ] = True,
) -> None:
    """Validate every contract file; exit 1 naming file and field on the first problem.

    Each valid contract is shown with its digest (what new operations pin); then, per
    provider and version, how many operations not yet ended run under it.
    """
    from jobwarden.models.contracts.loader import check_contracts
    from jobwarden.models.contracts.pins import short_digest

    path = directory or get_settings().providers_dir
    contracts, errors = check_contracts(path)
    current = contract_versions(contracts)
    for name in sorted(contracts):
        digest = short_digest(current[name])
        console.print(f"ok      {name}  ({contracts[name].source_file})  contract {digest}")
    for error in errors:
        err.print(f"invalid {error}", highlight=False)
    if errors:
        raise typer.Exit(1)
    if running:
        running_report(current, get_settings().database_url)


@providers_app.command("schema")
def providers_schema() -> None:
    """Print the JSON Schema of contract files (for Taplo / Even Better TOML, and CI)."""
    from jobwarden.models.contracts.loader import contract_json_schema

    # Plain print: rich would wrap long lines and colour the JSON, and editors read it as is.
    print(json.dumps(contract_json_schema(), indent=2, sort_keys=True))


@db_app.command("upgrade")
def db_upgrade(
    create: Annotated[
        bool,
        typer.Option(help="Create the database first if missing.", envvar="JOBWARDEN_DB_CREATE"),
    ] = True,
) -> None:
    """Apply migrations to JOBWARDEN_DATABASE_URL."""
    from jobwarden.models.persistence.migrate import ensure_database, upgrade

    url = get_settings().database_url
    if create:
        ensure_database(url)
    upgrade(url)
    console.print("database is at head")


def _operation_id(argument: str) -> uuid.UUID:
    """The argument as an operation id; one line and exit 2 when it is not one."""
    try:
        return uuid.UUID(argument)
    except ValueError:
        _say(f"not an operation id: {argument!r}")
        raise typer.Exit(2) from None


def _say(line: str) -> None:
    # One line on stderr, never wrapped and never read as markup (it may quote provider text).
    err.print(line, markup=False, highlight=False, soft_wrap=True)


def _row_and_events(operation_id: str) -> tuple[Operation, list[ChainedEvent]]:
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import transaction

    op_id = _operation_id(operation_id)
    with transaction(get_settings().database_url) as session:
        row = store.load(session, op_id)
        if row is None:
            _say(f"no operation {operation_id}")
            raise typer.Exit(1)
        live = store.events_for(session, op_id)
    if live and live[0].seq == 1:
        return row, live
    # Its history (or its start) was archived: read back from its segment.
    from jobwarden.models.history.archive import as_chained

    _, archived, problems = _archived(op_id)
    for line in problems:
        _say(line)
    kept = [as_chained(operation_id, ev) for ev in archived]
    return row, [*(ev for ev in kept if ev is not None), *live]


@app.command()
def show(
    operation_id: str,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="JOBWARDEN_SHOW_JSON", help="One JSON object.")
    ] = False,
) -> None:
    """State, remote job, counters, deadlines (and whether each still applies), escalation
    reason, fingerprint, the create as it will leave, the command, and the options offered."""
    from datetime import UTC, datetime

    from jobwarden.cli.deadlines import deadline_lines, deadline_views
    from jobwarden.models.states import OFFERS_OPTIONS, OperationState
    from jobwarden.observability.story import summary_lines
    from jobwarden.tasks.follow_ups import family
    from jobwarden.tasks.humans.interventions import escalation_options
    from jobwarden.tasks.runtime import current

    row, _ = _row_and_events(operation_id)
    deadlines = deadline_views(row, datetime.now(UTC))
    # The family (issue 40): what it follows, its follow-ups, the amounts so far.
    kin = family(current(), row)
    # A stopped operation shows what a human may do next, as `jobwarden decide` takes it.
    offered = (
        escalation_options(operation_id) if OperationState(row.state) in OFFERS_OPTIONS else []
    )
    if as_json:
        output.emit_json(show_record(row, deadlines, offered) | kin)
        return
    lines = [*summary_lines(row, deadline_lines(deadlines)), *show_lines(row), *family_lines(kin)]
    for line in lines:
        console.print(line, highlight=False, markup=False)
    for option in offered:
        console.print(
            f"option           {option.kind.value}: {option.label}", highlight=False, markup=False
        )


@app.command()
def history(
    operation_id: str,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            envvar="JOBWARDEN_HISTORY_JSON",
            help="One JSON object: the events and the intake attempts.",
        ),
    ] = False,
) -> None:
    """The operation's story, one line per event: date and time (UTC), actor, what happened;
    then each submission attempt that named it (the intake log)."""
    from jobwarden.cli.serve import intake_entries, intake_line

    _, events = _row_and_events(operation_id)
    attempts = intake_entries(_operation_id(operation_id))
    if as_json:
        output.emit_json(
            {
                "operation_id": str(_operation_id(operation_id)),
                "events": [event_record(ev) for ev in events],
                "intake": [intake_record(a) for a in attempts],
            }
        )
        return
    for ev in events:
        console.print(dated_line(ev), highlight=False, markup=False)
    # Who asked, through which door, and what each attempt was answered (the intake log).
    for attempt in attempts:
        console.print(intake_line(attempt), highlight=False, markup=False)


def _problem_line(p: ChainProblem) -> str:
    return f"event {p.seq}: {p.problem}" if p.seq else p.problem


@app.command()
def verify(
    operation_id: Annotated[
        str | None, typer.Argument(help="The operation to verify.", show_default=False)
    ] = None,
    export_heads: Annotated[
        bool,
        typer.Option(
            "--export-heads",
            envvar="JOBWARDEN_VERIFY_EXPORT_HEADS",
            help="Print every operation's id, event count and head hash, one per line.",
        ),
    ] = False,
    heads: Annotated[
        Path | None,
        typer.Option(
            "--heads",
            envvar="JOBWARDEN_VERIFY_HEADS",
            help="Verify every operation named in a file --export-heads wrote earlier.",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            envvar="JOBWARDEN_VERIFY_JSON",
            help="One JSON object: verified or not, and every problem found.",
        ),
    ] = False,
) -> None:
    """Prove an operation's history; exit 1 naming whatever was altered or removed.

    Checks every event hash, that the history is not empty, the operations row
    against the digest its head event recorded, and the result bytes against the
    sha256 the chain recorded. It cannot see a consistent rewrite of a whole chain
    with its head by someone with write access to the database: keep the output of
    --export-heads elsewhere and compare with --heads FILE, which names every
    operation whose exported head is no longer in its history (or that is gone).
    """
    if sum((operation_id is not None, export_heads, heads is not None)) != 1:
        _say("verify takes one of: an operation id, --export-heads, --heads FILE")
        raise typer.Exit(2)
    if export_heads:
        _export_heads()
    elif heads is not None:
        _compare_heads(heads, as_json=as_json)
    else:
        assert operation_id is not None
        _verify_one(operation_id, as_json=as_json)


def _archived(op_id: uuid.UUID) -> tuple[bool, list[StoredEvent], list[str]]:
    """(archived?, the archived events the live table lacks, problems with the segment)."""
    from jobwarden.tasks.history_archive import archived_events

    settings = get_settings()
    done, events, problems = archived_events(settings.database_url, settings.result_store, op_id)
    return done is not None and (bool(events) or bool(problems)), events, problems


def _verified(lines: list[str], record: dict[str, object], *, as_json: bool) -> None:
    """Report a verification: problems on stderr and exit 1, or ``record`` as JSON."""
    if as_json:
        output.emit_json({**record, "verified": not lines, "problems": lines})
    else:
        for line in lines:
            _say(line)
    if lines:
        raise typer.Exit(1)


def _verify_one(operation_id: str, *, as_json: bool = False) -> None:
    from jobwarden.models.history.verification import row_bound
    from jobwarden.models.persistence import history_store, result_rows, store
    from jobwarden.models.persistence.db import transaction

    op_id = _operation_id(operation_id)
    with transaction(get_settings().database_url) as session:
        archive_row = history_store.archived(session, op_id)
    from_archive, archived, segment_problems = (
        _archived(op_id) if archive_row is not None else (False, [], [])
    )
    if segment_problems:
        # The segment is gone or altered: nothing of the archived part can be proven.
        _verified(segment_problems, {"operation_id": str(op_id)}, as_json=as_json)
    with transaction(get_settings().database_url) as session:
        problems = store.verify(session, op_id, archived=archived)
        events = [*archived, *store.stored_events(session, op_id)]
        result = result_rows.result_of(session, op_id)
    lines = [
        _problem_line(p) if p.problem != "no such operation" else f"no operation {op_id}"
        for p in problems
    ]
    if result is not None and result.location is not None:
        # The chain binds the digest; the object itself is read back, streamed, to prove
        # it is still what was stored (a deleted or replaced object is named).
        from jobwarden.cli.result import object_problems

        lines += object_problems(result.location, result.sha256, result.size_bytes)
    _verified(
        lines,
        {
            "operation_id": str(op_id),
            "events": len(events),
            "from_archive": from_archive,
            "row_bound": row_bound(events),
        },
        as_json=as_json,
    )
    if as_json:
        return
    note = (
        "" if row_bound(events) else " (the row is not bound: its last write predates row digests)"
    )
    source = "from archive" if from_archive else ""
    console.print(
        f"chain verified{' ' + source if source else ''}: {len(events)} events{note}",
        highlight=False,
        markup=False,
    )


def _export_heads() -> None:
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import transaction

    with transaction(get_settings().database_url) as session:
        for op_id, count, head in store.heads(session):
            typer.echo(f"{op_id} {count} {head}")


def _read_heads(path: Path) -> list[tuple[uuid.UUID, int, str]]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        _say(f"cannot read {path}: {exc}")
        raise typer.Exit(2) from None
    anchors: list[tuple[uuid.UUID, int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split()
        try:
            op_id, count, head = uuid.UUID(parts[0]), int(parts[1]), parts[2]
            if len(parts) != 3 or count < 0 or len(head) != 64:
                raise ValueError(line)
        except (ValueError, IndexError):
            _say(f"{path}:{number}: not a line --export-heads writes (id, event count, hash)")
            raise typer.Exit(2) from None
        anchors.append((op_id, count, head))
    return anchors


def _compare_heads(path: Path, *, as_json: bool = False) -> None:
    from jobwarden.models.persistence import history_store, store
    from jobwarden.models.persistence.db import transaction

    anchors = _read_heads(path)
    failed = 0
    found: list[str] = []
    for op_id, count, head in anchors:
        with transaction(get_settings().database_url) as session:
            archived_row = history_store.archived(session, op_id)
        _, archived, segment_problems = (
            _archived(op_id) if archived_row is not None else (False, [], [])
        )
        if segment_problems:
            failed += 1
            found += [f"operation {op_id}: {line}" for line in segment_problems]
            continue
        with transaction(get_settings().database_url) as session:
            problems = store.check_head(session, op_id, count, head, archived=archived)
        failed += bool(problems)
        found += [f"operation {op_id}: {_problem_line(p)}" for p in problems]
    if failed:
        found.append(f"{failed} of {len(anchors)} operations do not match their exported heads")
    _verified(found, {"operations": len(anchors), "failed": failed}, as_json=as_json)
    if as_json:
        return
    console.print(f"heads verified: {len(anchors)} operations", highlight=False)


def _seconds_or_time(value: str | None) -> float | str | None:
    """A number is seconds from now; anything else goes to intake's rule as a time."""
    try:
        return float(value) if value is not None else None
    except ValueError:
        return value


@app.command()
def submit(
    provider: str,
    command: Annotated[str, typer.Argument(help="The command as a JSON object.")],
    key: Annotated[
        str, typer.Option("--key", help="Idempotency key.", envvar="JOBWARDEN_IDEMPOTENCY_KEY")
    ],
    tenant: Annotated[
        str | None, typer.Option(envvar="JOBWARDEN_TENANT", help="default: the token's, or default")
    ] = None,
    requested_by: Annotated[
        str | None,
        typer.Option(envvar="JOBWARDEN_REQUESTED_BY", help="without a token: a typed submitter"),
    ] = None,
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    source_event_id: Annotated[
        str | None,
        typer.Option(
            help="Business identity: one operation per event.", envvar="JOBWARDEN_SOURCE_EVENT_ID"
        ),
    ] = None,
    max_status_requests: Annotated[
        int | None,
        typer.Option(
            help="Status request budget (default: the contract's).",
            envvar="JOBWARDEN_MAX_STATUS_REQUESTS",
        ),
    ] = None,
    max_transport_failures: Annotated[
        int | None,
        typer.Option(
            help="Failed reads allowed (default: the contract's).",
            envvar="JOBWARDEN_MAX_TRANSPORT_FAILURES",
        ),
    ] = None,
    result_deadline_seconds: Annotated[
        float | None,
        typer.Option(
            help="Result deadline from submission (default: the contract's).",
            envvar="JOBWARDEN_RESULT_DEADLINE_SECONDS",
        ),
    ] = None,
    cancel_deadline_seconds: Annotated[
        float | None,
        typer.Option(
            help="How long a cancel may take to be confirmed.",
            envvar="JOBWARDEN_CANCEL_DEADLINE_SECONDS",
        ),
    ] = None,
    concurrency_key: Annotated[
        str | None,
        typer.Option(
            help="Run at most the contract's [concurrency] limit (default 1) of this key at once.",
            envvar="JOBWARDEN_CONCURRENCY_KEY",
        ),
    ] = None,
    business_deadline: Annotated[
        str | None,
        typer.Option(
            help="When the business stops wanting the work: an ISO 8601 time with its UTC "
            "offset, or seconds from now.",
            envvar="JOBWARDEN_BUSINESS_DEADLINE",
        ),
    ] = None,
    priority: Annotated[
        int | None,
        typer.Option(
            help="-10 to 10 (default 0): among the tenant's requests waiting for the "
            "provider's rate limit, a higher priority goes first.",
            envvar="JOBWARDEN_PRIORITY",
        ),
    ] = None,
) -> None:
    """Submit an operation; prints created / replayed / in_progress / conflict / duplicate_event."""
    from jobwarden.models.intake.submission import SubmissionRequest
    from jobwarden.tasks.intake import submit_request

    parsed = output.command_argument(command, err)
    who = submitter(token_file=token_file, glass=glass, tenant=tenant, typed=requested_by)
    wanted = SubmissionRequest(
        tenant=who.tenant,
        requested_by=who.requested_by,
        provider=provider,
        command=parsed,
        idempotency_key=key,
        source_event_id=source_event_id,
        max_status_requests=max_status_requests,
        max_transport_failures=max_transport_failures,
        result_deadline_seconds=result_deadline_seconds,
        cancel_deadline_seconds=cancel_deadline_seconds,
        concurrency_key=concurrency_key,
        business_deadline=_seconds_or_time(business_deadline),
        priority=priority,
    )
    # The CLI has always logged as the Python door (it is the Python call from a shell).
    result = submit_request(wanted, door="python", caller=who.caller)
    console.print_json(json.dumps(result.as_dict()))
    for warning in result.warnings:  # one line each, beside the JSON a script reads
        err.print(f"warning: {warning.detail}", markup=False, highlight=False, soft_wrap=True)
    # Exit codes a script can branch on: 0 recorded (created, replayed, duplicate_event),
    # 3 conflict (same key, different request: nothing was touched), 4 in progress.
    raise typer.Exit(SUBMIT_EXIT_CODES.get(result.outcome.value, 0))


@app.command()
def cancel(
    operation_id: str,
    reason: Annotated[
        str, typer.Option(envvar="JOBWARDEN_CANCEL_REASON")
    ] = "requested from the CLI",
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    requested_by: Annotated[
        str | None, typer.Option(envvar="JOBWARDEN_REQUESTED_BY", hidden=True)
    ] = None,
    send_during_pause: Annotated[
        bool,
        typer.Option(
            "--send-during-pause",
            envvar="JOBWARDEN_SEND_DURING_PAUSE",
            help="If a pause holds it, send this cancel now rather than on resume.",
        ),
    ] = False,
) -> None:
    """Record a cancel request; a worker sends the one cancel and waits for confirmation.
    Acts as the token's principal (JOBWARDEN_TOKEN, --token-file) or --break-glass."""
    from jobwarden.tasks.humans.interventions import request_cancel

    who = decision_author(
        operation_id,
        scope="cancel",
        token_file=token_file,
        glass=glass,
        typed=("--requested-by", requested_by),
    )
    console.print(request_cancel(operation_id, who, reason, send_during_pause=send_during_pause))


@app.command()
def options(
    operation_id: str,
    as_json: Annotated[
        bool, typer.Option("--json", envvar="JOBWARDEN_OPTIONS_JSON", help="One JSON array.")
    ] = False,
) -> None:
    """The bounded options a human may pick for a stopped operation (`none` when there are
    none: it is running, or ended without any)."""
    from jobwarden.tasks.humans.interventions import escalation_options

    offered = escalation_options(operation_id)
    if as_json:
        output.emit_json([{"option": o.kind.value, "label": o.label} for o in offered])
        return
    output.table(console, ("OPTION", "WHAT IT DOES"), [(o.kind.value, o.label) for o in offered])


@app.command()
def decide(
    operation_id: str,
    option: str,
    note: Annotated[str, typer.Option(envvar="JOBWARDEN_DECISION_NOTE")] = "",
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    approver: Approver = None,
) -> None:
    """Pick one of the offered options (see `jobwarden options OP`), as the token's
    principal (JOBWARDEN_TOKEN, --token-file) or --break-glass REASON."""
    from jobwarden.tasks.humans.interventions import decide_escalation

    who = decision_author(
        operation_id,
        scope="decide",
        token_file=token_file,
        glass=glass,
        typed=("--approver", approver),
    )
    decided = decide_escalation(operation_id, option, who, note, door="python")
    console.print(decided.state, highlight=False)
    if decided.resubmitted_as is not None:
        # The replacement is a new operation: name it so the next command can follow it.
        console.print(
            f"resubmitted as {decided.resubmitted_as} ({decided.resubmitted_state})",
            highlight=False,
        )
    for warning in decided.warnings:
        err.print(f"warning: {warning.detail}", markup=False, highlight=False, soft_wrap=True)


@app.command()
def approve(
    operation_id: str,
    fingerprint: Annotated[
        str,
        typer.Option(help="The fingerprint you reviewed.", envvar="JOBWARDEN_APPROVAL_FINGERPRINT"),
    ],
    valid_for: Annotated[
        float,
        typer.Option(
            help="Seconds the approval stays valid.", envvar="JOBWARDEN_APPROVAL_VALID_FOR"
        ),
    ] = 3600,
    request_digest: Annotated[
        str | None,
        typer.Option(
            help="The request digest you reviewed (`jobwarden show`): refused if the create "
            "would now leave differently.",
            envvar="JOBWARDEN_APPROVAL_REQUEST_DIGEST",
        ),
    ] = None,
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    approver: Approver = None,
) -> None:
    """Approve an operation awaiting approval; bound to its fingerprint and to the create
    as it will leave (its request digest). Acts as the token's principal (JOBWARDEN_TOKEN,
    --token-file); --break-glass REASON approves without one, recorded as such and never
    counted toward a two-person rule."""
    from jobwarden.tasks.humans.interventions import approve as approve_operation

    who = decision_author(
        operation_id,
        scope="approve",
        token_file=token_file,
        glass=glass,
        typed=("--approver", approver),
    )
    console.print(
        approve_operation(operation_id, fingerprint, who, valid_for, request_digest=request_digest)
    )


@app.command()
def sandbox(
    host: Annotated[str, typer.Option(envvar="JOBWARDEN_SANDBOX_HOST")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="JOBWARDEN_SANDBOX_PORT")] = 8765,
    token: Annotated[str | None, typer.Option(envvar="JOBWARDEN_SANDBOX_TOKEN")] = None,
    webhook_secret: Annotated[
        str | None,
        typer.Option(
            envvar="JOBWARDEN_SANDBOX_WEBHOOK_SECRET",
            help="signs the webhooks jobs ask for (whsec_<base64> for Standard Webhooks)",
        ),
    ] = None,
) -> None:
    """Run the sandbox provider (the simulated async job API) in the foreground."""
    import errno

    from jobwarden.demo.sandbox.server import serve
    from jobwarden.models.errors import SettingsError

    try:
        serve(host, port, token, webhook_secret)
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise SettingsError(
            f"sandbox port {host}:{port} is in use (--port / JOBWARDEN_SANDBOX_PORT)"
        ) from None


@app.command()
def api(
    host: Annotated[str | None, typer.Option(envvar="JOBWARDEN_API_HOST")] = None,
    port: Annotated[int | None, typer.Option(envvar="JOBWARDEN_API_PORT")] = None,
    workers: Annotated[int | None, typer.Option(envvar="JOBWARDEN_API_WORKERS")] = None,
) -> None:
    """Serve the HTTP API (OpenAPI at /openapi.json, docs at /docs) with uvicorn."""
    from jobwarden.cli.extras import require

    require("jobwarden api", "api")
    serve_api(host, port, workers)


@app.command()
def mcp(
    transport: Annotated[
        str | None, typer.Option(envvar="JOBWARDEN_MCP_TRANSPORT", help="stdio or http.")
    ] = None,
    host: Annotated[str | None, typer.Option(envvar="JOBWARDEN_MCP_HOST")] = None,
    port: Annotated[int | None, typer.Option(envvar="JOBWARDEN_MCP_PORT")] = None,
    token_env: Annotated[
        str | None,
        typer.Option(
            envvar="JOBWARDEN_MCP_TOKEN_ENV",
            help="The variable holding the stdio server's API token (JOBWARDEN_MCP_TOKEN).",
        ),
    ] = None,
) -> None:
    """Serve the MCP tools for agents: stdio (one token) or streamable HTTP at /mcp (Bearer)."""
    from jobwarden.cli.extras import require

    require("jobwarden mcp", "mcp")
    from jobwarden.mcp.server import serve

    serve(get_settings(), transport, host=host, port=port, token_env=token_env)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def flower(ctx: typer.Context) -> None:
    """Run Flower, Celery's dashboard, on the configured broker (the 'flower' extra): on
    127.0.0.1 unless --address says otherwise; every argument is Flower's."""
    from jobwarden.cli.extras import require

    # Without the extra, `celery ... flower` says only "No such command 'flower'".
    require("jobwarden flower", "flower")
    celery = [sys.executable, "-m", "celery", "-A", "jobwarden.config.celery_app", "flower"]
    # Flower takes the last of a repeated option: an --address given here wins.
    os.execv(sys.executable, [*celery, "--address=127.0.0.1", *ctx.args])


@app.command()
def demo() -> None:
    """Run the full pipeline against the sandbox: worker, beat, five scenarios, their stories."""
    from jobwarden.demo.run import run_demo

    raise typer.Exit(run_demo(console))


def main() -> None:
    try:
        app()
    except JobwardenError as exc:
        err.print(f"error: {exc}", highlight=False, markup=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
