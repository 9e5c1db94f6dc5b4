"""Local operation states, the one table of allowed transitions, and why automation stops.

The table is the source of truth for the ORM CHECK constraint, the store's
fenced updates and the docs. A transition not in it is refused with a reason.
"""

from __future__ import annotations

from enum import StrEnum

from jobwarden.models.errors import TransitionRefusedError


class OperationState(StrEnum):
    queued = "queued"  # admitted when its concurrency key has room; holds no worker or lease
    awaiting_approval = (
        "awaiting_approval"  # contract demands a human approval bound to the fingerprint
    )
    create_pending = "create_pending"  # intent committed; the create request may be sent
    create_unknown = "create_unknown"  # a create was sent and its outcome is not known
    reconciling = "reconciling"  # asking the provider what became of the create token
    accepted = "accepted"  # provider acknowledged and gave a remote job id
    observing = "observing"  # polling the remote job under deadline and budget
    result_collecting = (
        "result_collecting"  # remote job finished; fetching and validating the result
    )
    cancel_requested = "cancel_requested"  # we decided to cancel (local fact)
    cancelling = "cancelling"  # cancel sent; waiting for the provider to confirm
    escalated = "escalated"  # automation stopped; a human picks from bounded options
    result_timed_out = "result_timed_out"  # result deadline passed while the job still ran
    cancellation_unconfirmed = "cancellation_unconfirmed"  # cancel deadline passed unconfirmed
    # The job ended (failed, cancelled, expired: ``ended_as``) leaving resources the
    # contract's [cleanup] endpoint removes: the one cleanup call may be sent.
    cleanup_pending = "cleanup_pending"
    cleaning_up = "cleaning_up"  # cleanup call sent; waiting for the provider to confirm
    cleanup_unconfirmed = "cleanup_unconfirmed"  # cleanup bounds ran out unconfirmed
    succeeded = "succeeded"  # result collected and validated
    failed = "failed"  # provider reported failure, or the create was refused
    cancelled = "cancelled"  # provider confirmed the cancellation (remote fact)
    expired = "expired"  # provider reported the job expired
    result_unavailable = "result_unavailable"  # job succeeded but the result cannot be fetched
    result_validation_failed = "result_validation_failed"  # result fetched but failed validation
    abandoned = "abandoned"  # a human gave up on the operation
    approval_expired = "approval_expired"  # nobody approved within the approval window
    # A person accepted a result that failed validation, as it is: never a validated success.
    result_accepted = "result_accepted"


S = OperationState

TRANSITIONS: dict[OperationState, frozenset[OperationState]] = {
    # The hand-over admits it as a fresh submission would start; a person may end it first
    # (a cancel before anything was sent abandons it).
    S.queued: frozenset({S.create_pending, S.awaiting_approval, S.abandoned}),
    # Rejecting an approval request is a human decision that ends the operation; a window
    # that closes unapproved ends it too (nothing was sent either way).
    S.awaiting_approval: frozenset({S.create_pending, S.abandoned, S.approval_expired}),
    # 401/403 on create escalates authorization_denied rather than failing outright; a
    # cancel before the create leaves ends the operation with nothing sent (abandoned).
    # Back to awaiting_approval when the create about to leave is not the one approved
    # (approval_stale, invariant 13): in create_pending no remote job can exist (an
    # ambiguous send moved it to create_unknown), so a new approval is all it needs.
    S.create_pending: frozenset(
        {S.accepted, S.create_unknown, S.failed, S.escalated, S.abandoned, S.awaiting_approval}
    ),
    S.create_unknown: frozenset({S.reconciling}),
    S.reconciling: frozenset({S.accepted, S.failed, S.escalated}),
    S.accepted: frozenset({S.observing, S.cancel_requested}),
    S.observing: frozenset(
        {
            S.result_collecting,
            S.failed,
            S.expired,
            S.escalated,
            S.result_timed_out,
            S.cancel_requested,
            # The provider may report a cancellation nobody here asked for; it is a remote fact.
            S.cancelled,
            S.cleanup_pending,
        }
    ),
    S.cancel_requested: frozenset({S.cancelling}),
    # A job past its commit point ends as it really ended: via result collection.
    S.cancelling: frozenset(
        {
            S.cancelled,
            S.result_collecting,
            S.failed,
            S.expired,
            S.cancellation_unconfirmed,
            S.cleanup_pending,
        }
    ),
    # Back to observing only when a signed result URL expired unfetched and the contract
    # says a status read gives a fresh one (result.refresh_expired_url).
    # And to how the job really ended when what was collected is the partial output of a
    # job that did not succeed (result.partial_after): cancelled, failed or expired.
    S.result_collecting: frozenset(
        {
            S.succeeded,
            S.result_unavailable,
            S.result_validation_failed,
            S.escalated,
            S.observing,
            S.cancelled,
            S.failed,
            S.expired,
            S.cleanup_pending,
        }
    ),
    # A job that ended leaving resources ends as it ended (``ended_as``) only once the
    # provider confirmed the cleanup; the call is sent once (the claim moves to
    # cleaning_up before it leaves), and a cleanup nobody confirms stops for a person.
    S.cleanup_pending: frozenset({S.cleaning_up, S.cleanup_unconfirmed}),
    S.cleaning_up: frozenset({S.failed, S.cancelled, S.expired, S.cleanup_unconfirmed}),
    # A person looks again (fresh deadline, no second call), calls it once more, or
    # leaves the resources and abandons the operation (the history keeps ended_as).
    S.cleanup_unconfirmed: frozenset({S.cleaning_up, S.cleanup_pending, S.abandoned}),
    S.escalated: frozenset({S.observing, S.cancel_requested, S.abandoned}),
    # Stopped-but-reconcilable states accept the same human decisions as escalated.
    S.result_timed_out: frozenset({S.observing, S.cancel_requested, S.abandoned}),
    S.cancellation_unconfirmed: frozenset({S.cancelling, S.abandoned}),
    S.succeeded: frozenset(),
    S.failed: frozenset(),
    S.cancelled: frozenset(),
    S.expired: frozenset(),
    S.result_unavailable: frozenset(),
    # Ended for automation; a person may still accept the collected result (AFTER_END).
    S.result_validation_failed: frozenset({S.result_accepted}),
    S.abandoned: frozenset(),
    S.approval_expired: frozenset(),
    S.result_accepted: frozenset(),
}

# The only ways out of an ended state: a person's business decision that the end was
# acceptable after all. Automation never takes them, and the operation stays ended (its
# concurrency key is free, no timer wakes it); the history records who decided and why.
AFTER_END: dict[OperationState, frozenset[OperationState]] = {
    S.result_validation_failed: frozenset({S.result_accepted}),
}

TERMINAL: frozenset[OperationState] = frozenset(
    s for s, nxt in TRANSITIONS.items() if not (nxt - AFTER_END.get(s, frozenset()))
)

# States in which no worker acts until a human decides.
AUTOMATION_STOPPED: frozenset[OperationState] = frozenset(
    {S.escalated, S.result_timed_out, S.cancellation_unconfirmed, S.cleanup_unconfirmed}
)


# Why automation stopped (DESIGN.md, escalation reasons): each one fixes the options a
# person may pick (models/humans/escalation.py).
class EscalationReason(StrEnum):
    deadline_exceeded = "deadline_exceeded"  # the result deadline passed while the job ran
    request_budget_exhausted = "request_budget_exhausted"  # no status request left to send
    rate_limited = "rate_limited"  # too many consecutive 429s
    unknown_state = "unknown_state"  # a state the contract does not name, or an unexpected 404
    authorization_denied = "authorization_denied"  # 401/403: never retry the same credential
    provider_failure = "provider_failure"  # transport budget spent, or a refused request
    contract_violation = "contract_violation"  # the provider contradicted itself or the contract
    cancellation_unconfirmed = "cancellation_unconfirmed"  # cancel bounds ran out unconfirmed
    internal_error = "internal_error"  # a step kept crashing on this operation (a bug, or input)
    # A reconciling create is not the one approved; it may have reached the approved target.
    approval_stale = "approval_stale"


# States waiting for room under their concurrency key: no task, no timer, no lease; the
# hand-over (models/concurrency.py) is the only way on besides a person's cancel.
WAITING_FOR_ROOM: frozenset[OperationState] = frozenset({S.queued})

# States whose step is a status read: the decision recorded in one may reserve the next.
POLLED: frozenset[OperationState] = frozenset({S.accepted, S.observing, S.cancelling})

# States of the cleanup step (models/cleanup.py): the call, then its confirmation.
CLEANING: frozenset[OperationState] = frozenset({S.cleanup_pending, S.cleaning_up})

# States a human decision may leave from.
HUMAN_ONLY_SOURCES: frozenset[OperationState] = AUTOMATION_STOPPED | {S.awaiting_approval}

# Ended after a known failure: automation is done, but the two business decisions only a
# person takes remain (models/humans/escalation.py): resubmit as a new operation with a new token,
# and, after a validation failure, accept the collected result as it is.
ENDED_WITH_OPTIONS: frozenset[OperationState] = frozenset(
    {S.failed, S.expired, S.cancelled, S.result_validation_failed, S.result_unavailable}
)

# States whose page, `show` and API answer list a person's options.
OFFERS_OPTIONS: frozenset[OperationState] = HUMAN_ONLY_SOURCES | ENDED_WITH_OPTIONS


def is_allowed(src: OperationState, dst: OperationState) -> bool:
    return dst in TRANSITIONS[src]


def check_transition(src: OperationState, dst: OperationState) -> None:
    """Raise TransitionRefusedError unless src -> dst is in the table."""
    if src == dst:
        raise TransitionRefusedError(src.value, dst.value, "an operation does not move to itself")
    if src in TERMINAL and dst not in AFTER_END.get(src, frozenset()):
        raise TransitionRefusedError(src.value, dst.value, f"{src.value} is terminal")
    if dst not in TRANSITIONS[src]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[src]))
        raise TransitionRefusedError(
            src.value, dst.value, f"{src.value} may only move to: {allowed}"
        )
