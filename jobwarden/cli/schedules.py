"""`jobwarden schedules …`: check and sync the files, list, pause, resume, trigger, backfill.

Imported by jobwarden/cli/main.py at start-up, so only typer is imported at module level.
Every change is recorded in schedule_actions with who asked: the principal of the CLI's
token (JOBWARDEN_TOKEN, --token-file), of the schedule's tenant, or --break-glass REASON
(jobwarden/cli/identity.py). The principal who last declared a schedule is its author:
what it fires is submitted on their behalf, and they cannot approve it.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from jobwarden.cli import output
from jobwarden.cli.app import CliTyper
from jobwarden.cli.identity import BreakGlass, By, TokenFile, cli_author

if TYPE_CHECKING:
    from jobwarden.models.schedules.files import DeclaredSchedule

schedules_app = CliTyper(no_args_is_help=True, help="Schedules fired by beat.")
console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)

Tenant = Annotated[str, typer.Option(envvar="JOBWARDEN_TENANT", help="The schedule's tenant.")]
Directory = Annotated[
    Path | None,
    typer.Option("--dir", envvar="JOBWARDEN_SCHEDULES_DIR", help="Folder of schedule files."),
]


def _fail(line: str) -> typer.Exit:
    err.print(line, markup=False, highlight=False)
    return typer.Exit(2)


def _declared(directory: Path | None) -> tuple[list[DeclaredSchedule], list[str]]:
    from jobwarden.config.settings import get_settings
    from jobwarden.models.contracts.loader import check_contracts
    from jobwarden.models.intake.submission import SubmissionRequest
    from jobwarden.models.schedules.files import check_schedules
    from jobwarden.models.schedules.slots import EPOCH, ScheduleSpec, slot_key
    from jobwarden.tasks.intake import LIMITS
    from jobwarden.tasks.runtime import utcnow

    settings = get_settings()
    if directory is not None and not directory.exists():
        # Named on purpose (--dir): a typo must not read as "no schedules, all fine".
        return [], [f"{directory}: no such directory"]
    contracts, _ = check_contracts(settings.providers_dir)

    def submission(spec: ScheduleSpec, command: Any, name: str) -> None:
        SubmissionRequest(
            tenant=spec.tenant,
            requested_by="beat",
            provider=spec.provider,
            command=command,
            idempotency_key=slot_key(name, EPOCH),
            concurrency_key=spec.concurrency_key,
            priority=spec.priority,
        ).check(limits=LIMITS, providers=contracts, derived_key=True)

    return check_schedules(
        directory or settings.schedules_dir,
        key_limit=LIMITS.idempotency_key,
        submission=submission,
        now=utcnow(),
    )


@schedules_app.command("check")
def schedules_check(directory: Directory = None) -> None:
    """Validate every schedule file; exit 1 naming file and field for each problem."""
    found, errors = _declared(directory)
    for d in found:
        console.print(f"ok      {d.spec.tenant}/{d.spec.name}  ({d.source})", highlight=False)
    for error in errors:
        err.print(f"invalid {error}", markup=False, highlight=False)
    if errors:
        raise typer.Exit(1)


def _who(tenant: str | None, token_file: Path | None, glass: str | None, by: str | None) -> str:
    """The actor of a schedule change: the token's principal (of ``tenant``) or break-glass."""
    author = cli_author(
        scope="submit", token_file=token_file, glass=glass, typed=("--by", by), tenant=tenant
    )
    return author.actor


@schedules_app.command("sync")
def schedules_sync(
    directory: Directory = None,
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    by: By = None,
) -> None:
    """Declare the files' schedules in Postgres (created / changed / unchanged); nothing is
    written when any file has a problem. Schedules are never deleted by a sync. The
    token's principal (or break-glass) becomes the author of what it creates or changes."""
    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence import schedule_store
    from jobwarden.models.persistence.db import transaction
    from jobwarden.tasks.runtime import utcnow

    found, errors = _declared(directory)
    for error in errors:
        err.print(f"invalid {error}", markup=False, highlight=False)
    if errors:
        raise typer.Exit(1)
    tenants = {d.spec.tenant for d in found}
    # A token declares for its own tenant only, as PUT /v1/schedules/<name> does.
    by = _who(tenants.pop() if len(tenants) == 1 else None, token_file, glass, by)
    if tenants and not by.startswith("break-glass:"):
        raise _fail("error: tenant: the files declare several tenants; sync each with its token")
    now = utcnow()
    with transaction(get_settings().database_url) as session:
        for d in found:
            outcome = schedule_store.declare(session, d.spec, source=d.source, actor=by, now=now)
            console.print(f"{outcome:<9} {d.spec.tenant}/{d.spec.name}", highlight=False)


SCHEDULE_COLUMNS = (
    "SCHEDULE",
    "STATUS",
    "TIMING",
    "OVERLAP",
    "NEXT SLOT",
    "LAST SLOT",
    "LAST OPERATION",
    "MISSED",
)


def _when(at: datetime | None) -> str:
    return at.isoformat(timespec="seconds") if at else "-"


@schedules_app.command("list")
def schedules_list(
    tenant: Annotated[
        str | None, typer.Option(envvar="JOBWARDEN_TENANT", help="Only this tenant.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", envvar="JOBWARDEN_SCHEDULES_JSON")] = False,
) -> None:
    """Each schedule: status, next slot, last slot with its operation and state, missed."""
    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence import schedule_store
    from jobwarden.models.persistence.db import snapshot

    with snapshot(get_settings().database_url) as session:
        views = schedule_store.views(session, tenant=tenant)
    if as_json:
        output.emit_json([v.as_dict() for v in views])
        return
    output.table(
        console,
        (
            "SCHEDULE",
            "STATUS",
            "TIMING",
            "OVERLAP",
            "NEXT SLOT",
            "LAST SLOT",
            "LAST OPERATION",
            "MISSED",
        ),
        [
            (
                f"{v.tenant}/{v.name}",
                v.status,
                f"{v.timing} ({v.timezone})",
                v.overlap,
                _when(v.next_slot_at),
                f"{_when(v.last_slot_at)} {v.last_state}" if v.last_slot_at else None,
                f"{v.last_operation_id} {v.last_operation_state}" if v.last_operation_id else None,
                v.missed,
            )
            for v in views
        ],
    )


def _set_status(name: str, tenant: str, by: str, *, paused: bool) -> None:
    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence import schedule_store
    from jobwarden.models.persistence.db import transaction
    from jobwarden.models.schedules.slots import ScheduleStatus
    from jobwarden.tasks.runtime import utcnow

    status = ScheduleStatus.paused if paused else ScheduleStatus.active
    with transaction(get_settings().database_url) as session:
        row = schedule_store.find(session, tenant, name, lock=True)
        if row is None:
            raise _fail(f"error: no schedule {name!r} for tenant {tenant!r}")
        changed = schedule_store.set_status(session, row, status, actor=by, now=utcnow())
    console.print(f"{tenant}/{name} {status.value}" + ("" if changed else " (already)"))


@schedules_app.command("pause")
def schedules_pause(
    name: str,
    tenant: Tenant = "default",
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    by: By = None,
) -> None:
    """Stop firing; slots that come due while paused are missed when it resumes (if past
    the catch-up window)."""
    _set_status(name, tenant, _who(tenant, token_file, glass, by), paused=True)


@schedules_app.command("resume")
def schedules_resume(
    name: str,
    tenant: Tenant = "default",
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    by: By = None,
) -> None:
    """Fire again from the first undecided slot, within the catch-up window."""
    _set_status(name, tenant, _who(tenant, token_file, glass, by), paused=False)


@schedules_app.command("trigger")
def schedules_trigger(
    name: str,
    tenant: Tenant = "default",
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    by: By = None,
) -> None:
    """Fire one slot now, whatever the overlap policy; prints its operation id."""
    from jobwarden.models.schedules.slots import ScheduleError
    from jobwarden.tasks.runtime import current
    from jobwarden.tasks.schedules import trigger

    actor = _who(tenant, token_file, glass, by)
    try:
        op = trigger(current(), tenant, name, actor=actor)
    except ScheduleError as exc:
        raise _fail(f"error: {exc}") from None
    if op is None:
        err.print(
            f"the slot's submission was refused or is still in progress: see "
            f"`jobwarden schedules list --tenant {tenant}`",
            markup=False,
            highlight=False,
        )
        raise typer.Exit(1)
    console.print(json.dumps({"operation_id": op}))


def _time(field: str, value: str) -> datetime:
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        raise _fail(f"error: {field}: not an RFC 3339 time: {value!r}") from None
    if at.tzinfo is None:
        raise _fail(f"error: {field}: give the UTC offset (2026-01-01T00:00:00Z)")
    return at


@schedules_app.command("backfill")
def schedules_backfill(
    name: str,
    start: Annotated[
        str, typer.Option("--from", envvar="JOBWARDEN_BACKFILL_FROM", help="First time (RFC 3339).")
    ],
    end: Annotated[
        str, typer.Option("--to", envvar="JOBWARDEN_BACKFILL_TO", help="Last time (RFC 3339).")
    ],
    tenant: Tenant = "default",
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    by: By = None,
) -> None:
    """Fire every slot in [--from, --to] not fired yet (missed and skipped ones too).
    Idempotent: run twice, the second run claims nothing and creates nothing."""
    from jobwarden.models.schedules.slots import ScheduleError
    from jobwarden.tasks.runtime import current
    from jobwarden.tasks.schedules import backfill

    actor = _who(tenant, token_file, glass, by)
    try:
        done = backfill(
            current(),
            tenant,
            name,
            start=_time("--from", start),
            end=_time("--to", end),
            actor=actor,
        )
    except ScheduleError as exc:
        raise _fail(f"error: {exc}") from None
    console.print(
        json.dumps(
            {
                "claimed": len(done.claimed),
                "already_decided": done.already,
                "operations": done.operations,
            }
        )
    )
