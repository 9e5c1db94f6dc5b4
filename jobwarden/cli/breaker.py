"""`jobwarden breaker show|hold|close PROVIDER`: a provider breaker's state, and a person's
hold or close (issue 39).

A breaker pauses a provider over every tenant, so holding or closing it needs the
``operate`` scope (JOBWARDEN_TOKEN, --token-file) or --break-glass, as resuming such a
pause does. Imported by jobwarden/cli/main.py at start-up, so only typer is imported at
module level.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from jobwarden.cli import output
from jobwarden.cli.app import CliTyper
from jobwarden.cli.identity import BreakGlass, TokenFile, cli_author

if TYPE_CHECKING:
    from jobwarden.tasks.provider.breaker import BreakerView

breaker_app = CliTyper(no_args_is_help=True, help="A provider's breaker: show, hold, close.")
console = Console(soft_wrap=True)
AsJson = Annotated[bool, typer.Option("--json", envvar="JOBWARDEN_BREAKER_JSON")]


def shown(view: BreakerView) -> dict[str, Any]:
    """The breaker as every door shows it (the HTTP answer has the same fields)."""
    found = view.incident
    return {
        "provider": view.provider,
        "enabled": view.enabled,
        "state": view.state,
        "incident": None
        if found is None
        else {
            "incident_id": str(found.incident_id),
            "pause_id": str(found.pause_id),
            "state": found.state.value,
            "reason": found.reason,
            "evidence": dict(found.evidence),
            "opened_at": found.opened_at.isoformat(),
            "probe_due_at": found.probe_due_at.isoformat(),
            "probe_operation_id": str(found.probe_operation_id)
            if found.probe_operation_id
            else None,
            "probes": found.probes,
            "held_by": found.held_by,
            "closed_at": found.closed_at.isoformat() if found.closed_at else None,
            "closed_by": found.closed_by,
        },
    }


def _print(view: BreakerView, as_json: bool) -> None:
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


def _fail(line: str, code: int = 2) -> typer.Exit:
    Console(stderr=True).print(f"error: {line}", markup=False, highlight=False)
    return typer.Exit(code)


@breaker_app.command("show")
def breaker_show(provider: str, as_json: AsJson = False) -> None:
    """The provider's breaker: closed, open (with its evidence), probing, or held."""
    from jobwarden.models.errors import RefusedInputError
    from jobwarden.tasks.provider.breaker import show

    try:
        view = show(provider)
    except RefusedInputError as exc:
        raise _fail(str(exc)) from None
    _print(view, as_json)


@breaker_app.command("hold")
def breaker_hold(
    provider: str, token_file: TokenFile = None, glass: BreakGlass = None, as_json: AsJson = False
) -> None:
    """Hold the open breaker: no half-open probe until someone closes it."""
    from jobwarden.models.errors import RefusedInputError
    from jobwarden.tasks.provider.breaker import hold, show

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
    as_json: AsJson = False,
) -> None:
    """Close the breaker: its pause is resumed, the operations it parked woken spread by the
    provider's rate limit (never a burst)."""
    from jobwarden.models.errors import RefusedInputError
    from jobwarden.tasks.provider.breaker import close, show

    author = cli_author(scope="operate", token_file=token_file, glass=glass)
    try:
        close(provider, author, note)
    except RefusedInputError as exc:
        raise _fail(str(exc), 1) from None
    _print(show(provider), as_json)
