"""Interventions on a recorded operation: cancel requests, approvals, human decisions.

Each records the intent through ``steps.under_lease``: a pure decision in
``models/`` (``cancel_requests``, ``approvals``, ``escalation``), planned by
``plan()`` and written fenced with its event first; a worker then acts on it.
None of them sends anything to the provider itself.

Every one is made by an ``Author`` (models/humans/identity.py): the door's authenticated
principal, or a break-glass operator, which is marked on every event it writes and
logged at WARNING. The Python door may still pass a name (``named``: recorded as typed,
counted toward no two-person rule).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from jobwarden.models.actions import Decided
from jobwarden.models.errors import ApprovalRefusedError, LostRaceError, RefusedInputError
from jobwarden.models.humans.approvals import (
    decide_approval,
    decide_window,
    given_approvals,
    on_behalf_of,
)
from jobwarden.models.humans.cancel_requests import decide_cancel_request
from jobwarden.models.humans.escalation import (
    EscalationView,
    Option,
    OptionKind,
    decide_option,
    decide_resubmitted,
    offered_with_reason,
    options_for,
    view_of,
)
from jobwarden.models.humans.identity import HUMAN, Author, AuthorKind, as_author
from jobwarden.models.intake.attendance import NoWorkerWarning
from jobwarden.models.intake.resubmission import resubmission, resubmit_key
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import snapshot, transaction
from jobwarden.models.polling.business_deadline import passed
from jobwarden.models.states import OperationState as S
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.concurrency import after_end
from jobwarden.tasks.dispatch import enqueue
from jobwarden.tasks.intake import Caller, SubmitOutcome, submit_request
from jobwarden.tasks.provider.edge import shown_create_request
from jobwarden.tasks.runtime import Runtime, current, utcnow
from jobwarden.tasks.steps import Decide, Writer, Written, under_lease

log = get_logger("jobwarden.interventions")
# A person's write retries this many lost fenced races, then the caller may ask again.
HUMAN_ATTEMPTS = 5


def _as_person(
    rt: Runtime, operation_id: str, who: Author, decide: Decide, *, missing: str | None = None
) -> Written:
    """Write a person's intervention: it waits for a step in flight to finish so that
    step's observation is not lost; if the step keeps the lease, the fenced write
    still refuses to overwrite it. RefusedInputError(``missing``) when there is no
    such operation."""
    glass = who.kind is AuthorKind.break_glass
    writer = Writer(
        actor=f"{HUMAN}{who.actor}",
        wait_seconds=rt.settings.intervention_wait_seconds or rt.settings.lease_ttl_seconds,
        lease_required=False,
        attempts=HUMAN_ATTEMPTS,
        # Loud in the history: every event a break-glass act writes says so, and why.
        excerpt=who.excerpt() if glass else None,
    )
    written = under_lease(rt, uuid.UUID(operation_id), decide, writer)
    if written is None:
        raise RefusedInputError(missing or f"no operation {operation_id}")
    if glass and written.stored is not written.found:
        log.warning(
            "break_glass_decision",
            operation_id=operation_id,
            actor=who.actor,
            reason=who.reason,
            state=written.stored.state.value,
        )
    return written


def _cancel_window(rt: Runtime, op: Operation) -> timedelta:
    seconds = op.cancel_window_seconds or rt.contract_for(op).limits.cancel_deadline_seconds
    return timedelta(seconds=seconds)


def request_cancel(
    operation_id: str,
    requested_by: Author | str,
    reason: str,
    runtime: Runtime | None = None,
    *,
    send_during_pause: bool = False,
) -> str:
    """Record the intent to cancel at once, whatever the state; a worker carries it out.

    Returns the operation's state afterwards (``abandoned`` when nothing was sent yet).
    Raises RefusedInputError only when the operation has ended (or ``requested_by`` is
    a name spelt as a principal). While a pause holds the operation the cancel is sent on
    resume; ``send_during_pause``: this one cancel request may leave during the pause
    (cancelling is how a person stops damage), and the history names who allowed it.
    """
    rt = runtime or current()
    author = as_author(requested_by, "requested_by")

    def cancel(op: Operation, now: datetime) -> Decided | None:
        move = decide_cancel_request(
            op, now=now, window=_cancel_window(rt, op), requested_by=author.actor, reason=reason
        )
        if move is None:
            return None
        decided = move.decided(now)
        if send_during_pause:
            allowed: RowChanges = {"cancel_during_pause_by": author.actor}
            decided = replace(decided, changes={**decided.changes, **allowed})
        return decided

    written = _as_person(rt, operation_id, author, cancel)
    if written.plan.next_at is not None:
        enqueue(rt, written.stored.operation_id, written.stored.state)
    after_end(rt, written.stored)
    return written.stored.state.value


def escalation_options(operation_id: str, runtime: Runtime | None = None) -> list[Option]:
    """The bounded options a human may pick for a stopped or failed operation."""
    rt = runtime or current()
    with transaction(rt.settings.database_url) as session:
        row = store.load(session, uuid.UUID(operation_id))
        if row is None:
            raise RefusedInputError(f"no operation {operation_id}")
        return options_for(_escalation_view(rt, row))


def _escalation_view(rt: Runtime, row: Operation) -> EscalationView:
    contract = rt.contract_for(row)
    return view_of(
        row,
        contract_has_cancel=contract.cancel is not None,
        business_deadline_passed=passed(row.business_deadline, utcnow()),
        cleanup_checkable=contract.cleanup is not None and contract.cleanup.check_path is not None,
    )


def _decision_window(rt: Runtime, op: Operation) -> timedelta:
    """The fresh deadline a picked option starts: the cleanup's for a cleanup, else the
    cancel's."""
    cleanup = rt.contract_for(op).cleanup
    if op.state is S.cleanup_unconfirmed and cleanup is not None:
        return timedelta(seconds=cleanup.deadline_seconds)
    return _cancel_window(rt, op)


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What a person's pick did: the decided operation's state afterwards, and for a
    resubmission the new operation (its id and the state it starts in)."""

    operation_id: str
    state: str
    resubmitted_as: str | None = None
    resubmitted_state: str | None = None
    # The resubmission's advice about now: no worker consumes the queue it waits on.
    warnings: tuple[NoWorkerWarning, ...] = ()


def decide_escalation(  # noqa: PLR0913 - the door names itself for the intake log
    operation_id: str,
    option: str,
    approver: Author | str,
    note: str = "",
    *,
    runtime: Runtime | None = None,
    door: str = "python",
) -> Decision:
    """Apply a human's pick from the offered options.

    Raises RefusedInputError when the option is not on offer (or a business decision,
    resubmit or accept_result, gives no reason in ``note``). Counters are never reset:
    bounds are raised and the new bounds are recorded in the event.
    """
    rt = runtime or current()
    author = as_author(approver)
    kind = OptionKind(option) if option in OptionKind.__members__ else None
    if kind is None:
        raise RefusedInputError(
            f"unknown option {option!r}; options are {', '.join(OptionKind.__members__)}"
        )
    if kind is OptionKind.resubmit:
        return _resubmit(rt, operation_id, author, note, door)

    def pick(op: Operation, now: datetime) -> Decided:
        view = _escalation_view(rt, op)
        return decide_option(
            op, view, kind, note=note, now=now, cancel_window=_decision_window(rt, op)
        )

    stored = _as_person(rt, operation_id, author, pick).stored
    enqueue(rt, stored.operation_id, stored.state)
    after_end(rt, stored)
    return Decision(operation_id=str(stored.operation_id), state=stored.state.value)


def _resubmit(rt: Runtime, operation_id: str, who: Author, note: str, door: str) -> Decision:
    """A new operation for the same command, with a new token, linked both ways.

    The offer is checked first; the new operation goes through intake like any
    submission (its own approval where the contract demands one, the person as its
    submitter) under the key ``resubmit:<old id>``, so asking twice, or again after a
    crash between the two writes, makes one replacement and records the link once.
    """
    with snapshot(rt.settings.database_url) as session:
        old = store.load(session, uuid.UUID(operation_id))
    if old is None:
        raise RefusedInputError(f"no operation {operation_id}")
    if old.resubmitted_as is None:
        offered_with_reason(_escalation_view(rt, old), OptionKind.resubmit, note)
    answer = submit_request(
        resubmission(old, requested_by=who.actor),
        door=door,
        caller=Caller(actor=f"{HUMAN}{who.actor}", token_id=who.token_id, break_glass=who.reason),
        runtime=rt,
        resubmit_of=old.operation_id,
        derived_key=True,
    )
    if answer.operation_id is None:
        # Only a concurrent resubmission holding the key gets here: ask again.
        raise LostRaceError(f"a resubmission of {operation_id} is in progress; ask again")
    new_id = uuid.UUID(answer.operation_id)
    if answer.outcome is not SubmitOutcome.created:
        _refuse_unlinked(rt, old, new_id)

    def link(op: Operation, now: datetime) -> Decided | None:
        return decide_resubmitted(op, new_operation=new_id, note=note)

    written = _as_person(rt, operation_id, who, link)
    return Decision(
        operation_id=str(written.stored.operation_id),
        state=written.stored.state.value,
        resubmitted_as=answer.operation_id,
        resubmitted_state=answer.state,
        warnings=answer.warnings,
    )


def _refuse_unlinked(rt: Runtime, old: Operation, found: uuid.UUID) -> None:
    """Defence in depth (invariant 17): the operation already holding the replacement's
    key is adopted only when intake recorded it as ``old``'s resubmission. Intake refuses
    a caller's key in the reserved namespace, but a key planted before that rule (or by
    hand) would otherwise become the "replacement", with whatever command it holds."""
    with snapshot(rt.settings.database_url) as session:
        held = store.load(session, found)
    if held is None or held.resubmit_of != old.operation_id:
        raise RefusedInputError(
            f"idempotency key {resubmit_key(old)} is held by operation {found}, which is not "
            f"a resubmission of {old.operation_id}: refusing to adopt it (see `jobwarden keys "
            "check`)"
        )


class _HistoryMovedError(LostRaceError):
    """The history grew after the approvals were read: read them again."""


def approve(  # noqa: PLR0913 - request_digest is keyword-only, named by every door
    operation_id: str,
    fingerprint: str,
    approver: Author | str,
    valid_for_seconds: float = 3600,
    runtime: Runtime | None = None,
    *,
    request_digest: str | None = None,
) -> str:
    """Approve an operation waiting for approval; bound to its fingerprint and to the
    create as it would leave now (its request digest), and expiring.

    Raises RefusedInputError when the operation is not awaiting approval or the
    fingerprint differs (a changed payload needs a new approval), and its
    ApprovalRefusedError, naming the reason, when the approval window or the business
    deadline has passed. The create and result deadlines start at the approval.
    ``request_digest``: the digest the approver was shown, if the door knows it;
    RequestDigestMismatchError when the create would now leave differently.

    Under the two-person rule (the contract's ``approvals_required = 2``) the first
    approval is recorded and the state stays ``awaiting_approval``; the second, by
    another person, moves it on. AnotherApproverNeededError names why an approver
    cannot approve or count (the submitter, the principal a schedule submitted it on
    behalf of, who already approved, or anyone unauthenticated under the rule).
    """
    rt = runtime or current()
    author = as_author(approver)
    op_id = uuid.UUID(operation_id)
    missing = f"operation {operation_id} is not awaiting approval"
    for _ in range(HUMAN_ATTEMPTS):
        try:
            written = _as_person(
                rt,
                operation_id,
                author,
                _approval(
                    rt, op_id, fingerprint, author, valid_for_seconds, named_digest=request_digest
                ),
                missing=missing,
            )
        except _HistoryMovedError:
            continue
        except ApprovalRefusedError:
            # The window is over: end the operation now rather than at the next sweep, so
            # whoever was refused sees it ended (approval_expired), not still waiting.
            _close_window(rt, op_id)
            raise
        stored = written.stored
        if stored.state is not S.awaiting_approval:
            enqueue(rt, stored.operation_id, stored.state)
        return stored.state.value
    raise LostRaceError(f"operation {operation_id}: its approvals kept changing; ask again")


def _approval(  # noqa: PLR0913 - approve()'s own inputs, each named at the one call
    rt: Runtime,
    op_id: uuid.UUID,
    fingerprint: str,
    approver: Author,
    valid_for_seconds: float,
    *,
    named_digest: str | None,
) -> Decide:
    """The approval's decision, with what it needs from the history read beforehand."""
    # When it began waiting (its intent, or its admission by a concurrency key) and the
    # approvals given since: facts of its append-only history, read before the lease.
    with snapshot(rt.settings.database_url) as session:
        since = store.entered_at(session, op_id, S.awaiting_approval)
        read = store.load(session, op_id)
        events = store.events_for(session, op_id) if read is not None else []
    given, behalf = given_approvals(events), on_behalf_of(events)

    def approval(op: Operation, now: datetime) -> Decided:
        # Two approvers at once must not both count as the first: a history longer than
        # the one read means another approval may have landed; read it again.
        if read is not None and op.event_count != read.event_count:
            raise _HistoryMovedError(str(op_id))
        contract = rt.contract_for(op)
        window = timedelta(seconds=contract.limits.approval_window_seconds)
        # The create as this process would send it now, rendered as every door shows it:
        # the approval binds its digest, and the create step sends nothing else.
        shown = shown_create_request(rt.context_for(op), op)
        return decide_approval(
            op,
            fingerprint=fingerprint,
            approver=approver,
            now=now,
            valid_for=timedelta(seconds=valid_for_seconds),
            waiting_since=since or op.created_at,
            window=window,
            required=contract.approvals_required,
            given=given,
            behalf_of=behalf,
            request_digest=shown.digest,
            named_request_digest=named_digest,
            request_line=f"{shown.method} {shown.url}",
        )

    return approval


def _close_window(rt: Runtime, operation_id: uuid.UUID) -> None:
    """Automation's own write (the worker's actor): the approval-window step's decision,
    which ends the operation only if its window's end has come. A busy lease or a lost
    race leaves it to the sweeper, which wakes the same step at the window's end."""

    def close(op: Operation, now: datetime) -> Decided | None:
        return decide_window(op, now) if op.state is S.awaiting_approval else None

    try:
        written = under_lease(rt, operation_id, close)
    except LostRaceError:
        return
    if written is not None:
        after_end(rt, written.stored)
