"""Intake: the one function behind the Python call, the Celery task and the HTTP API.

The key is claimed atomically (unique tenant + key) before anything else
happens; the intent row is committed before any message is published.
"""

from __future__ import annotations

import dataclasses
import secrets
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import MISSING, dataclass, replace
from enum import StrEnum
from typing import Any

from sqlalchemy import String
from sqlalchemy.orm import Session

from jobwarden.models.contracts.contract import ProviderContract
from jobwarden.models.errors import RefusedInputError, SubmissionInProgressError
from jobwarden.models.intake.attendance import NoWorkerWarning
from jobwarden.models.intake.fingerprint import request_fingerprint, show_key
from jobwarden.models.intake.follow_ups import Link, check_amount, check_parent_state_now
from jobwarden.models.intake.intent import Intake, initial_state, open_operation
from jobwarden.models.intake.submission import (
    ACTOR_PREFIX,
    FieldLimits,
    Submission,
    SubmissionRequest,
)
from jobwarden.models.intake.trace_context import trace_id_from
from jobwarden.models.persistence import (
    api_store,
    concurrency_store,
    follow_up_store,
    intake_store,
    store,
)
from jobwarden.models.persistence.api_store import IntakeEntry
from jobwarden.models.persistence.db import claim_session, transaction
from jobwarden.models.persistence.intake_store import Stored
from jobwarden.models.persistence.tables import Base, EventRow, OperationRow
from jobwarden.models.states import TERMINAL
from jobwarden.models.states import OperationState as S
from jobwarden.observability import telemetry
from jobwarden.tasks.dispatch import enqueue
from jobwarden.tasks.heartbeat import Attendance, no_worker
from jobwarden.tasks.provider.wakeup_backlog import owner_of
from jobwarden.tasks.runtime import Runtime, current, utcnow


def _length(row: type[Base], name: str) -> int:
    column_type = row.__table__.c[name].type
    if not isinstance(column_type, String) or column_type.length is None:
        raise TypeError(f"{row.__tablename__}.{name} is not a String column with a length")
    return column_type.length


# Read from the tables so the rules cannot drift from what Postgres will store.
LIMITS = FieldLimits(
    tenant=_length(OperationRow, "tenant"),
    provider=_length(OperationRow, "provider"),
    idempotency_key=_length(OperationRow, "idempotency_key"),
    source_event_id=_length(OperationRow, "source_event_id"),
    # requested_by is also authorized_by and, prefixed, the intent event's actor.
    requested_by=min(
        _length(OperationRow, "requested_by"),
        _length(OperationRow, "authorized_by"),
        _length(EventRow, "actor") - len(ACTOR_PREFIX),
    ),
    method=_length(OperationRow, "method"),
    route=_length(OperationRow, "route"),
    concurrency_key=_length(OperationRow, "concurrency_key"),
)


class SubmitOutcome(StrEnum):
    created = "created"  # a new operation was recorded
    replayed = "replayed"  # same key, same fingerprint: the existing operation
    in_progress = "in_progress"  # same key is being recorded by a concurrent submission
    conflict = "conflict"  # same key, different fingerprint: nothing touched
    duplicate_event = "duplicate_event"  # the source event already has an operation


@dataclass(frozen=True, slots=True, kw_only=True)
class SubmitResult:
    outcome: SubmitOutcome
    operation_id: str | None
    state: str | None
    fingerprint: str
    # The operation's trace id (a caller's traceparent, else ours); None when in progress.
    trace_id: str | None = None
    # A replay's: the state the creating answer named (the HTTP door repeats that answer).
    created_state: str | None = None
    # Advice about now, not part of the recorded answer: no worker consumes the queue the
    # operation waits on (issue 36, point 5). Empty when one does, or nothing waits.
    warnings: tuple[NoWorkerWarning, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "operation_id": self.operation_id,
            "state": self.state,
            "fingerprint": self.fingerprint,
            "trace_id": self.trace_id,
            "warnings": [w.as_dict() for w in self.warnings],
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Caller:
    """Who knocked, for the intake log: set by a door, never by a message's fields."""

    actor: str | None = None  # None: submitter:<requested_by>
    token_id: uuid.UUID | None = None
    # The principal a schedule submits for (its author): in the intent event, so that
    # principal can never approve it (models/humans/approvals.py). Set by a door only.
    on_behalf_of: str | None = None
    # A break-glass submitter's reason: marked on the intent event, as on every decision.
    break_glass: str | None = None
    # The HTTP door's status code per outcome ("invalid" included); None elsewhere.
    http_statuses: Mapping[str, int] | None = None


def submit_operation(
    *,
    door: str = "python",
    caller: Caller | None = None,
    runtime: Runtime | None = None,
    **fields: Any,
) -> SubmitResult:
    """The Python door (``jobwarden.submit``): its keywords are SubmissionRequest's fields.

    TypeError for a keyword that is no field or a missing required one; otherwise
    exactly submit_request.
    """
    return submit_request(SubmissionRequest(**fields), door=door, caller=caller, runtime=runtime)


def submit_request(
    request: SubmissionRequest,
    *,
    door: str,
    caller: Caller | None = None,
    runtime: Runtime | None = None,
    resubmit_of: uuid.UUID | None = None,
    derived_key: bool = False,
    follow_up: Link | None = None,
    attendance: Attendance | None = None,
) -> SubmitResult:
    """Record an operation's intent and hand it to the workers: every door's one call.

    Raises InvalidSubmissionError naming the field and the rule for any input the
    rules in models/intake/submission.py refuse; nothing but an intake-log entry is recorded
    then. The row, its intent event and the intake-log entry are written in one
    transaction, so a failure leaves none. A valid W3C ``trace_parent`` gives the
    operation its trace id; an invalid one is ignored. ``resubmit_of`` is set only by a
    person's resubmission (tasks/humans/interventions.py), never by a caller's request;
    ``derived_key`` only by jobwarden's own key derivations (resubmission, schedule slots),
    the one way into a reserved key namespace (models/intake/reserved_keys.py, invariant 17).
    ``follow_up``: set only by tasks/follow_ups.py; the parent's lock, state and amount
    rule are checked in the claim's transaction (AmountLimitError, ParentStateError).
    ``attendance``: the queue's heartbeats as the door already read them in a Redis trip of
    its own (the HTTP door, with its revocation epoch); read here otherwise.
    """
    rt = runtime or current()
    who = caller or Caller()
    try:
        sub = request.check(limits=LIMITS, providers=rt.contracts, derived_key=derived_key)
    except RefusedInputError as exc:
        _log_invalid(
            rt, door, who, request.tenant, request.idempotency_key, request.requested_by, str(exc)
        )
        raise
    # Tracing on: the submission's span continues the caller's trace (or the HTTP
    # request's), and its context is what every step's span hangs from.
    # Tracing off here (a service calling jobwarden.submit, say), the caller's own valid
    # traceparent is what the steps' spans hang from.
    with telemetry.submit_span(request.trace_parent) as traced:
        caller_trace = trace_id_from(traced or request.trace_parent)
        recorded = traced
        if recorded is None and caller_trace is not None and request.trace_parent is not None:
            recorded = request.trace_parent.strip(" \t")
        try:
            submitted = _submit(rt, sub, door, who, caller_trace, resubmit_of, recorded, follow_up)
        except RefusedInputError as exc:
            # Refused under the parent's lock (a follow-up's state or amount): on the record.
            _log_invalid(rt, door, who, sub.tenant, sub.idempotency_key, sub.requested_by, str(exc))
            raise
        return _advised(rt, submitted, attendance)


# How long a claim waits for a concurrent submission of the same key to commit before
# answering in_progress.
LOCK_TIMEOUT = "5s"

# The answers that name an operation a worker must still drive.
_WAITING_ANSWERS = frozenset(
    {SubmitOutcome.created, SubmitOutcome.replayed, SubmitOutcome.duplicate_event}
)
_ENDED = frozenset(s.value for s in TERMINAL)


def _advised(rt: Runtime, result: SubmitResult, seen: Attendance | None) -> SubmitResult:
    """``result`` with a no-worker warning when its operation waits on a queue nobody
    consumes: one Redis round trip (the newest heartbeat; none when the door read it
    already), never Celery's broadcast."""
    if result.outcome not in _WAITING_ANSWERS or result.state in _ENDED:
        return result
    warning = no_worker(rt.redis, rt.settings, seen)
    return result if warning is None else replace(result, warnings=(warning,))


def _log_invalid(
    rt: Runtime, door: str, who: Caller, tenant: object, key: object, by: object, why: str
) -> None:
    """Record a refused submission when its tenant and key can be stored as they are."""
    if not (_storable(tenant, LIMITS.tenant) and _storable(key, LIMITS.idempotency_key)):
        return  # the refusal is about these very fields; the answer names it
    shown = by if _storable(by, LIMITS.requested_by) else ascii(by)[: LIMITS.requested_by]
    actor = who.actor or f"{ACTOR_PREFIX}{shown}"
    entry = _entry(door, who, actor, str(tenant), str(key), None, "invalid", None, None, None)
    with transaction(rt.settings.database_url) as session:
        api_store.append_intake(session, replace(entry, detail=why[:2000]))


def _storable(value: object, limit: int) -> bool:
    return isinstance(value, str) and 0 < len(value) <= limit and value.isprintable()


def _entry(
    door: str,
    who: Caller,
    actor: str,
    tenant: str,
    key: str,
    fingerprint: str | None,
    outcome: str,
    operation_id: str | None,
    state: str | None,
    trace_id: str | None,
) -> IntakeEntry:
    statuses = who.http_statuses
    return IntakeEntry(
        at=utcnow(),
        door=door,
        actor=actor,
        token_id=who.token_id,
        tenant=tenant,
        idempotency_key=key,
        fingerprint=fingerprint,
        outcome=outcome,
        operation_id=uuid.UUID(operation_id) if operation_id else None,
        state=state,
        http_status=statuses[outcome] if statuses is not None else None,
        trace_id=trace_id,
    )


def _submit(
    rt: Runtime,
    sub: Submission,
    door: str,
    who: Caller,
    caller_trace: str | None,
    resubmit_of: uuid.UUID | None = None,
    traced: str | None = None,
    follow_up: Link | None = None,
) -> SubmitResult:
    # The version new operations pin (invariant 16): this process's current contract.
    version = rt.version(sub.provider)
    contract = version.contract
    if follow_up is not None and follow_up.requires_approval:
        # The parent's declaration demands the follow-up's own approval (a rollback).
        contract = replace(contract, requires_approval=True)
    fingerprint = request_fingerprint(
        method=sub.method,
        route=sub.route,
        tenant=sub.tenant,
        provider=sub.provider,
        command=sub.command,
        concurrency_key=sub.concurrency_key,
    )
    actor = who.actor or f"{ACTOR_PREFIX}{sub.requested_by}"
    intake = Intake(
        operation_id=uuid.uuid4(),
        fingerprint=fingerprint,
        trace_id=caller_trace or secrets.token_hex(16),
        actor=actor,
        resubmit_of=resubmit_of,
        contract_digest=version.digest,
        traceparent=traced,
        on_behalf_of=who.on_behalf_of,
        break_glass=who.break_glass,
        follow_up=follow_up,
    )
    url = rt.settings.database_url
    # Without a concurrency key or a parent the claim is one statement, its own
    # transaction, on a connection that carries the lock timeout (db.claim_session): no
    # BEGIN, SET LOCAL or COMMIT around it. A concurrency key's lock, and a follow-up's
    # lock on its parent (the amounts so far are summed under it), must be held until
    # the row is in: in autocommit each would be released by its own statement, and two
    # refunds racing for the remainder would both be accepted. Those claims run in a
    # transaction of their own.
    keyed = sub.concurrency_key is not None or follow_up is not None
    try:
        with (
            transaction(url) if keyed else claim_session(url, lock_timeout=LOCK_TIMEOUT)
        ) as session:
            occupancy = None
            if sub.concurrency_key is not None:
                # Held until this commit, so the count cannot go stale before the row is
                # in (see concurrency_store.lock_key for the race).
                concurrency_store.lock_key(session, sub.tenant, sub.concurrency_key)
                occupancy = concurrency_store.occupancy(session, sub.tenant, sub.concurrency_key)
            if follow_up is not None:
                _check_follow_up(session, sub, follow_up)
            op, intent = open_operation(sub, contract, occupancy, utcnow(), intake=intake)
            created = SubmitResult(
                outcome=SubmitOutcome.created,
                operation_id=str(op.operation_id),
                state=op.state.value,
                fingerprint=fingerprint,
                trace_id=op.trace_id,
            )
            # Every answer is on the record, in the transaction that decided it: the
            # created entry in the claim's own statement, and so a replay's or a
            # conflict's when that statement can see the stored operation; else the
            # answer is read and logged here, after it.
            claim = intake_store.claim(
                session,
                op,
                intent,
                _logged(door, who, actor, sub, created),
                lock_timeout=LOCK_TIMEOUT if keyed else None,
                contract_text=version.text,
                answer_taken=True,
                http_statuses=who.http_statuses,
            )
            stored = claim.inserted
            if stored is not None:
                result = created
            elif claim.taken is not None:
                result = _answer(claim.taken, fingerprint, contract)
            else:
                result = _existing(session, sub, fingerprint, contract)
                intake_store.log(session, _logged(door, who, actor, sub, result))
    except SubmissionInProgressError:
        # A concurrent submission holding the key longer than the lock timeout decides.
        result = SubmitResult(
            outcome=SubmitOutcome.in_progress,
            operation_id=None,
            state=None,
            fingerprint=fingerprint,
        )
        # The insert's transaction is gone; the answer is recorded on its own.
        with transaction(rt.settings.database_url) as session:
            api_store.append_intake(session, _logged(door, who, actor, sub, result))
        return result
    if stored is not None and stored.state is S.create_pending:
        enqueue(rt, stored.operation_id, stored.state, owner=owner_of(stored))
    return result


def _check_follow_up(session: Session, sub: Submission, link: Link) -> None:
    """Under the parent's row lock, held until this transaction ends: the parent still
    allows the follow-up, and its amount fits what remains (a key already taken is the
    same instruction again: its answer is a replay or a conflict, never a second charge
    against the limit)."""
    check_parent_state_now(link, follow_up_store.lock_parent(session, link.parent))
    if link.amount is None or store.find_by_key(session, sub.tenant, sub.idempotency_key):
        return
    check_amount(link, follow_up_store.requested_so_far(session, link.parent, link.kind))


def _logged(door: str, who: Caller, actor: str, sub: Submission, r: SubmitResult) -> IntakeEntry:
    return _entry(
        door,
        who,
        actor,
        sub.tenant,
        sub.idempotency_key,
        r.fingerprint,
        r.outcome.value,
        r.operation_id,
        r.state,
        r.trace_id,
    )


def _existing(
    session: Session, sub: Submission, fingerprint: str, contract: ProviderContract
) -> SubmitResult:
    taken = intake_store.stored(session, sub.tenant, sub.idempotency_key)
    if taken is not None:
        return _answer(taken, fingerprint, contract)
    if sub.source_event_id is not None:
        row = store.find_by_source_event(session, sub.tenant, sub.provider, sub.source_event_id)
        if row is not None:
            return SubmitResult(
                outcome=SubmitOutcome.duplicate_event,
                operation_id=str(row.operation_id),
                state=row.state,
                fingerprint=fingerprint,
                trace_id=row.trace_id,
            )
    return SubmitResult(
        outcome=SubmitOutcome.in_progress, operation_id=None, state=None, fingerprint=fingerprint
    )


def _answer(taken: Stored, fingerprint: str, contract: ProviderContract) -> SubmitResult:
    """A taken key's answer: conflict is checked before anything else, and the stored
    operation is not touched (the same rule as the claim's statement, intake_store._TAKEN)."""
    replayed = taken.request_fingerprint == fingerprint
    return SubmitResult(
        outcome=SubmitOutcome.replayed if replayed else SubmitOutcome.conflict,
        operation_id=str(taken.operation_id),
        state=taken.state,
        fingerprint=fingerprint,
        trace_id=taken.trace_id,
        created_state=_created_state(taken.created_state, contract) if replayed else None,
    )


def _created_state(logged: str | None, contract: ProviderContract) -> str:
    """The state the answer that created the operation named, so a replay can repeat it."""
    if logged is not None:
        return logged
    # Created before the intake log existed: the state its contract starts one in, as
    # far as the contract says (a queue it waited in is not on the record).
    return initial_state(contract, None).value


# The caller's fields; runtime is the process's own and never comes from a message.
# door and caller are the door's to say: a Celery message is the celery door.
MESSAGE_FIELDS = frozenset(f.name for f in dataclasses.fields(SubmissionRequest))
REQUIRED_FIELDS = frozenset(
    f.name
    for f in dataclasses.fields(SubmissionRequest)
    if f.default is MISSING and f.default_factory is MISSING
)


def _name(key: object) -> str:
    """A keyword name for an error line: a plain one as it is, anything else escaped."""
    if not isinstance(key, str):
        return ascii(key)
    return key if key.isascii() and key.isidentifier() and len(key) <= 40 else show_key(key)


def _names(keys: Iterable[object]) -> str:
    return ", ".join(sorted(_name(k) for k in keys))


def _message_problem(kwargs: object) -> str | None:
    if not isinstance(kwargs, Mapping):
        return f"the submission must be keyword arguments, got {type(kwargs).__name__}"
    if "runtime" in kwargs:
        return "runtime is internal to the worker and cannot be passed to jobwarden.submit"
    if "door" in kwargs or "caller" in kwargs:
        return "door and caller are set by the intake itself and cannot be passed"
    unknown = [k for k in kwargs if k not in MESSAGE_FIELDS]
    if unknown:
        return f"unknown keyword arguments: {_names(unknown)}"
    missing = REQUIRED_FIELDS - set(kwargs)
    if missing:
        return f"missing keyword arguments: {_names(missing)}"
    return None


def submit_from_message(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The Celery intake's answer: the submission's outcome, or why it is invalid.

    Every invalid message (unknown or missing keywords, a runtime, any field a rule
    refuses) answers {"outcome": "invalid", "error": ...} and records nothing; only
    infrastructure failures (Postgres unreachable) raise, for Celery to report.
    """
    problem = _message_problem(kwargs)
    if problem is not None:
        return {"outcome": "invalid", "error": problem}
    try:
        return submit_request(SubmissionRequest(**kwargs), door="celery").as_dict()
    except RefusedInputError as exc:
        return {"outcome": "invalid", "error": str(exc)}
