"""`jobwarden tokens`, `jobwarden tenants` and `jobwarden api` (the HTTP door's CLI).

Imported by jobwarden/cli/main.py at start-up, so only typer is imported at module level:
each command imports what it runs (``jobwarden --help`` needs no driver).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from jobwarden.cli import output
from jobwarden.cli.app import CliTyper

if TYPE_CHECKING:
    from jobwarden.models.persistence.api_store import IntakeEntry

tokens_app = CliTyper(no_args_is_help=True, help="API tokens of the HTTP API.")
tenants_app = CliTyper(no_args_is_help=True, help="Tenants' settings for the HTTP API.")
console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def _fail(line: str) -> typer.Exit:
    err.print(line, markup=False, highlight=False)
    return typer.Exit(2)


@tokens_app.command("create")
def tokens_create(
    tenant: Annotated[str, typer.Option(envvar="JOBWARDEN_TOKEN_TENANT", help="The tenant.")],
    name: Annotated[
        str, typer.Option(envvar="JOBWARDEN_TOKEN_NAME", help="Who holds it (the actor).")
    ],
    scope: Annotated[
        list[str],
        typer.Option(
            envvar="JOBWARDEN_TOKEN_SCOPES",
            help="submit, read, cancel, approve or decide; repeat for several.",
        ),
    ],
) -> None:
    """Create a token and print it once: only its hash is stored."""
    from jobwarden.cli.extras import require

    require("jobwarden tokens create", "api")
    from jobwarden.api.auth import create_token
    from jobwarden.config.settings import get_settings

    try:
        made = create_token(get_settings().database_url, tenant=tenant, name=name, scopes=scope)
    except ValueError as exc:
        raise _fail(f"error: {exc}") from None
    err.print(f"token {made.token_id} for tenant {tenant!r}; it is shown only once:", markup=False)
    print(made.token)


@tokens_app.command("list")
def tokens_list(
    as_json: Annotated[bool, typer.Option("--json", envvar="JOBWARDEN_TOKENS_JSON")] = False,
) -> None:
    """Every token: id, name, tenant, scopes, created, last used, revoked (never the secret)."""
    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence import api_store
    from jobwarden.models.persistence.db import snapshot

    with snapshot(get_settings().database_url) as session:
        records = api_store.list_tokens(session)
    rows: list[dict[str, Any]] = [
        {
            "id": str(r.token_id),
            "name": r.name,
            "tenant": r.tenant,
            "scopes": list(r.scopes),
            "created": r.created_at.isoformat(timespec="seconds"),
            "last_used": r.last_used_at.isoformat(timespec="seconds") if r.last_used_at else None,
            "revoked": r.revoked_at.isoformat(timespec="seconds") if r.revoked_at else None,
        }
        for r in records
    ]
    if as_json:
        output.emit_json(rows)
        return
    output.table(
        console,
        ("ID", "NAME", "TENANT", "SCOPES", "CREATED", "LAST USED", "REVOKED"),
        [
            (
                row["id"],
                row["name"],
                row["tenant"],
                ",".join(row["scopes"]),
                row["created"],
                row["last_used"],
                row["revoked"],
            )
            for row in rows
        ],
    )


@tokens_app.command("revoke")
def tokens_revoke(token_id: str) -> None:
    """Revoke a token: its next request is 401. Exit 1 if no live token has this id.

    Every API process is told through Redis (the revocation epoch), so one that holds the
    token in memory looks it up again at its next request; Redis not answering is exit 2
    with the token revoked (processes then forget it within JOBWARDEN_API_TOKEN_CACHE_SECONDS).
    """
    from redis import Redis

    from jobwarden.config.settings import get_settings
    from jobwarden.models.errors import RevocationNotAnnouncedError
    from jobwarden.tasks.humans.revocations import revoke

    try:
        parsed = uuid.UUID(token_id)
    except ValueError:
        raise _fail(f"not a token id: {token_id!r}") from None
    settings = get_settings()
    redis = Redis.from_url(settings.redis_url, socket_timeout=5, socket_connect_timeout=5)
    try:
        revoked = revoke(settings.database_url, redis, settings.key_prefix, parsed)
    except RevocationNotAnnouncedError as exc:
        raise _fail(str(exc)) from None
    finally:
        redis.close()
    if not revoked:
        err.print(f"no live token {token_id}", markup=False)
        raise typer.Exit(1)
    console.print(f"revoked {token_id}", markup=False, highlight=False)


@tenants_app.command("allow-self-approval")
def tenants_allow_self_approval(
    tenant: str,
    off: Annotated[
        bool, typer.Option("--off", help="Refuse self-approval again (the default).")
    ] = False,
) -> None:
    """Let a tenant's tokens approve operations their own name submitted (or stop it)."""
    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence import api_store
    from jobwarden.models.persistence.db import transaction
    from jobwarden.tasks.runtime import utcnow

    with transaction(get_settings().database_url) as session:
        api_store.set_self_approval(session, tenant, allow=not off, now=utcnow())
    state = "refused" if off else "allowed"
    console.print(f"tenant {tenant}: self-approval {state}", markup=False, highlight=False)


def serve_api(host: str | None, port: int | None, workers: int | None) -> None:
    """Serve the API with its console (jobwarden.console.app) with uvicorn; flags override
    the api_* settings."""
    import uvicorn

    from jobwarden.api.server import BoundedReadProtocol
    from jobwarden.config.settings import get_settings
    from jobwarden.observability import telemetry
    from jobwarden.observability.logs import uvicorn_log_config

    settings = get_settings()
    # A bad OTEL_* setting is one line before uvicorn starts, not a traceback per worker.
    telemetry.check()
    # A factory import string, so each of several worker processes builds its own app.
    uvicorn.run(
        "jobwarden.console.app:create_app",
        factory=True,
        host=host or settings.api_host,
        port=settings.api_port if port is None else port,
        workers=workers or settings.api_workers,
        proxy_headers=False,
        # httptools with a whole-request read deadline: slow clients are dropped.
        http=BoundedReadProtocol,
        # Every process's lines (uvicorn's and jobwarden's) structured alike; the access
        # line is jobwarden.api.access_log's http_request, with duration, trace and tenant.
        log_config=uvicorn_log_config(fmt=settings.log_format),
        access_log=False,
    )


def intake_entries(operation_id: uuid.UUID) -> list[IntakeEntry]:
    """The submission attempts that named the operation (for `history`).

    Read from the store, not through jobwarden.api: `history` works without the api extra.
    """
    from jobwarden.config.settings import get_settings
    from jobwarden.models.persistence import api_store
    from jobwarden.models.persistence.db import snapshot

    with snapshot(get_settings().database_url) as session:
        return api_store.intake_for_operation(session, operation_id)


def intake_line(a: IntakeEntry) -> str:
    """One attempt as `history` prints it."""
    return (
        f"{a.at.isoformat()}  intake {a.outcome:<15} door={a.door} actor={a.actor} "
        f"key={a.idempotency_key} fingerprint={(a.fingerprint or '-')[:12]} "
        f"http={a.http_status or '-'} trace={a.trace_id or '-'}"
    )
