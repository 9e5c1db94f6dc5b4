"""A provider's rate limit: the contract's ``[rate_limit]`` table and what a refused token means.

Every request to a provider takes a token from one limiter in Redis
(``tasks/provider/rate_limits.py``) shared by all workers, keyed by provider and the
credential's reference: a token bucket of ``burst`` tokens refilled at
``requests_per_second``. This module is the pure half: the contract values, and
the decision that turns "no token for N seconds" into a wait a step records and
reschedules instead of sleeping through it in a worker.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Annotated, Final

from pydantic import Field

from jobwarden.models.actions import Decided, DelaySource, Send, Wait
from jobwarden.models.contracts.contract import RateLimit
from jobwarden.models.contracts.fields import MAX_SECONDS, count, kind, problem, toml_type
from jobwarden.models.contracts.sections import ContractTable
from jobwarden.models.provider.fair_shares import TENANT_WEIGHTS_SCHEMA, check_tenant_weights

__all__ = [
    "MAX_BURST",
    "MAX_REQUESTS_PER_SECOND",
    "RateLimit",
    "RateLimitTable",
    "credential_reference",
    "granted",
    "rate_limited",
]

# Sanity bounds: beyond them a value is a typo, not a provider's limit.
MAX_REQUESTS_PER_SECOND: Final = 10_000.0
MAX_BURST: Final = 10_000


def _requests_per_second(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise problem(f"must be a number, got {toml_type(value)}")
    # Also refuses nan and inf: neither compares inside the bounds.
    if not 0 < value <= MAX_REQUESTS_PER_SECOND:
        raise problem(f"must be above 0 and at most {MAX_REQUESTS_PER_SECOND:g}, got {value:g}")
    return float(value)


class RateLimitTable(ContractTable):
    """``[rate_limit]``: our own ceiling per credential, below the provider's 429s."""

    builds = RateLimit
    requests_per_second: Annotated[
        float,
        kind(
            _requests_per_second,
            {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_REQUESTS_PER_SECOND},
        ),
    ]
    burst: Annotated[int, count(maximum=MAX_BURST)] = 1
    tenant_weights: Annotated[dict[str, int], kind(check_tenant_weights, TENANT_WEIGHTS_SCHEMA)] = (
        Field(default_factory=dict)
    )
    """Each tenant's share of the rate while several wait for it, as tenant = weight (1 to
    1000; a tenant left out weighs 1): e.g. { acme = 3 } gives acme three turns for every
    one of each other tenant waiting."""


def credential_reference(secret_env: str | None, secret_file: str | None) -> str:
    """What names the credential a limit counts against (never the secret itself)."""
    if secret_env is not None:
        return f"env:{secret_env}"
    if secret_file is not None:
        return f"file:{secret_file}"
    return "anonymous"


def granted(send: Send, at: float | None) -> Send:
    """``send`` with the limiter's grant time (Unix seconds, its own clock) in its record.

    The request's event (its ``*_sent`` claim, or the answer a reserved request's record
    rides on) then says when the shared limiter let it go: the history alone shows that
    the requests to one credential kept its rate, whatever the network did to them after.
    No limit, no grant time, nothing added.
    """
    if at is None:
        return send
    stamp = datetime.fromtimestamp(at, UTC).isoformat()
    return replace(send, excerpt={**send.excerpt, "rate_limit_granted_at": stamp})


def rate_limited(decided: Decided, send: Send, *, retry_after: float, now: datetime) -> Decided:
    """The step's decision when the limiter had no token for ``send`` for ``retry_after`` s.

    Nothing was claimed or sent: the operation waits in its state (counters and what
    the decision read are kept) and asks again at the limiter's time. The wait is
    clipped to the request's deadline, so the step's own deadline stop takes over
    then; a provider's Retry-After was honoured before ``send`` was decided, and a wait
    from ``now`` can only come later, never sooner.
    """
    seconds = min(max(0.0, retry_after), float(MAX_SECONDS))  # no timedelta overflow
    until = now + timedelta(seconds=seconds)
    clipped = send.deadline is not None and until >= send.deadline
    if clipped and send.deadline is not None:
        until = max(now, send.deadline)
        seconds = (until - now).total_seconds()
    wait = Wait(
        until=until,
        delay_seconds=seconds,
        delay_source=DelaySource.local_rate_limit,
        clipped_to_deadline=clipped,
        cause=f"{send.request.purpose.value} request held by the provider's rate limit",
    )
    return Decided(
        action=wait, changes=decided.changes, seen=decided.seen, answered=decided.answered
    )
