"""Who acts from a shell: the CLI's token, or an explicit break-glass (issue 33).

A decision from the CLI (approve, decide, cancel, schedule changes) is made by the
principal of an API token, resolved by the lookup every door uses
(tasks/humans/principals.py ``principal_of``): from ``JOBWARDEN_TOKEN`` or a file named by
``--token-file`` / ``JOBWARDEN_TOKEN_FILE`` (never a flag's value: it would sit in the
shell history and ``ps``). The token's scopes and tenant apply as over HTTP.

A database operator who must act without a token says so: ``--break-glass REASON``.
The act is recorded as ``break-glass:<os user>`` with the reason on its events (and in
the intake log's actor for a resubmission), logged at WARNING, and never counted
toward a two-person rule (models/humans/approvals.py). The old free-text ``--approver`` /
``--by`` are refused with that advice: a typed name is not an identity.

Imported by the CLI at start-up: only typer at module level.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

if TYPE_CHECKING:
    from jobwarden.models.humans.identity import Author
    from jobwarden.tasks.humans.principals import Principal
    from jobwarden.tasks.intake import Caller

TOKEN_ENV = "JOBWARDEN_TOKEN"
err = Console(stderr=True, soft_wrap=True)

TokenFile = Annotated[
    Path | None,
    typer.Option(
        "--token-file",
        envvar="JOBWARDEN_TOKEN_FILE",
        help=f"A file holding the API token to act with (or set {TOKEN_ENV}).",
        show_default=False,
    ),
]
BreakGlass = Annotated[
    str | None,
    typer.Option(
        "--break-glass",
        envvar="JOBWARDEN_BREAK_GLASS",
        metavar="REASON",
        help="Act without a token, as break-glass:<os user>, saying why: recorded as such, "
        "logged at WARNING, never counted toward a two-person rule.",
        show_default=False,
    ),
]
# The free-text names that made one shell two people (issue 33, finding 1): refused.
Approver = Annotated[
    str | None, typer.Option("--approver", envvar="JOBWARDEN_APPROVER", hidden=True)
]
By = Annotated[str | None, typer.Option("--by", envvar="JOBWARDEN_ACTOR", hidden=True)]

NO_IDENTITY = (
    f"act with a token ({TOKEN_ENV}, or --token-file FILE; `jobwarden tokens create` makes "
    "one) or, without one, --break-glass REASON"
)


def _fail(line: str, code: int = 2) -> typer.Exit:
    err.print(f"error: {line}", markup=False, highlight=False)
    return typer.Exit(code)


def _token(token_file: Path | None) -> str | None:
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise _fail(f"--token-file: cannot read {token_file}: {exc}") from None
        if not token:
            raise _fail(f"--token-file: {token_file} is empty")
        return token
    return os.environ.get(TOKEN_ENV, "").strip() or None


def cli_principal(token_file: Path | None, scope: str) -> Principal:
    """The principal of the CLI's token, which must hold ``scope``; exit 2 naming why not."""
    from jobwarden.config.settings import get_settings
    from jobwarden.tasks.humans.principals import TOKEN_PREFIX, Scope, principal_of

    token = _token(token_file)
    if token is None:
        raise _fail(f"no identity: {NO_IDENTITY}")
    found = (
        principal_of(get_settings().database_url, token) if token.startswith(TOKEN_PREFIX) else None
    )
    if found is None:
        # Unknown and revoked read alike, as over HTTP.
        raise _fail(f"{TOKEN_ENV}: the API token is unknown or revoked")
    if Scope(scope) not in found.scopes:
        have = ", ".join(sorted(s.value for s in found.scopes))
        raise _fail(f"{TOKEN_ENV}: this needs the {scope!r} scope; the token has {have}")
    return found


def cli_author(
    *,
    scope: str,
    token_file: Path | None,
    glass: str | None,
    typed: tuple[str, str | None] = ("--approver", None),
    tenant: str | None = None,
    foreign: str | None = None,
) -> Author:
    """The author of a CLI decision: the token's principal (of ``tenant`` when given;
    ``foreign`` is the line when it is another's), or break-glass. ``typed`` is an old
    free-text flag and its value: refused when given."""
    from jobwarden.models.errors import RefusedInputError
    from jobwarden.models.humans.identity import break_glass

    flag, value = typed
    if value is not None:
        raise _fail(f"{flag}: a typed name is not an identity; {NO_IDENTITY}")
    if glass is not None:
        if token_file is not None or os.environ.get(TOKEN_ENV):
            raise _fail("--break-glass: a token is set too; act with one or the other")
        try:
            author = break_glass(getpass.getuser(), glass)
        except RefusedInputError as exc:
            raise _fail(str(exc)) from None
        err.print(
            f"WARNING: break-glass: acting as {author.actor} without a token; recorded as "
            "such and never counted toward a two-person rule",
            markup=False,
            highlight=False,
        )
        from jobwarden.observability.logs import get_logger

        get_logger("jobwarden.cli.main").warning(
            "break_glass", actor=author.actor, reason=author.reason, scope=scope
        )
        return author
    principal = cli_principal(token_file, scope)
    if tenant is not None and tenant != principal.tenant:
        raise _fail(foreign or f"--tenant: {tenant!r} is not the token's tenant", 1)
    return principal.author


def operation_tenant(operation_id: str) -> str:
    """The tenant of an operation (a token acts only on its own tenant's); exit 1 if none."""
    import uuid

    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence import store
    from jobwarden.models.persistence.db import snapshot

    try:
        op_id = uuid.UUID(operation_id)
    except ValueError:
        raise _fail(f"not an operation id: {operation_id!r}") from None
    with snapshot(get_settings().database_url) as session:
        row = store.load(session, op_id)
    if row is None:
        raise _fail(f"no operation {operation_id}", 1)
    return row.tenant


def decision_author(
    operation_id: str,
    *,
    scope: str,
    token_file: Path | None,
    glass: str | None,
    typed: tuple[str, str | None] = ("--approver", None),
) -> Author:
    """The author of a decision on one operation: a token of its tenant, or break-glass
    (a database operator, who is not bound to a tenant)."""
    tenant = None if glass is not None or typed[1] is not None else operation_tenant(operation_id)
    return cli_author(
        scope=scope,
        token_file=token_file,
        glass=glass,
        typed=typed,
        tenant=tenant,
        # As over HTTP, another tenant's operation reads as no operation at all.
        foreign=f"no operation {operation_id} for the token's tenant",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Submitter:
    tenant: str
    requested_by: str
    caller: Caller | None  # None: the intake's own (submitter:<requested_by>)


def submitter(
    *, token_file: Path | None, glass: str | None, tenant: str | None, typed: str | None
) -> Submitter:
    """Who submits from the CLI: the token's principal (of its tenant, as over HTTP: the
    submitter is its name, the intake log its actor and token), break-glass, or — with
    neither — a typed ``--requested-by`` as the Python door takes it: the CLI is that call
    from a shell, holding the database credential, and is trusted as that door is."""
    from jobwarden.tasks.intake import Caller

    if glass is None and token_file is None and not os.environ.get(TOKEN_ENV):
        return Submitter(tenant=tenant or "default", requested_by=typed or "cli", caller=None)
    if typed is not None:
        raise _fail("--requested-by: a token or --break-glass names the submitter; drop it")
    if glass is not None:
        author = cli_author(scope="submit", token_file=token_file, glass=glass)
        caller = Caller(actor=author.actor, break_glass=author.reason)
        return Submitter(tenant=tenant or "default", requested_by=author.actor, caller=caller)
    principal = cli_principal(token_file, "submit")
    if tenant is not None and tenant != principal.tenant:
        raise _fail(f"--tenant: {tenant!r} is not the token's tenant", 1)
    caller = Caller(actor=principal.actor, token_id=principal.token_id)
    return Submitter(tenant=principal.tenant, requested_by=principal.name, caller=caller)
