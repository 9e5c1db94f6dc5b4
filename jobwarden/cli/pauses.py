"""`jobwarden pause provider|operation`, `jobwarden resume`, `jobwarden pauses`, and
`jobwarden breaker show|hold|close PROVIDER` (issue 39).

Each acts as the token's principal (JOBWARDEN_TOKEN, --token-file) or --break-glass, as
every decision does. A token with the ``pause`` scope pauses its own tenant's operations
and its own tenant's share of a provider; pausing (or resuming) a provider for every
tenant needs the ``operate`` scope, or break-glass (a database operator); so does holding or
closing a provider breaker, which pauses a provider over every tenant. Imported by
jobwarden/cli/main.py at start-up, so only typer is imported at module level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from jobwarden.cli import output
from jobwarden.cli.app import CliTyper
from jobwarden.cli.identity import BreakGlass, TokenFile, cli_author, decision_author

if TYPE_CHECKING:
    from jobwarden.models.humans.identity import Author
    from jobwarden.models.humans.pauses import Pause
    from jobwarden.tasks.humans.breakers import BreakerView

pause_app = CliTyper(no_args_is_help=True, help="Pause a provider or one operation.")
console = Console(soft_wrap=True)

Reason = Annotated[
    str,
    typer.Option(
        "--reason", envvar="JOBWARDEN_PAUSE_REASON", help="Why (recorded, shown to everyone)."
    ),
]
Extend = Annotated[
    bool,
    typer.Option(
        "--extend",
        envvar="JOBWARDEN_PAUSE_EXTEND",
        help="Also extend each observing operation once: +15 min, +4 checks.",
    ),
]


def _fail(line: str, code: int = 2) -> typer.Exit:
    Console(stderr=True).print(f"error: {line}", markup=False, highlight=False)
    return typer.Exit(code)


def _shown(pause: Pause) -> dict[str, object]:
    return {
        "pause_id": str(pause.pause_id),
        "scope": pause.scope.value,
        "provider": pause.provider,
        "tenant": pause.tenant,
        "operation_id": str(pause.operation_id) if pause.operation_id else None,
        "reason": pause.reason,
        "paused_by": pause.author,
        "since": pause.started_at.isoformat(),
        "resumed_by": pause.resumed_by,
        "resumed_at": pause.resumed_at.isoformat() if pause.resumed_at else None,
    }


def _provider_author(
    *, tenant: str | None, all_tenants: bool, token_file: TokenFile, glass: BreakGlass
) -> tuple[Author, str | None]:
    """The author and the tenant the pause is for (None: every tenant's)."""
    if all_tenants and tenant is not None:
        raise _fail("--all-tenants: give it or --tenant, not both")
    if glass is not None:
        if tenant is None and not all_tenants:
            raise _fail("--tenant or --all-tenants: say whose operations to pause")
        author = cli_author(scope="pause", token_file=token_file, glass=glass)
        return author, tenant
    if all_tenants:
        return cli_author(scope="operate", token_file=token_file, glass=None), None
    from jobwarden.cli.identity import cli_principal

    principal = cli_principal(token_file, "pause")
    if tenant is not None and tenant != principal.tenant:
        raise _fail(f"--tenant: {tenant!r} is not the token's tenant", 1)
    return principal.author, principal.tenant


@pause_app.command("provider")
def pause_provider_command(
    name: str,
    reason: Reason,
    tenant: Annotated[
        str | None,
        typer.Option(envvar="JOBWARDEN_TENANT", help="Only this tenant's operations."),
    ] = None,
    all_tenants: Annotated[
        bool,
        typer.Option(
            "--all-tenants",
            envvar="JOBWARDEN_PAUSE_ALL_TENANTS",
            help="Every tenant's operations (the operate scope, or break-glass).",
        ),
    ] = False,
    extend: Extend = False,
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    as_json: Annotated[bool, typer.Option("--json", envvar="JOBWARDEN_PAUSE_JSON")] = False,
) -> None:
    """Pause every operation at a provider (a token's own tenant's, unless --all-tenants):
    nothing is sent, no budget is spent, deadlines keep running (unless --extend gives each
    the bounded extension once), until `jobwarden resume`."""
    from jobwarden.tasks.humans.pauses import pause_provider

    author, whose = _provider_author(
        tenant=tenant, all_tenants=all_tenants, token_file=token_file, glass=glass
    )
    done = pause_provider(name, reason, author, tenant=whose, extend=extend)
    _answer(done.pause, started=done.started, count=done.parked, as_json=as_json)


@pause_app.command("operation")
def pause_operation_command(
    operation_id: str,
    reason: Reason,
    extend: Extend = False,
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    as_json: Annotated[bool, typer.Option("--json", envvar="JOBWARDEN_PAUSE_JSON")] = False,
) -> None:
    """Pause one operation: it sends nothing until `jobwarden resume PAUSE_ID` (--extend:
    its deadline and checks get the bounded extension once)."""
    from jobwarden.tasks.humans.pauses import pause_operation

    author = decision_author(operation_id, scope="pause", token_file=token_file, glass=glass)
    done = pause_operation(operation_id, reason, author, extend=extend)
    _answer(done.pause, started=done.started, count=done.parked, as_json=as_json)


def _answer(pause: Pause, *, started: bool, count: int, as_json: bool) -> None:
    if as_json:
        output.emit_json({**_shown(pause), "started": started, "parked": count})
        return
    if not started:
        console.print(
            f"already paused by {pause.author} since {pause.started_at.isoformat()}: "
            f"{pause.reason} (pause {pause.pause_id})",
            markup=False,
            highlight=False,
        )
        return
    console.print(
        f"paused {pause.pause_id}: {count} operations parked", markup=False, highlight=False
    )


def resume_command(
    pause_id: str,
    note: Annotated[
        str, typer.Option(envvar="JOBWARDEN_RESUME_NOTE", help="What changed (recorded).")
    ] = "",
    extend: Annotated[
        bool,
        typer.Option(
            "--extend",
            envvar="JOBWARDEN_RESUME_EXTEND",
            help="Also extend each observing operation once: +15 min, +4 checks.",
        ),
    ] = False,
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    as_json: Annotated[bool, typer.Option("--json", envvar="JOBWARDEN_RESUME_JSON")] = False,
) -> None:
    """Resume a pause: the operations it parked wake spread by the provider's rate limit
    (never a burst); a cancel requested meanwhile is sent then."""
    import uuid

    from jobwarden.tasks.humans.pauses import find_pause, resume

    try:
        pid = uuid.UUID(pause_id)
    except ValueError:
        raise _fail(f"PAUSE_ID: {pause_id!r} is not a pause id") from None
    found = find_pause(pid)
    if found is None:
        raise _fail(f"no pause {pause_id}", 1)
    if glass is not None:
        author = cli_author(scope="pause", token_file=token_file, glass=glass)
    elif found.tenant is None:
        author = cli_author(scope="operate", token_file=token_file, glass=None)
    else:
        author = cli_author(
            scope="pause",
            token_file=token_file,
            glass=None,
            tenant=found.tenant,
            foreign=f"no pause {pause_id} for the token's tenant",
        )
    done = resume(pause_id, author, note, extend=extend)
    if as_json:
        output.emit_json({**_shown(done.pause), "woken": done.woken})
        return
    console.print(
        f"resumed {pause_id}: {done.woken} operations woken, spread by the provider's rate",
        markup=False,
        highlight=False,
    )


def pauses_command(
    every: Annotated[
        bool,
        typer.Option("--all", envvar="JOBWARDEN_PAUSES_ALL", help="Resumed pauses too."),
    ] = False,
    provider: Annotated[
        str | None, typer.Option(envvar="JOBWARDEN_PROVIDER", help="Only this provider.")
    ] = None,
    tenant: Annotated[
        str | None,
        typer.Option(envvar="JOBWARDEN_TENANT", help="Only pauses holding this tenant's."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", envvar="JOBWARDEN_PAUSES_JSON")] = False,
) -> None:
    """The pauses in force (with --all, resumed ones too), newest first."""
    from jobwarden.tasks.humans.pauses import pauses

    found = pauses(active_only=not every, provider=provider, tenant=tenant)
    if as_json:
        output.emit_json([_shown(p) for p in found])
        return
    output.table(
        console,
        ("PAUSE", "PROVIDER", "TENANT", "OPERATION", "BY", "SINCE", "REASON", "RESUMED"),
        [
            (
                str(p.pause_id),
                p.provider,
                p.tenant or "(all)",
                str(p.operation_id) if p.operation_id else "-",
                p.author,
                p.started_at.isoformat(timespec="seconds"),
                p.reason,
                f"{p.resumed_by} {p.resumed_at.isoformat(timespec='seconds')}"
                if p.resumed_at
                else "-",
            )
            for p in found
        ],
    )


# --- the provider breaker ------------------------------------------------------------

breaker_app = CliTyper(no_args_is_help=True, help="A provider's breaker: show, hold, close.")
BreakerJson = Annotated[bool, typer.Option("--json", envvar="JOBWARDEN_BREAKER_JSON")]


def _print(view: BreakerView, as_json: bool) -> None:
    from jobwarden.tasks.humans.breakers import shown

    if as_json:
        output.emit_json(shown(view))
        return
    found = view.incident
    if found is None or view.state == "closed":
        line = f"{view.provider}: closed" + ("" if view.enabled else " (no [breaker] table)")
        if found is not None:
            line += f"; last opened {found.opened_at.isoformat(timespec='seconds')} "
            line += f"({found.reason}), closed by {found.closed_by}"
        console.print(line, markup=False, highlight=False)
        return
    counts = found.evidence.get("counts", {})
    console.print(
        f"{view.provider}: {view.state} since {found.opened_at.isoformat(timespec='seconds')} "
        f"({found.reason}); {counts.get('answers', 0)} answers in the window, "
        f"first failing {found.evidence.get('first_failing_operation')}, last "
        f"{found.evidence.get('last_failing_operation')}; {found.probes} probes"
        + (f"; held by {found.held_by}" if found.held_by else ""),
        markup=False,
        highlight=False,
    )


@breaker_app.command("show")
def breaker_show(provider: str, as_json: BreakerJson = False) -> None:
    """The provider's breaker: closed, open (with its evidence), probing, or held."""
    from jobwarden.models.errors import RefusedInputError
    from jobwarden.tasks.humans.breakers import show

    try:
        view = show(provider)
    except RefusedInputError as exc:
        raise _fail(str(exc)) from None
    _print(view, as_json)


@breaker_app.command("hold")
def breaker_hold(
    provider: str,
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    as_json: BreakerJson = False,
) -> None:
    """Hold the open breaker: no half-open probe until someone closes it."""
    from jobwarden.models.errors import RefusedInputError
    from jobwarden.tasks.humans.breakers import hold, show

    author = cli_author(scope="operate", token_file=token_file, glass=glass)
    try:
        hold(provider, author)
    except RefusedInputError as exc:
        raise _fail(str(exc), 1) from None
    _print(show(provider), as_json)


@breaker_app.command("close")
def breaker_close(
    provider: str,
    note: Annotated[
        str, typer.Option(envvar="JOBWARDEN_BREAKER_NOTE", help="What changed (recorded).")
    ] = "",
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    as_json: BreakerJson = False,
) -> None:
    """Close the breaker: its pause is resumed, the operations it parked woken spread by the
    provider's rate limit (never a burst)."""
    from jobwarden.models.errors import RefusedInputError
    from jobwarden.tasks.humans.breakers import close, show

    author = cli_author(scope="operate", token_file=token_file, glass=glass)
    try:
        close(provider, author, note)
    except RefusedInputError as exc:
        raise _fail(str(exc), 1) from None
    _print(show(provider), as_json)
