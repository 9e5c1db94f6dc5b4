"""`jobwarden keys check`: stored idempotency keys in a reserved namespace that jobwarden
did not derive (invariant 17; issue 33, finding 4).

Intake refuses such keys from every door now; this reports the ones stored before
(or written by hand), with the intake log's door and actor of the answer that created
them, so a person can judge each. Exit 1 when any is found, so a deploy script can stop.
Imported by jobwarden/cli/main.py at start-up, so only typer is imported at module level.
"""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from jobwarden.cli.app import CliTyper

keys_app = CliTyper(no_args_is_help=True, help="Idempotency keys.")
console = Console(soft_wrap=True)


@keys_app.command("check")
def keys_check(
    tenant: Annotated[
        str | None, typer.Option(envvar="JOBWARDEN_TENANT", help="Only this tenant.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", envvar="JOBWARDEN_KEYS_JSON")] = False,
) -> None:
    """List operations whose key is in a reserved namespace (resubmit:, schedule:,
    follow-up:, jobwarden:) but was not derived by jobwarden; exit 1 if there are any."""
    from jobwarden.config.settings import get_settings
    from jobwarden.models.intake.key_audit import planted_reason
    from jobwarden.models.persistence.db import snapshot
    from jobwarden.models.persistence.key_store import keyed_operations

    with snapshot(get_settings().database_url) as session:
        keyed = keyed_operations(session, tenant)
    planted = [(op, why) for op in keyed if (why := planted_reason(op)) is not None]
    if as_json:
        print(
            json.dumps(
                [
                    {
                        "operation_id": str(op.operation_id),
                        "tenant": op.tenant,
                        "idempotency_key": op.idempotency_key,
                        "created_at": op.created_at.isoformat(),
                        "door": op.door,
                        "actor": op.actor,
                        "reason": why,
                    }
                    for op, why in planted
                ]
            )
        )
    else:
        for op, why in planted:
            console.print(
                f"planted {op.tenant} {op.idempotency_key} operation {op.operation_id} created "
                f"{op.created_at.isoformat(timespec='seconds')} via {op.door or '-'} by "
                f"{op.actor or '-'}: {why}",
                markup=False,
                highlight=False,
            )
        console.print(
            f"{len(keyed)} keys in reserved namespaces, {len(planted)} not derived by jobwarden",
            markup=False,
            highlight=False,
        )
    if planted:
        raise typer.Exit(1)
