"""What a person's "stop" means in each state: the intent is always recorded at once.

Pure: a frozen operation, the time and the cancel window in, the move out. Only a
terminal operation refuses; before the create leaves, a cancel ends the operation
without sending it; while the create is ambiguous, the intent waits for
reconciliation and is carried out once the remote job is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from jobwarden.models.actions import Decided, Record
from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.states import AUTOMATION_STOPPED, CLEANING, TERMINAL, OperationState

S = OperationState

# States where the remote job is known and running (or stopped but reconcilable).
CANCELLABLE: frozenset[S] = frozenset({S.accepted, S.observing, S.escalated, S.result_timed_out})
# The create may have left and its outcome is not known yet: reconcile first.
AWAITING_RECONCILIATION: frozenset[S] = frozenset({S.create_unknown, S.reconciling})


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelMove:
    """``to`` None records the intent without a transition (it is carried out later)."""

    to: S | None
    changes: RowChanges
    cause: str
    due: bool  # a worker must look at the operation now

    def decided(self, now: datetime) -> Decided:
        """The write this move makes: the intent, its event, and a wake-up if due."""
        # Due at once: if the wake-up message is lost, the sweeper re-sends it.
        record = Record(
            event=EventKind.cancel_requested,
            to=self.to,
            cause=self.cause,
            wake_at=now if self.due else None,
        )
        return Decided(action=record, changes=self.changes)


def create_in_flight(op: Operation) -> bool:
    """Whether a create may exist at the provider: any attempt was sent, and the latest
    answer was not a 429 (which created nothing). A claim with no recorded outcome, or a
    409 "still processing our token", both count: only reconciliation can tell."""
    # create_refused too: histories from before create_rate_limited recorded a 429 so.
    nothing_created = (EventKind.create_rate_limited, EventKind.create_refused)
    return op.create_attempts > 0 and op.last_event_kind not in nothing_created


def decide_cancel_request(
    op: Operation, *, now: datetime, window: timedelta, requested_by: str, reason: str
) -> CancelMove | None:
    """The move a cancel request makes; None when one is already under way.

    Raises RefusedInputError only for a terminal operation (nothing left to stop).
    """
    state = op.state
    if state in TERMINAL:
        raise RefusedInputError(f"operation {op.operation_id} is {state.value}: it has ended")
    if state in (S.cancel_requested, S.cancelling):
        return None
    intent: RowChanges = {"cancel_requested_by": requested_by, "cancel_reason": reason}
    if state in (S.awaiting_approval, S.queued) or (
        state is S.create_pending and not create_in_flight(op)
    ):
        # Nothing was sent, so nothing exists remotely: the operation ends here.
        cause = f"{reason} (cancelled before the create was sent)"
        return CancelMove(to=S.abandoned, changes=intent, cause=cause, due=False)
    if state in CANCELLABLE:
        changes: RowChanges = {**intent, "cancel_deadline": now + window}
        return CancelMove(to=S.cancel_requested, changes=changes, cause=reason, due=True)
    if state is S.create_pending:
        # The create may exist: its outcome becomes an explicit unknown now, so no later
        # step mistakes this cancel's event for a recorded answer and resends blindly.
        cause = f"{reason} (recorded; the create's outcome is reconciled first)"
        return CancelMove(to=S.create_unknown, changes=intent, cause=cause, due=True)
    if state in AWAITING_RECONCILIATION:
        cause = f"{reason} (recorded; carried out once reconciliation finds the remote job)"
        return CancelMove(to=None, changes=intent, cause=cause, due=True)
    if state is S.result_collecting:
        cause = f"{reason} (recorded; the remote job already finished, its result is collected)"
        return CancelMove(to=None, changes=intent, cause=cause, due=False)
    if state in CLEANING:
        cause = f"{reason} (recorded; the remote job already ended, what it left is cleaned up)"
        return CancelMove(to=None, changes=intent, cause=cause, due=False)
    if state in AUTOMATION_STOPPED:
        cause = f"{reason} (recorded; a human decides, see the options)"
        return CancelMove(to=None, changes=intent, cause=cause, due=False)
    raise RefusedInputError(f"operation {op.operation_id} is {state.value}")  # pragma: no cover
