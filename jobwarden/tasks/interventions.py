"""Interventions on a recorded operation: cancel requests, approvals, human decisions.

Each records the intent as a fenced write with its event first; a worker then
acts on it. None of them sends anything to the provider itself.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from jobwarden.models.actions import EscalationReason
from jobwarden.models.business_deadline import passed
from jobwarden.models.cancel_requests import decide_cancel_request
from jobwarden.models.errors import LeaseNotAcquiredError, RefusedInputError, StaleVersionError
from jobwarden.models.escalation import (
    Bounds,
    EscalationView,
    Option,
    OptionKind,
    apply_option,
    options_for,
)
from jobwarden.models.history import EventDraft, EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.concurrency import after_end
from jobwarden.tasks.dispatch import enqueue
from jobwarden.tasks.leases import operation_lease
from jobwarden.tasks.runtime import Runtime, current, utcnow


def request_cancel(
    operation_id: str, requested_by: str, reason: str, runtime: Runtime | None = None
) -> str:
    """Record the intent to cancel at once, whatever the state; a worker carries it out.

    Returns the operation's state afterwards (``abandoned`` when nothing was sent yet).
    Raises RefusedInputError only when the operation has ended.
    """
    rt = runtime or current()
    op_id = uuid.UUID(operation_id)
    last_version = 0
    for _ in range(5):
        # Wait briefly for an in-flight poll to finish so its observation is not lost; if
        # it does not, the fenced write below still refuses to overwrite it.
        try:
            with contextlib.ExitStack() as held, transaction(rt.settings.database_url) as session:
                with contextlib.suppress(LeaseNotAcquiredError):
                    held.enter_context(
                        operation_lease(
                            rt.redis,
                            rt.settings.key_prefix,
                            op_id,
                            rt.settings.lease_ttl_seconds,
                            wait_seconds=rt.settings.lease_ttl_seconds,
                        )
                    )
                now = utcnow()
                row = store.load(session, op_id)
                if row is None:
                    raise RefusedInputError(f"no operation {operation_id}")
                window = (
                    row.cancel_window_seconds
                    or rt.contract(row.provider).limits.cancel_deadline_seconds
                )
                move = decide_cancel_request(
                    row,
                    now=now,
                    window=timedelta(seconds=window),
                    requested_by=requested_by,
                    reason=reason,
                )
                if move is None:
                    return row.state.value
                last_version = row.version
                requested = EventDraft(
                    kind=EventKind.cancel_requested,
                    actor=f"user:{requested_by}",
                    at=now,
                    from_state=row.state.value if move.to else None,
                    to_state=move.to.value if move.to else None,
                    cause=move.cause,
                )
                changes = dict(move.changes)
                if move.to is S.abandoned:
                    changes |= {"next_poll_at": None, "dispatched_at": None}
                elif move.due:
                    changes |= _due_now(now)
                if move.to is None:
                    stored = store.fenced_update(
                        session, row, changes=changes, drafts=[requested], now=now
                    )
                else:
                    stored = _intervene(session, row, requested, changes)
        except StaleVersionError:
            continue
        if move.due:
            enqueue(rt, op_id, stored.state)
        after_end(rt, stored)
        return stored.state.value
    # Five lost races in a row: the operation is busy; the caller may simply ask again.
    raise StaleVersionError(operation_id, last_version)


def _intervene(
    session: Session, row: Operation, draft: EventDraft, changes: Mapping[str, Any]
) -> Operation:
    """Record a person's intervention as one fenced move, explained by ``draft``."""
    move = {**changes, "state": draft.to_state}
    return store.fenced_update(session, row, changes=move, drafts=[draft], now=draft.at)


def _due_now(now: datetime) -> dict[str, Any]:
    # Due at once: if the wake-up message is lost, the sweeper re-sends it.
    return {"next_poll_at": now, "dispatched_at": now}


def escalation_options(operation_id: str, runtime: Runtime | None = None) -> list[Option]:
    """The bounded options a human may pick for a stopped operation."""
    rt = runtime or current()
    with transaction(rt.settings.database_url) as session:
        row = store.load(session, uuid.UUID(operation_id))
        if row is None:
            raise RefusedInputError(f"no operation {operation_id}")
        return options_for(_escalation_view(rt, row))


def _escalation_view(rt: Runtime, row: Operation) -> EscalationView:
    reason = row.escalation_reason
    return EscalationView(
        state=row.state,
        reason=EscalationReason(reason) if reason else None,
        has_remote_job=row.remote_job_id is not None and row.status_url is not None,
        contract_has_cancel=rt.contract(row.provider).cancel is not None,
        extensions_used=row.extensions_used,
        business_deadline_passed=passed(row.business_deadline, utcnow()),
    )


def decide_escalation(
    operation_id: str, option: str, approver: str, note: str = "", runtime: Runtime | None = None
) -> str:
    """Apply a human's pick from the offered options; returns the new state.

    Raises RefusedInputError when the option is not on offer. Counters are never
    reset: bounds are raised and the new bounds are recorded in the event.
    """
    rt = runtime or current()
    kind = OptionKind(option) if option in OptionKind.__members__ else None
    if kind is None:
        raise RefusedInputError(
            f"unknown option {option!r}; options are {', '.join(OptionKind.__members__)}"
        )
    now = utcnow()
    with transaction(rt.settings.database_url) as session:
        row = store.load(session, uuid.UUID(operation_id))
        if row is None:
            raise RefusedInputError(f"no operation {operation_id}")
        view = _escalation_view(rt, row)
        limits = rt.contract(row.provider).limits
        changes = apply_option(
            view,
            kind,
            Bounds(
                result_deadline=row.result_deadline,
                max_status_requests=row.max_status_requests,
                max_transport_failures=row.max_transport_failures,
                cancel_deadline=row.cancel_deadline,
            ),
            now=now,
            cancel_window=timedelta(
                seconds=row.cancel_window_seconds or limits.cancel_deadline_seconds
            ),
        )
        # The event carries the new bounds, so the history shows what a human widened and
        # by how much; counters are never reset (a decision raises limits instead).
        bounds = {
            k: (v.isoformat() if hasattr(v, "isoformat") else v)
            for k, v in changes.items()
            if k not in ("state", "dispatched_at")
        }
        decided = EventDraft(
            kind=EventKind.human_decision,
            actor=f"human:{approver}",
            at=now,
            from_state=row.state,
            to_state=changes["state"],
            cause=kind.value,
            excerpt={
                "option": kind.value,
                "note": note,
                "escalation_reason": row.escalation_reason,
                "new_bounds": bounds,
            },
        )
        stored = _intervene(session, row, decided, changes)
    enqueue(rt, stored.operation_id, stored.state)
    after_end(rt, stored)
    return stored.state.value


def approve(
    operation_id: str,
    fingerprint: str,
    approver: str,
    valid_for_seconds: float = 3600,
    runtime: Runtime | None = None,
) -> str:
    """Approve an operation waiting for approval; bound to its fingerprint, and expiring.

    Raises RefusedInputError when the operation is not awaiting approval or the
    fingerprint differs (a changed payload needs a new approval).
    """
    rt = runtime or current()
    now = utcnow()
    with transaction(rt.settings.database_url) as session:
        row = store.load(session, uuid.UUID(operation_id))
        if row is None or row.state is not S.awaiting_approval:
            raise RefusedInputError(f"operation {operation_id} is not awaiting approval")
        if row.request_fingerprint != fingerprint:
            raise RefusedInputError(
                "the approval names a different fingerprint than the "
                "operation's; a changed payload needs a new approval"
            )
        # An approval expires: the create step refuses to send under a stale one, so an
        # approval given today cannot authorise a create a week from now.
        expires = now + timedelta(seconds=valid_for_seconds)
        approved = EventDraft(
            kind=EventKind.approved,
            actor=f"human:{approver}",
            at=now,
            from_state=row.state,
            to_state=S.create_pending.value,
            excerpt={"fingerprint": fingerprint, "expires_at": expires.isoformat()},
        )
        changes = {"authorised_by": approver, "approval_expires_at": expires, **_due_now(now)}
        stored = _intervene(session, row, approved, changes)
    enqueue(rt, stored.operation_id, stored.state)
    return stored.state.value
