"""A provider breaker: when a provider's answers across operations say it is down, pause it
as one incident instead of letting every operation escalate on its own (issue 39; DESIGN
"Incidents").

The contract's ``[breaker]`` table sets a sliding window, a minimum count of answers and a
share per kind of failure (5xx, transport failures, unknown states, 401/403); 429s feed
the shared rate limiter and open the breaker only past their own bound. The shell counts
each status answer once in Redis (``tasks/provider/breaker.py``); this module is the pure
half: what an answer counts as, whether a window's counts open the breaker and why, the
evidence it names, and how an answer is decided while the breaker is open (it spends no
per-operation budget and escalates nothing: the incident is the one escalation).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any, Final, Self, cast

from pydantic import model_validator

from jobwarden.models.actions import Decided, Escalate, EscalationReason, Move, Record
from jobwarden.models.contracts.contract import Breaker
from jobwarden.models.contracts.fields import Fraction, count, problem, seconds
from jobwarden.models.contracts.sections import ContractTable, default
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.provider.signals import HttpObservation

__all__ = [
    "AnswerClass",
    "Breaker",
    "BreakerTable",
    "IncidentState",
    "Tripped",
    "WindowCounts",
    "answer_class",
    "evidence",
    "not_counted",
    "probe_wake",
    "tripped",
]

# Samples of failing answers the evidence keeps, and how much of each: enough for a person
# to see what the provider said, bounded so an incident's row stays small.
MAX_SAMPLES: Final = 5
MAX_SAMPLE_CHARS: Final = 200
# Buckets the window is counted in: the window slides by one bucket at a time.
WINDOW_BUCKETS: Final = 10


class BreakerTable(ContractTable):
    """``[breaker]``: pause the provider as one incident when its answers fail across
    operations. Absent: no breaker (each operation's own budgets stop it)."""

    builds = Breaker
    window_seconds: Annotated[float, seconds()] = default(Breaker, "window_seconds")
    """The sliding window the answers are counted in."""
    minimum_count: Annotated[int, count()] = default(Breaker, "minimum_count")
    """Answers the window must hold before any share can open the breaker."""
    server_error_share: Fraction = default(Breaker, "server_error_share")
    transport_share: Fraction = default(Breaker, "transport_share")
    unknown_state_share: Fraction = default(Breaker, "unknown_state_share")
    denied_share: Fraction = default(Breaker, "denied_share")
    max_rate_limited: Annotated[int, count()] = default(Breaker, "max_rate_limited")
    """429s in one window past which the breaker opens (below it they only slow the limiter)."""
    cooldown_seconds: Annotated[float, seconds()] = default(Breaker, "cooldown_seconds")
    """How long the breaker stays open before one operation probes the provider."""

    @model_validator(mode="after")
    def _rules(self) -> Self:
        for name in ("server_error_share", "transport_share", "unknown_state_share"):
            if getattr(self, name) == 0:
                # A share of 0 would open on the first answer of any kind, success included.
                raise problem("must be above 0 (1 never opens on this kind)", field=name)
        if self.denied_share == 0:
            raise problem("must be above 0 (1 never opens on this kind)", field="denied_share")
        return self


class AnswerClass(StrEnum):
    ok = "ok"  # any answer that says the provider works (pending, done, a 404 in grace)
    server_error = "server_error"  # 5xx
    transport = "transport"  # no usable HTTP answer
    unknown_state = "unknown_state"  # a state the contract does not name
    denied = "denied"  # 401/403
    rate_limited = "rate_limited"  # 429


FAILURES: Final = frozenset(AnswerClass) - {AnswerClass.ok, AnswerClass.rate_limited}


class IncidentState(StrEnum):
    open = "open"  # paused; a probe is due after the cool-down
    probing = "probing"  # one operation's request is testing the provider
    held = "held"  # a person holds it open: no probe until they close it
    closed = "closed"  # resumed (by the probe's success or a person)


@dataclass(frozen=True, slots=True, kw_only=True)
class WindowCounts:
    """The answers one provider gave in the window, by class."""

    answers: int = 0
    server_error: int = 0
    transport: int = 0
    unknown_state: int = 0
    denied: int = 0
    rate_limited: int = 0

    @classmethod
    def from_mapping(cls, found: Mapping[str, int]) -> WindowCounts:
        return cls(**{k: int(found.get(k, 0)) for k in cls.__dataclass_fields__})

    def as_dict(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in type(self).__dataclass_fields__}


@dataclass(frozen=True, slots=True, kw_only=True)
class Tripped:
    """Why the breaker opens: the escalation reason, and the share (or count) over its bound."""

    reason: EscalationReason
    kind: AnswerClass
    observed: float  # the share of the window's answers (a count for 429s)
    threshold: float


def answer_class(obs: HttpObservation, decided: Decided) -> AnswerClass:
    """What one status answer counts as. ``decided``: the step's decision on it (an unknown
    state is a reading the decision names, not an HTTP status)."""
    code = obs.status_code
    if code is None or obs.transport_failure is not None:
        return AnswerClass.transport
    if code in (401, 403):
        return AnswerClass.denied
    if code == 429:
        return AnswerClass.rate_limited
    if code >= 500:
        return AnswerClass.server_error
    action = decided.action
    if isinstance(action, Escalate) and action.reason is EscalationReason.unknown_state:
        return AnswerClass.unknown_state
    return AnswerClass.ok


def tripped(policy: Breaker, counts: WindowCounts) -> Tripped | None:
    """Whether ``counts`` open the breaker: None below ``minimum_count`` answers, else the
    first kind at or over its share (401/403 first: retrying a revoked credential is the
    costliest), then 429s past their bound."""
    total = counts.answers
    if total < policy.minimum_count or total <= 0:
        return None
    shares = (
        (AnswerClass.denied, counts.denied, policy.denied_share),
        (AnswerClass.unknown_state, counts.unknown_state, policy.unknown_state_share),
        (AnswerClass.server_error, counts.server_error, policy.server_error_share),
        (AnswerClass.transport, counts.transport, policy.transport_share),
    )
    for kind, n, threshold in shares:
        share = n / total
        if n > 0 and share >= threshold:
            return Tripped(reason=REASONS[kind], kind=kind, observed=share, threshold=threshold)
    if counts.rate_limited > policy.max_rate_limited:
        return Tripped(
            reason=EscalationReason.rate_limited,
            kind=AnswerClass.rate_limited,
            observed=float(counts.rate_limited),
            threshold=float(policy.max_rate_limited),
        )
    return None


REASONS: Final[Mapping[AnswerClass, EscalationReason]] = {
    AnswerClass.denied: EscalationReason.authorization_denied,
    AnswerClass.unknown_state: EscalationReason.unknown_state,
    AnswerClass.server_error: EscalationReason.provider_failure,
    AnswerClass.transport: EscalationReason.provider_failure,
    AnswerClass.rate_limited: EscalationReason.rate_limited,
}


def sample(obs: HttpObservation, cls: AnswerClass, operation_id: uuid.UUID) -> str:
    """One failing answer as the evidence keeps it: the operation, the status or transport
    failure, and the start of the error body's ``code``/``message`` (never headers, which
    may echo a credential; the caller scrubs secrets by value before storing)."""
    what = str(obs.status_code) if obs.status_code is not None else str(obs.transport_failure)
    said = ""
    if isinstance(obs.body, Mapping):
        err = obs.body.get("error", obs.body)
        if isinstance(err, Mapping):
            said = " ".join(str(err[k]) for k in ("code", "message") if k in err)
    text = f"{operation_id} {cls.value} {what} {said}".strip()
    return text[:MAX_SAMPLE_CHARS]


def evidence(  # noqa: PLR0913 - the incident's facts, each named at the one call
    policy: Breaker,
    why: Tripped,
    counts: WindowCounts,
    *,
    first_failing: str | None,
    last_failing: str | None,
    samples: list[str],
) -> dict[str, Any]:
    """What the breaker saw when it opened, as the pause row and the incident keep it."""
    return {
        "kind": why.kind.value,
        "observed": round(why.observed, 4),
        "threshold": why.threshold,
        "window_seconds": policy.window_seconds,
        "minimum_count": policy.minimum_count,
        "counts": counts.as_dict(),
        "first_failing_operation": first_failing,
        "last_failing_operation": last_failing,
        "samples": samples[:MAX_SAMPLES],
    }


def describe(why: Tripped, counts: WindowCounts) -> str:
    """The pause's reason: one line a person reads in the queue."""
    if why.kind is AnswerClass.rate_limited:
        return (
            f"provider breaker: {counts.rate_limited} 429s in the window, over the bound of "
            f"{int(why.threshold)}"
        )
    failing = getattr(counts, why.kind.value)
    return (
        f"provider breaker: {failing} of {counts.answers} answers were {why.kind.value} "
        f"(share {why.observed:.2f} >= {why.threshold:g})"
    )


# The counters an answer spends: restored when the breaker takes the answer on itself.
BUDGET_COUNTERS: Final = ("transport_failures_used", "consecutive_rate_limited")


def not_counted(
    op: Operation, decided: Decided, now: datetime, *, wake: datetime | None
) -> Decided:
    """``decided`` for a failing status answer that arrived while the breaker is open or
    opening: the incident is its escalation, so the answer spends no transport or 429
    budget and escalates nothing. The operation waits in its state until ``wake`` (None:
    until the breaker's resume or its next deadline wakes it); the pause parks it then.
    What the decision read from the answer is kept; its counters are not.
    """
    changes = cast(
        RowChanges, {k: v for k, v in decided.changes.items() if k not in BUDGET_COUNTERS}
    )
    move = Move(
        to=op.state,
        event=EventKind.decision,
        cause="the provider breaker is open: this failed answer is the incident's, not "
        "counted against the operation's budget",
        wake_at=wake,
    )
    del now  # the wake is the shell's (the breaker's cool-down), kept in the signature
    return Decided(action=move, changes=changes, seen=decided.seen, answered=decided.answered)


def probe_wake(
    op: Operation, pause_id: uuid.UUID, incident_id: uuid.UUID, now: datetime
) -> Decided | None:
    """The half-open probe's write to the one operation chosen: due now, still held (the
    hold names it as the probe, so its next request alone goes out). None when the pause
    no longer parks it."""
    if op.held_by != pause_id:
        return None
    record = Record(
        event=EventKind.resumed,
        cause="the provider breaker is half-open: this operation's next request probes it",
        excerpt={"pause_id": str(pause_id), "incident_id": str(incident_id), "probe": True},
    )
    changes: RowChanges = {"next_poll_at": now, "dispatched_at": None}
    return Decided(action=record, changes=changes)


def probe_at(opened: datetime, policy: Breaker) -> datetime:
    """When the first probe is due: a cool-down after the breaker opened (or re-opened)."""
    return opened + timedelta(seconds=policy.cooldown_seconds)


def bucket_seconds(policy: Breaker) -> float:
    """One bucket of the sliding window."""
    return policy.window_seconds / WINDOW_BUCKETS
