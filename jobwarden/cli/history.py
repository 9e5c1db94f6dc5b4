"""`jobwarden archive` and `jobwarden partitions`: the history's months, and archiving the
old ones to the result store (tasks/history_archive.py). Only typer at module level."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer
from rich.console import Console

from jobwarden.cli import output

console = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def _say(line: str) -> None:
    err.print(line, markup=False, highlight=False, soft_wrap=True)


def _fault_points(redis_url: str, prefix: str) -> Callable[[str, str], None]:
    """The run's fault points: no-ops unless JOBWARDEN_FAULTS_ENABLED (tests arm them)."""
    from jobwarden.tasks import faults
    from jobwarden.tasks.history_archive import no_fault

    if not faults.ENABLED:
        return no_fault
    from redis import Redis

    redis = Redis.from_url(redis_url)
    return lambda name, scope: faults.fault_point(redis, prefix, name, scope)


def archive_command(
    retention_days: Annotated[
        float | None,
        typer.Option(
            "--retention-days",
            min=0,
            envvar="JOBWARDEN_HISTORY_RETENTION_DAYS",
            help="Archive months whose operations all ended this many days ago or more "
            "(0: every month whose operations all ended).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Archive old months of history to the result store, then drop their partitions.

    Also creates the coming months' partitions. A month holding an operation that has
    not ended before the cutoff is refused, naming it; exit 1 if any month was refused
    or failed (it stays in the database, and the next run tries again).
    """
    from datetime import UTC, datetime

    from jobwarden.config.settings import get_settings
    from jobwarden.models.errors import JobwardenError
    from jobwarden.tasks.history_archive import archive
    from jobwarden.tasks.results.store import ResultStore

    settings = get_settings()
    days = settings.history_retention_days if retention_days is None else retention_days
    if days is None:
        _say("archive needs --retention-days N (or JOBWARDEN_HISTORY_RETENTION_DAYS)")
        raise typer.Exit(2)
    try:
        results = ResultStore.from_url(settings.result_store)
    except JobwardenError as exc:
        _say(str(exc))
        raise typer.Exit(2) from None
    outcomes = archive(
        settings.database_url,
        results,
        now=datetime.now(UTC),
        retention_days=days,
        fault=_fault_points(settings.redis_url, settings.key_prefix),
    )
    for o in outcomes:
        line = f"{o.outcome:<9} {o.partition}: {o.detail}"
        if o.outcome == "archived":
            console.print(f"{line} ({o.rows} rows)", highlight=False, markup=False)
        else:
            _say(line)
    if not outcomes:
        console.print(f"nothing to archive (retention {days:g} days)", highlight=False)
    if any(o.outcome != "archived" for o in outcomes):
        raise typer.Exit(1)


def partitions_command(
    as_json: Annotated[
        bool,
        typer.Option("--json", envvar="JOBWARDEN_PARTITIONS_JSON", help="One JSON array."),
    ] = False,
) -> None:
    """List operation_events' partitions: range, rows, and what was archived from each."""
    from jobwarden.config.settings import get_settings
    from jobwarden.tasks.history_archive import partition_listing

    listing = partition_listing(get_settings().database_url)
    if as_json:
        output.emit_json(
            [
                {"partition": name, "range": span, "rows": rows, "state": state}
                for name, span, rows, state in listing
            ]
        )
        return
    output.table(console, ("PARTITION", "RANGE", "ROWS", "STATE"), listing)
