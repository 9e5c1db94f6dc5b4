"""Schedule files: ``config/schedules/*.toml``, one tenant's schedules per file.

    tenant = "acme"

    [schedules.nightly-export]
    cron = "30 2 * * *"
    timezone = "Europe/Berlin"
    provider = "sandbox"
    command = { kind = "export", day = "{slot_date}" }
    overlap = "skip"
    catchup_window_seconds = 3600

Every problem names the file and the field (``nightly.toml: schedules.nightly-export.
timezone: unknown IANA time zone 'Europe/Berln'``), as provider contracts do; one bad
schedule never hides the others' problems.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from jobwarden.models.errors import RefusedInputError
from jobwarden.models.schedules.slots import (
    ScheduleError,
    ScheduleSpec,
    next_slot,
    parse_spec,
    render_command,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeclaredSchedule:
    spec: ScheduleSpec
    source: str  # the file's name


# Checks the first slot's rendered submission as intake would (provider known, command
# schema, key and field lengths); raises RefusedInputError naming the field.
SubmissionCheck = Callable[[ScheduleSpec, Any, str], None]


def _read(path: Path) -> tuple[dict[str, Any], str | None]:
    """A file's TOML, or why it cannot be read: one line naming the problem, no traceback."""
    try:
        return tomllib.loads(path.read_text(encoding="utf-8")), None
    except OSError as exc:  # vanished, unreadable, a broken link
        return {}, f"cannot be read: {exc.strerror or type(exc).__name__}"
    except UnicodeDecodeError:
        return {}, "not valid TOML: the file is not UTF-8"
    except tomllib.TOMLDecodeError as exc:
        return {}, f"not valid TOML: {exc}"
    except RecursionError:
        # tomllib recurses per nested array or inline table: a deep one ends its stack.
        return {}, "not valid TOML: nested too deep to read"


def check_schedules(
    directory: Path, *, key_limit: int, submission: SubmissionCheck | None, now: datetime
) -> tuple[list[DeclaredSchedule], list[str]]:
    """Every schedule declared in ``directory``'s *.toml files, and every problem found.

    A missing directory declares nothing. Two files may not declare one (tenant, name).
    """
    found: list[DeclaredSchedule] = []
    errors: list[str] = []
    seen: dict[tuple[str, str], str] = {}
    if directory.exists() and not directory.is_dir():
        return found, [f"{directory}: not a directory of schedule files"]
    files = sorted(directory.glob("*.toml")) if directory.is_dir() else []
    for path in files:
        if path.is_dir():
            continue  # a folder named like a file holds no schedule (issue 33, finding 6)
        data, problem = _read(path)
        if problem is not None:
            errors.append(f"{path.name}: {problem}")
            continue
        tenant = data.get("tenant")
        if not isinstance(tenant, str) or not tenant:
            errors.append(f"{path.name}: tenant: required: the tenant whose schedules these are")
            continue
        extra = sorted(set(data) - {"tenant", "schedules"})
        if extra:
            errors.append(f"{path.name}: {extra[0]}: unknown field; known: tenant, schedules")
        tables = data.get("schedules", {})
        if not isinstance(tables, dict):
            errors.append(f"{path.name}: schedules: must be tables ([schedules.NAME])")
            continue
        for name, table in tables.items():
            where = f"{path.name}: schedules.{name}"
            if not isinstance(table, dict):
                errors.append(f"{where}: must be a table")
                continue
            try:
                spec = parse_spec(tenant, name, table, key_limit=key_limit)
                if submission is not None:
                    first = next_slot(spec.timing, start=now) or now
                    command = render_command(
                        spec.command, name=name, slot_at=first, timezone=spec.timing.timezone
                    )
                    submission(spec, command, name)
            except ScheduleError as exc:
                errors.append(f"{where}.{exc.field}: {exc.problem}")
                continue
            except RefusedInputError as exc:
                errors.append(f"{where}: {exc}")
                continue
            if (tenant, name) in seen:
                errors.append(
                    f"{where}: already declared for tenant {tenant!r} in {seen[tenant, name]}"
                )
                continue
            seen[tenant, name] = path.name
            found.append(DeclaredSchedule(spec=spec, source=path.name))
    return found, errors
