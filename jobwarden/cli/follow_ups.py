"""`jobwarden follow-up OP KIND COMMAND`: start a capture, a refund, a rollback.

The one start every door makes (tasks/follow_ups.py), as the token's principal
(JOBWARDEN_TOKEN, --token-file; its tenant's operations only), --break-glass, or with
neither a typed --requested-by as the Python door takes it. Prints intake's answer for
the new operation, with the link; exit codes as `submit`'s (3 conflict: the same
instruction with another command; 4 in progress), 2 for a refusal naming what to fix
(the parent's state and the required ones, what remains under the amount rule).
Imported by jobwarden/cli/main.py at start-up, so only typer and rich at module level.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.console import Console

from jobwarden.cli.identity import BreakGlass, TokenFile, submitter
from jobwarden.cli.output import command_argument

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)
FOLLOW_UP_EXIT_CODES = {"conflict": 3, "in_progress": 4}


def follow_up_command(
    operation_id: Annotated[str, typer.Argument(help="The operation it follows (the parent).")],
    kind: Annotated[
        str, typer.Argument(help="The follow-up its contract declares: capture, refund ...")
    ],
    command: Annotated[str, typer.Argument(help="The follow-up's command as a JSON object.")],
    instruction_id: Annotated[
        str | None,
        typer.Option(
            "--instruction-id",
            help="Each instruction's own id, for a kind that may be many (a refund).",
            envvar="JOBWARDEN_INSTRUCTION_ID",
        ),
    ] = None,
    requested_by: Annotated[
        str | None,
        typer.Option(envvar="JOBWARDEN_REQUESTED_BY", help="without a token: a typed submitter"),
    ] = None,
    token_file: TokenFile = None,
    glass: BreakGlass = None,
) -> None:
    """Start a follow-up operation of OP (its own id, token, fingerprint and approval)."""
    from jobwarden.tasks.follow_ups import start_follow_up

    parsed = command_argument(command, err)
    who = submitter(token_file=token_file, glass=glass, tenant=None, typed=requested_by)
    # A token is one tenant's: another tenant's operation is "no operation" to it.
    tenant = who.tenant if who.caller is not None and who.caller.token_id is not None else None
    answer = start_follow_up(
        operation_id,
        kind,
        parsed,
        who.requested_by,
        instruction_id=instruction_id,
        tenant=tenant,
        door="python",
        caller=who.caller,
    )
    console.print_json(json.dumps(answer.as_dict()))
    for warning in answer.submitted.warnings:
        err.print(f"warning: {warning.detail}", markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(FOLLOW_UP_EXIT_CODES.get(answer.outcome.value, 0))


def family_lines(family: dict[str, Any]) -> list[str]:
    """What `show` prints of an operation's family: what it follows, its follow-ups with
    kind and state, and per amount rule what was requested so far against the limit."""
    lines = []
    follows = family["follows"]
    if follows is not None:
        lines.append(f"follows          {follows['operation_id']} as {follows['kind']}")
    for member in family["follow_ups"]:
        amount = f"  amount {member['amount']}" if member["amount"] is not None else ""
        lines.append(
            f"follow-up        {member['kind']:<9} {member['operation_id']}  "
            f"{member['state']}{amount}"
        )
    for kind, sums in family["amounts"].items():
        limit = "unknown" if sums["limit"] is None else sums["limit"]
        remaining = "" if sums["remaining"] is None else f", remaining {sums['remaining']}"
        lines.append(
            f"{kind + ' so far':<16} {sums['requested']} of {limit} "
            f"({sums['limit_field']}){remaining}"
        )
    return lines
