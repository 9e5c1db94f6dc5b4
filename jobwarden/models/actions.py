"""The closed set of actions a decision may return, for every writer.

A step's decision (``models/steps.py`` for poll and cancel, ``create_decisions``,
``result_decisions``, ``decisions.py`` for the poll's tables) returns one of the
step actions; a write from outside a step (a person's cancel, approval or decision,
a webhook delivery, the key hand-over, intake's intent) returns ``Record`` or
``Open``. ``models/effects.py`` turns any of them into the row changes and events
to write. No action does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from jobwarden.models.conventions.strategies import Monitor
from jobwarden.models.history.chain import EventKind
from jobwarden.models.results.validation import ResultVerdict
from jobwarden.models.states import EscalationReason as EscalationReason  # noqa: PLC0414
from jobwarden.models.states import OperationState

if TYPE_CHECKING:
    from jobwarden.models.operation import RowChanges

S = OperationState
# EscalationReason is defined in states.py, with the states a stop lands in: operation.py
# needs it and this module names operation.RowChanges, so defining it here made the two
# import each other. Re-exported (the alias above), so every decision imports it from here.


class DelaySource(StrEnum):
    provider_retry_after = "provider_retry_after"  # the provider's Retry-After header
    provider_poll_hint = "provider_poll_hint"  # a validated hint in the status body
    local_backoff = "local_backoff"  # jittered exponential backoff, nothing from the provider
    progress_estimate = "progress_estimate"  # aimed at the finish two progress readings agree on
    provider_eta = "provider_eta"  # aimed just past the finish two provider ETAs agree on
    initial_delay = "initial_delay"  # the contract's wait before the first poll
    manual_extension = "manual_extension"  # a human extended the bounds
    local_rate_limit = "local_rate_limit"  # no token from the provider's shared rate limiter
    webhook_interval = "webhook_interval"  # a webhook woke a status read less than its interval ago


# The one place that says where a stop lands. While a cancel is ours, every stop is
# cancellation_unconfirmed (the job may or may not be cancelled); a result deadline that
# passes while the job runs keeps what is needed to look again later.
def stop_state(state: OperationState, reason: EscalationReason) -> OperationState:
    if state in (S.cancel_requested, S.cancelling):
        return S.cancellation_unconfirmed
    if state in (S.cleanup_pending, S.cleaning_up):
        # Whatever stops a cleanup leaves the resources in doubt: a person looks.
        return S.cleanup_unconfirmed
    if reason is EscalationReason.deadline_exceeded and state in (S.accepted, S.observing):
        return S.result_timed_out
    return S.escalated


# States with no direct edge to their stop state pass through one more state, each hop
# an allowed transition with its own event (the transition table has no shortcuts).
STOP_VIA: Mapping[OperationState, OperationState] = {
    S.create_unknown: S.reconciling,
    S.accepted: S.observing,
    S.cancel_requested: S.cancelling,
}


class RequestPurpose(StrEnum):
    create = "create"  # the create, with the operation's one provider token
    lookup = "lookup"  # reconciliation: ask for the job under our token
    status = "status"  # one status read
    cancel = "cancel"  # the one cancel request
    result = "result"  # the result download
    failed_items = "failed_items"  # the second file of failed items (OpenAI error_file_id)
    result_page = "result_page"  # one more page of a paged final result ([ARM] nextLink)
    cleanup = "cleanup"  # the one call that removes what an ended job left ([cleanup])
    cleanup_check = "cleanup_check"  # a read of whether those resources are gone yet


@dataclass(frozen=True, slots=True, kw_only=True)
class ProviderRequest:
    """One request as the core built it; the edge only sends it."""

    purpose: RequestPurpose
    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=dict)
    json_body: Any = None
    # False: the provider's credential stays home (a result on a storage host, or a URL
    # that authorizes itself, such as a presigned one): models/origins.takes_credential.
    with_credential: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait:
    """Send the next request no earlier than ``until``; stay in the current state."""

    until: datetime
    delay_seconds: float
    delay_source: DelaySource
    clipped_to_deadline: bool  # the chosen delay would have passed the deadline
    cause: str = "wait"
    # A wait aimed at the job's finish (progress_estimate, provider_eta): the finish it
    # aimed past, and the evidence, both shown in the history and the console's timeline.
    estimated_finish: datetime | None = None
    evidence: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class NotYet:
    """An early wake-up (duplicated or early message): write nothing, act at ``until``."""

    until: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Send:
    """Commit the claim (counter, ``*_sent`` event, optional move), then send ``request``.

    ``deadline`` is checked again after the claim commits: a request whose deadline
    passed meanwhile is not sent, and the history says so.
    """

    request: ProviderRequest
    event: EventKind
    counters: RowChanges = field(default_factory=dict)  # type: ignore[assignment]
    move_to: OperationState | None = None
    changes: RowChanges = field(default_factory=dict)  # type: ignore[assignment]
    wake_at: datetime | None = None  # the timer if the step dies after the claim
    cause: str | None = None
    excerpt: Mapping[str, Any] = field(default_factory=dict)
    deadline: datetime | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Move:
    """A transition with one event saying why; ``wake_at`` is the next timer (None: none)."""

    to: OperationState
    event: EventKind
    cause: str
    wake_at: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Accept:
    """The provider named the remote job: move to accepted and wait for the first poll.

    ``then`` is set when the create answer itself says the job already ended (a
    synchronous outcome): the operation goes straight on to collection or its end,
    and the history says the outcome came with the create. ``job_id`` and
    ``status_url`` may then be absent (a result answered in place of a job).
    """

    job_id: str | None
    status_url: str | None
    wait: Wait
    event: EventKind  # create_accepted, create_replayed or reconciled
    then: Collect | Finish | Escalate | None = None
    # Under an Azure convention: what the job is polled through (conventions.Monitor) and
    # the Location that names its final result, kept in result_reference until collection.
    polling_mode: Monitor | None = None
    final_url: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Retry:
    """The create (or reconciliation) must be sent again with the same token, at ``wait``.

    ``to`` is the state it waits in (create_unknown or reconciling when the outcome is
    ambiguous; unchanged after a 429, which created nothing). ``event`` says which:
    ``create_ambiguous`` (the provider may hold the job) or ``create_rate_limited`` (a
    429: try again later), never ``create_refused``, which is a create refused for good.
    """

    wait: Wait
    event: EventKind  # create_ambiguous or create_rate_limited
    to: OperationState | None
    detail: str
    counts_transport_failure: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Collect:
    """The remote job succeeded: move to result_collecting."""

    result_ref: str | None
    expected: Mapping[str, Any] = field(default_factory=dict)
    deadline: datetime | None = None  # collection must be done by then


@dataclass(frozen=True, slots=True, kw_only=True)
class Finish:
    """End in ``state`` (failed, expired, cancelled, result_unavailable, ...) for ``reason``."""

    state: OperationState
    reason: str
    event: EventKind = EventKind.decision
    summary: Mapping[str, Any] | None = None  # validation summary, for result endings
    # A result that failed validation but was read whole is kept with its verdict, so a
    # person can still look at it and accept it (never as a validated success).
    kept: Succeed | None = None
    # The job left resources the contract's [cleanup] removes: the operation goes to
    # cleanup_pending and ends in ``state`` once the cleanup is confirmed
    # (models/cleanup.py decides; the result, if any, is stored now all the same).
    clean_up: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Succeed:
    """The result was fetched and validated: store it and end in succeeded."""

    verdict: ResultVerdict | None
    content: bytes | None  # the bytes when kept inline (at most results.INLINE_LIMIT)
    content_type: str | None
    note: str | None = None
    location: str | None = None  # where the result store holds the bytes (None: inline)


@dataclass(frozen=True, slots=True, kw_only=True)
class Escalate:
    """Stop automation with a reason; ``state`` comes from ``stop_state``."""

    reason: EscalationReason
    detail: str
    state: OperationState
    keep_job_id: str | None = None  # a job id seen in a contract violation, for the human


def escalate(
    state: OperationState, reason: EscalationReason, detail: str, keep_job_id: str | None = None
) -> Escalate:
    return Escalate(
        reason=reason, detail=detail, state=stop_state(state, reason), keep_job_id=keep_job_id
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """A fact from outside a step, with the one event that says it: a person's cancel
    request, approval or decision, a verified webhook delivery.

    ``to`` is the transition (None: the state stays). ``wake_at`` is the next timer
    (None: the timer stays as it is); no timer survives a terminal ``to``.
    """

    event: EventKind
    to: OperationState | None = None
    cause: str | None = None
    excerpt: Mapping[str, Any] = field(default_factory=dict)
    wake_at: datetime | None = None
    delay_source: DelaySource | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Open:
    """The intake's first event: the operation exists, in the state its snapshot holds."""

    cause: str | None = None
    excerpt: Mapping[str, Any] = field(default_factory=dict)


StepAction = Wait | NotYet | Send | Move | Accept | Retry | Collect | Finish | Succeed | Escalate
# A step's actions, and the two recorded from outside a step (a person, a delivery, intake).
Action = StepAction | Record | Open


@dataclass(frozen=True, slots=True, kw_only=True)
class Decided:
    """An action plus the row fields that ride on the same commit (counters, observations).

    ``seen`` is what the decision read from the answer, kept in the observation's excerpt;
    ``answered`` names what the answer was to (absent for a status read).
    """

    action: Action
    changes: RowChanges = field(default_factory=dict)  # type: ignore[assignment]
    seen: Mapping[str, Any] = field(default_factory=dict)
    answered: str | None = None
