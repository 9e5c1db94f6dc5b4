"""Intake's rules: what a submission may hold before anything is recorded.

Pure functions over hostile input (any Python value, any code point): each
returns the normalised value or raises InvalidSubmissionError naming the field
and the rule. Column lengths come in as ``FieldLimits`` (the shell reads them
from the tables), so the rules cannot drift from what Postgres will store.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from jobwarden.models.concurrency import check_concurrency_key
from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.contracts.fields import MAX_COUNT, MAX_SECONDS
from jobwarden.models.contracts.routes import route_problem
from jobwarden.models.errors import InvalidCommandError, InvalidSubmissionError
from jobwarden.models.intake.fingerprint import (
    EXACT_INTEGER,
    canonical_command,
    check_utf8,
    child_path,
    show_key,
    shown_path,
)
from jobwarden.models.intake.reserved_keys import check_caller_key
from jobwarden.models.polling.business_deadline import check_business_deadline
from jobwarden.models.provider.fair_shares import DEFAULT_PRIORITY, check_priority

# RFC 9110's methods plus PATCH (RFC 5789): the request the fingerprint binds.
HTTP_METHODS: Final = frozenset(
    {"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"}
)
ACTOR_PREFIX: Final = "submitter:"


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldLimits:
    """The longest value each text field's column holds, in characters."""

    tenant: int
    provider: int
    idempotency_key: int
    source_event_id: int
    requested_by: int
    method: int
    route: int
    concurrency_key: int = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class Submission:
    """A submission that passed every rule, normalised (method upper-cased, route filled)."""

    tenant: str
    provider: str
    idempotency_key: str
    command: dict[str, Any]
    requested_by: str
    source_event_id: str | None
    method: str
    route: str
    max_status_requests: int | None
    result_deadline_seconds: float | None
    max_transport_failures: int | None
    cancel_deadline_seconds: float | None
    # Operations of one tenant sharing this key are admitted limit at a time (0011).
    concurrency_key: str | None = None
    # An absolute time, or seconds from the intake's now (models/polling/business_deadline.py).
    business_deadline: datetime | float | None = None
    # Its turn among its tenant's requests waiting for the provider's rate limit (0031).
    priority: int = DEFAULT_PRIORITY


def _storable(label: str, value: str) -> None:
    """Postgres text and JSONB refuse NUL; a lone surrogate has no UTF-8 encoding at all."""
    if "\x00" in value:
        raise InvalidSubmissionError(
            f"{label} contains a NUL character, which Postgres cannot store"
        )
    check_utf8(label, value)


def check_text(field: str, value: object, *, max_length: int) -> str:
    """A required identifier: a non-blank string that fits its column and Postgres."""
    if not isinstance(value, str):
        raise InvalidSubmissionError(f"{field} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidSubmissionError(f"{field} is required")
    if len(value) > max_length:
        raise InvalidSubmissionError(f"{field} is longer than {max_length} characters")
    _storable(field, value)
    return value


def check_optional_text(field: str, value: object, *, max_length: int) -> str | None:
    """Like check_text, but None (left out) is allowed; an empty string is not."""
    return None if value is None else check_text(field, value, max_length=max_length)


def check_method(value: object, *, max_length: int) -> str:
    """One of the HTTP methods, in any case; returned upper-cased."""
    if isinstance(value, str) and value.isascii() and len(value) <= max_length:
        method = value.upper()
        if method in HTTP_METHODS:
            return method
    raise InvalidSubmissionError(f"method must be one of {', '.join(sorted(HTTP_METHODS))}")


def check_route(value: object, *, max_length: int) -> str:
    """An absolute path: starts with "/", printable characters only, fits its column."""
    if not isinstance(value, str):
        raise InvalidSubmissionError(f"route must be a string, got {type(value).__name__}")
    if not value.startswith("/"):
        raise InvalidSubmissionError('route must start with "/"')
    if len(value) > max_length:
        raise InvalidSubmissionError(f"route is longer than {max_length} characters")
    # isprintable() is False for NUL, control characters, surrogates and format characters.
    if not value.isprintable():
        raise InvalidSubmissionError("route must be printable (no control or surrogate characters)")
    return value


def check_count(field: str, value: object) -> int | None:
    """A budget: a whole number from 1 to MAX_COUNT, or None for the contract's default."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        # bool is an int to Python, and 1.5 would be rounded by the Integer column: both refused.
        raise InvalidSubmissionError(f"{field} must be a whole number, got {type(value).__name__}")
    if value < 1:
        raise InvalidSubmissionError(f"{field} must be positive")
    if value > MAX_COUNT:
        raise InvalidSubmissionError(f"{field} must be at most {MAX_COUNT}")
    return int(value)


def check_seconds(field: str, value: object) -> float | None:
    """A deadline: a finite number of seconds above 0 and at most MAX_SECONDS (30 days)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidSubmissionError(f"{field} must be a number, got {type(value).__name__}")
    # Compared before any float() so a huge int cannot overflow, and inf never becomes a deadline.
    if isinstance(value, float) and not math.isfinite(value):
        raise InvalidSubmissionError(f"{field} must be finite")
    if value <= 0:
        raise InvalidSubmissionError(f"{field} must be positive")
    if value > MAX_SECONDS:
        raise InvalidSubmissionError(f"{field} must be at most {MAX_SECONDS} seconds (30 days)")
    return float(value)


def _check_storable(value: object, path: str) -> None:
    """What Postgres JSONB would refuse or change; runs after canonical_command's checks."""
    if isinstance(value, str):
        _storable(shown_path(path), value)
    elif isinstance(value, float) and abs(value) > EXACT_INTEGER:
        # JSONB keeps 1e20 as the integer 100000000000000000000, which RFC 8785 then
        # refuses: the stored command could no longer be canonicalised or re-hashed.
        raise InvalidSubmissionError(
            f"{shown_path(path)}: number {value!r} is outside ±(2^53 - 1); Postgres would return "
            "it as an integer RFC 8785 cannot canonicalise, so send it as a string"
        )
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_storable(item, f"{path}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            _storable(f"{shown_path(path)}: key {show_key(key)}", key)
            _check_storable(item, child_path(path, key))


def check_command(value: object) -> dict[str, Any]:
    """A JSON object that canonicalises (RFC 8785) within the size and depth bounds, and
    that Postgres stores as JSONB and hands back still canonicalising to the same bytes."""
    if not isinstance(value, dict):
        raise InvalidSubmissionError("command must be a JSON object")
    canonical_command(value)  # types, depth and size first: the walk below relies on them
    _check_storable(value, "")
    return value


def check_provider_command(value: object, contract: ProviderContract | None) -> dict[str, Any]:
    """check_command, then the contract's command schema, if it has one: the command with
    its defaults filled in, or InvalidCommandError naming the failing path.

    The result is what is fingerprinted, stored and sent, so it is checked again:
    a filled-in default must canonicalise and store like anything the caller wrote.
    """
    command = check_command(value)
    if contract is None:
        return command
    if contract.command is not None:
        command = check_command(contract.command.schema.apply(command))
    # The route's {command.<name>} placeholders must be fillable before anything is recorded.
    problem = route_problem(contract, command)
    if problem is not None:
        field, text = problem
        path = tuple(field.split(".")[1:])
        raise InvalidCommandError(field, text, path)
    return command


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmissionRequest:
    """What a door was asked to submit, before any rule: the one value every door builds.

    Unchecked on purpose: a door passes what its caller sent (a Celery message may hold
    any value), and ``check`` applies every rule, so a refusal can still be logged.
    The field names are the Python call's keywords and the Celery task's arguments.
    """

    tenant: str
    requested_by: str
    provider: str
    command: dict[str, Any]
    idempotency_key: str
    source_event_id: str | None = None
    max_status_requests: int | None = None
    result_deadline_seconds: float | None = None
    max_transport_failures: int | None = None
    cancel_deadline_seconds: float | None = None
    concurrency_key: str | None = None
    # An absolute time, seconds from now, or either as text (models/polling/business_deadline.py).
    business_deadline: datetime | float | str | None = None
    # -10 to 10, higher first among its tenant's requests waiting for the provider's rate
    # limit (models/provider/fair_shares.py); None: 0. Not fingerprinted.
    priority: int | None = None
    method: str = "POST"
    route: str | None = None  # None: /providers/<provider>/operations
    # W3C Trace Context: a valid one gives the operation its trace id, an invalid one is ignored.
    trace_parent: str | None = None

    def check(
        self,
        *,
        limits: FieldLimits,
        providers: Mapping[str, ProviderContract] | Collection[str],
        derived_key: bool = False,
    ) -> Submission:
        """Every intake rule, in the order a caller would fix them; the first failure raises.

        ``providers`` are the contracts by name (the command is then checked against its
        provider's command schema, see check_provider_command), or only the known names.
        A key in a reserved namespace (models/intake/reserved_keys.py) is refused unless
        ``derived_key``: set only by jobwarden's own derivations, never by a door.
        """
        tenant = check_text("tenant", self.tenant, max_length=limits.tenant)
        provider = check_text("provider", self.provider, max_length=limits.provider)
        if provider not in providers:
            known = ", ".join(sorted(providers))
            raise InvalidSubmissionError(f"unknown provider {provider!r}; known: {known}")
        key = check_text("idempotency_key", self.idempotency_key, max_length=limits.idempotency_key)
        if not derived_key:
            check_caller_key(key)
        by = check_text("requested_by", self.requested_by, max_length=limits.requested_by)
        event = check_optional_text(
            "source_event_id", self.source_event_id, max_length=limits.source_event_id
        )
        method = check_method(self.method, max_length=limits.method)
        route = check_route(
            f"/providers/{provider}/operations" if self.route is None else self.route,
            max_length=limits.route,
        )
        return Submission(
            tenant=tenant,
            provider=provider,
            idempotency_key=key,
            requested_by=by,
            source_event_id=event,
            method=method,
            route=route,
            max_status_requests=check_count("max_status_requests", self.max_status_requests),
            max_transport_failures=check_count(
                "max_transport_failures", self.max_transport_failures
            ),
            result_deadline_seconds=check_seconds(
                "result_deadline_seconds", self.result_deadline_seconds
            ),
            cancel_deadline_seconds=check_seconds(
                "cancel_deadline_seconds", self.cancel_deadline_seconds
            ),
            concurrency_key=check_concurrency_key(
                self.concurrency_key, max_length=limits.concurrency_key
            ),
            business_deadline=check_business_deadline(self.business_deadline),
            priority=check_priority(self.priority),
            command=check_provider_command(
                self.command, providers[provider] if isinstance(providers, Mapping) else None
            ),
        )


def check_submission(
    *,
    limits: FieldLimits,
    providers: Mapping[str, ProviderContract] | Collection[str],
    **fields: Any,
) -> Submission:
    """``SubmissionRequest(**fields).check(...)``, spelt with keywords; TypeError for a
    keyword that is no field or a missing required one."""
    return SubmissionRequest(**fields).check(limits=limits, providers=providers)
