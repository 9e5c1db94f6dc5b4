"""`jobwarden providers migrate` and what `providers check` reports of running operations.

Contracts are pinned (DESIGN.md invariant 16): an operation runs under the contract
text it was created under. ``check`` says, per provider and contract version, how
many operations not yet ended use it; ``migrate`` moves them to the current contract,
each move a decision in its history. Imported by jobwarden/cli/main.py at start-up, so
only typer and rich are imported at module level.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from jobwarden.cli.identity import Approver, BreakGlass, TokenFile, cli_author, cli_principal

if TYPE_CHECKING:
    from jobwarden.models.contracts.contract import ProviderContract

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def _say(line: str) -> None:
    err.print(line, markup=False, highlight=False, soft_wrap=True)


def contract_versions(contracts: Mapping[str, ProviderContract]) -> dict[str, str]:
    """Each valid contract's current digest (its file read again; ContractError passes)."""
    from jobwarden.models.contracts.pins import current_versions

    return {name: version.digest for name, version in current_versions(contracts).items()}


def running_report(current: Mapping[str, str], database_url: str) -> None:
    """Print which running operations use which contract version; a database that
    cannot be read is one line on stderr, not a failure of the check."""
    from sqlalchemy.exc import SQLAlchemyError

    from jobwarden.models.contracts.pins import usage_lines
    from jobwarden.models.persistence import contract_store
    from jobwarden.models.persistence.db import snapshot

    try:
        with snapshot(database_url) as session:
            uses = contract_store.version_uses(session)
    except SQLAlchemyError as exc:
        _say(f"running operations: the database cannot be read ({type(exc).__name__})")
        return
    for line in usage_lines(uses, current) or ["running (no operation is running)"]:
        console.print(line, highlight=False, markup=False)


def migrate_command(
    provider: Annotated[str, typer.Argument(help="The provider whose operations move.")],
    to: Annotated[
        str,
        typer.Option(
            "--to", help="The contract to move to: 'current'.", envvar="JOBWARDEN_MIGRATE_TO"
        ),
    ],
    operation: Annotated[
        str | None,
        typer.Option(
            "--operation",
            help="Move only this operation (default: every running one).",
            envvar="JOBWARDEN_MIGRATE_OPERATION",
        ),
    ] = None,
    token_file: TokenFile = None,
    glass: BreakGlass = None,
    approver: Approver = None,
) -> None:
    """Move running operations to the provider's current contract: a recorded decision.
    Acts as the token's principal (JOBWARDEN_TOKEN, --token-file; scope decide), moving
    that tenant's operations; --break-glass REASON moves every tenant's, recorded as such."""
    if to != "current":
        _say(f"--to: only 'current' is supported, got {to!r}")
        raise typer.Exit(2)
    op_id = None
    if operation is not None:
        try:
            op_id = uuid.UUID(operation)
        except ValueError:
            _say(f"--operation: not an operation id: {operation!r}")
            raise typer.Exit(2) from None
    from jobwarden.models.contracts.pins import short_digest
    from jobwarden.tasks.humans.contract_moves import move_to_current

    # Who decides (invariant 15): a token of the decide scope, never a typed name. A token
    # is one tenant's, so it moves that tenant's operations; break-glass, every tenant's.
    if glass is not None or approver is not None:
        who = cli_author(
            scope="decide", token_file=token_file, glass=glass, typed=("--approver", approver)
        )
        tenant = None
    else:
        principal = cli_principal(token_file, "decide")
        who, tenant = principal.author, principal.tenant
    moved = move_to_current(provider, author=who, operation_id=op_id, tenant=tenant)
    for m in moved:
        console.print(
            f"moved   {m.operation_id}  contract {short_digest(m.from_digest)} -> "
            f"{short_digest(m.to_digest)}  ({m.state})",
            highlight=False,
            markup=False,
        )
    count = len(moved)
    console.print(
        f"{count} operation{'s' if count != 1 else ''} of {provider} moved to its current contract",
        highlight=False,
        markup=False,
    )
