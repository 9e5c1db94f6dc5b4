"""The `jobwarden` command: operate, inspect and demo. Every flag has a JOBWARDEN_ twin."""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from jobwarden.config.settings import get_settings
from jobwarden.models.errors import JobwardenError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Drive long-running jobs at external HTTP APIs, safely.",
)
providers_app = typer.Typer(no_args_is_help=True, help="Provider contracts.")
db_app = typer.Typer(no_args_is_help=True, help="The Postgres schema.")
app.add_typer(providers_app, name="providers")
app.add_typer(db_app, name="db")
console = Console(soft_wrap=True)
err = Console(stderr=True)


@app.callback()
def _load_settings() -> None:
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
) -> None:
    """Validate every contract file; exit 1 naming file and field on the first problem."""
    from jobwarden.models.contract_loader import check_contracts

    path = directory or get_settings().providers_dir
    contracts, errors = check_contracts(path)
    for name in sorted(contracts):
        console.print(f"ok      {name}  ({contracts[name].source_file})")
    for error in errors:
        err.print(f"invalid {error}", highlight=False)
    if errors:
        raise typer.Exit(1)


@db_app.command("upgrade")
def db_upgrade(
    create: Annotated[
        bool,
        typer.Option(help="Create the database first if missing.", envvar="JOBWARDEN_DB_CREATE"),
    ] = True,
) -> None:
    """Apply migrations to JOBWARDEN_DATABASE_URL."""
    from jobwarden.models.migrate import ensure_database, upgrade

    url = get_settings().database_url
    if create:
        ensure_database(url)
    upgrade(url)
    console.print("database is at head")


def _row_and_events(operation_id: str):  # type: ignore[no-untyped-def]
    from jobwarden.models import store
    from jobwarden.models.db import transaction

    with transaction(get_settings().database_url) as session:
        op_id = uuid.UUID(operation_id)
        row = store.load(session, op_id)
        if row is None:
            err.print(f"no operation {operation_id}")
            raise typer.Exit(1)
        return row, store.events_for(session, op_id), store.verify(session, op_id)


@app.command()
def show(operation_id: str) -> None:
    """State, remote job, counters, deadlines and escalation reason."""
    from jobwarden.story import summary_lines

    row, _, _ = _row_and_events(operation_id)
    for line in summary_lines(row):
        console.print(line, highlight=False)
    from jobwarden.models.states import HUMAN_ONLY_SOURCES, OperationState
    from jobwarden.tasks.interventions import escalation_options

    if OperationState(row.state) in HUMAN_ONLY_SOURCES:
        # A stopped operation shows what a human may do next, as `jobwarden decide` takes it.
        for option in escalation_options(operation_id):
            console.print(f"option           {option.kind.value}: {option.label}", highlight=False)


@app.command()
def history(operation_id: str) -> None:
    """The operation's story, one line per event."""
    from jobwarden.story import event_line

    _, events, _ = _row_and_events(operation_id)
    for ev in events:
        console.print(event_line(ev), highlight=False)


@app.command()
def verify(operation_id: str) -> None:
    """Recompute the event hash chain; exit 1 if any event was altered or removed."""
    _, events, problems = _row_and_events(operation_id)
    if problems:
        for p in problems:
            err.print(f"event {p.seq}: {p.problem}")
        raise typer.Exit(1)
    console.print(f"chain verified: {len(events)} events")


@app.command()
def submit(
    provider: str,
    command: Annotated[str, typer.Argument(help="The command as a JSON object.")],
    key: Annotated[
        str, typer.Option("--key", help="Idempotency key.", envvar="JOBWARDEN_IDEMPOTENCY_KEY")
    ],
    tenant: Annotated[str, typer.Option(envvar="JOBWARDEN_TENANT")] = "default",
    requested_by: Annotated[str, typer.Option(envvar="JOBWARDEN_REQUESTED_BY")] = "cli",
) -> None:
    """Submit an operation; prints created / replayed / in_progress / conflict / duplicate_event."""
    from jobwarden.tasks.intake import submit_operation

    try:
        parsed = json.loads(command)
    except ValueError as exc:
        err.print(f"command is not JSON: {exc}")
        raise typer.Exit(2) from None
    result = submit_operation(
        tenant=tenant,
        provider=provider,
        idempotency_key=key,
        command=parsed,
        requested_by=requested_by,
    )
    console.print_json(json.dumps(result.as_dict()))


@app.command()
def cancel(
    operation_id: str,
    reason: Annotated[
        str, typer.Option(envvar="JOBWARDEN_CANCEL_REASON")
    ] = "requested from the CLI",
    requested_by: Annotated[str, typer.Option(envvar="JOBWARDEN_REQUESTED_BY")] = "cli",
) -> None:
    """Record a cancel request; a worker sends the one cancel and waits for confirmation."""
    from jobwarden.tasks.interventions import request_cancel

    console.print(request_cancel(operation_id, requested_by, reason))


@app.command()
def options(operation_id: str) -> None:
    """The bounded options a human may pick for a stopped operation."""
    from jobwarden.tasks.interventions import escalation_options

    for option in escalation_options(operation_id):
        console.print(f"{option.kind.value:<16} {option.label}", highlight=False)


@app.command()
def decide(
    operation_id: str,
    option: str,
    approver: Annotated[str, typer.Option(envvar="JOBWARDEN_APPROVER")],
    note: Annotated[str, typer.Option(envvar="JOBWARDEN_DECISION_NOTE")] = "",
) -> None:
    """Pick one of the offered options (see `jobwarden options OP`)."""
    from jobwarden.tasks.interventions import decide_escalation

    console.print(decide_escalation(operation_id, option, approver, note))


@app.command()
def approve(
    operation_id: str,
    fingerprint: Annotated[
        str,
        typer.Option(help="The fingerprint you reviewed.", envvar="JOBWARDEN_APPROVAL_FINGERPRINT"),
    ],
    approver: Annotated[str, typer.Option(envvar="JOBWARDEN_APPROVER")],
    valid_for: Annotated[
        float,
        typer.Option(
            help="Seconds the approval stays valid.", envvar="JOBWARDEN_APPROVAL_VALID_FOR"
        ),
    ] = 3600,
) -> None:
    """Approve an operation awaiting approval; bound to its fingerprint."""
    from jobwarden.tasks.interventions import approve as approve_operation

    console.print(approve_operation(operation_id, fingerprint, approver, valid_for))


@app.command()
def sandbox(
    host: Annotated[str, typer.Option(envvar="JOBWARDEN_SANDBOX_HOST")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="JOBWARDEN_SANDBOX_PORT")] = 8765,
    token: Annotated[str | None, typer.Option(envvar="JOBWARDEN_SANDBOX_TOKEN")] = None,
) -> None:
    """Run the sandbox provider (the simulated async job API) in the foreground."""
    from jobwarden.sandbox.server import serve

    console.print(f"sandbox provider on http://{host}:{port}")
    serve(host, port, token)


@app.command()
def demo() -> None:
    """Run the full pipeline against the sandbox: worker, beat, five scenarios, their stories."""
    from jobwarden.demo import run_demo

    raise typer.Exit(run_demo(console))


def main() -> None:
    try:
        app()
    except JobwardenError as exc:
        err.print(f"error: {exc}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
