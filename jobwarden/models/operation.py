"""The frozen snapshot of one operation, as a step read it.

Steps, decisions and the store pass this value, never an ORM row: nothing can
change it behind the fence, and the state is typed. A write returns a new
snapshot (``with_changes``) mirroring what was stored.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any, TypedDict

from jobwarden.models.conventions.strategies import Monitor
from jobwarden.models.history.chain import EventKind
from jobwarden.models.humans.holds import Hold
from jobwarden.models.states import EscalationReason, OperationState


@dataclass(frozen=True, slots=True, kw_only=True)
class Operation:
    operation_id: uuid.UUID
    tenant: str
    provider: str
    idempotency_key: str
    source_event_id: str | None
    provider_token: str
    request_fingerprint: str
    method: str
    route: str
    command: Mapping[str, Any]
    remote_job_id: str | None
    status_url: str | None
    state: OperationState
    version: int
    trace_id: str
    requested_by: str
    authorized_by: str | None
    approval_expires_at: datetime | None
    created_at: datetime
    accepted_at: datetime | None
    create_deadline: datetime
    result_deadline: datetime
    cancel_deadline: datetime | None
    cancel_window_seconds: float | None
    next_poll_at: datetime | None
    dispatched_at: datetime | None
    create_attempts: int
    status_requests_used: int
    max_status_requests: int
    transport_failures_used: int
    max_transport_failures: int
    consecutive_rate_limited: int
    poll_attempt: int
    extensions_used: int
    step_failures: int
    poll_not_before: datetime | None
    result_fetch_attempts: int
    collect_deadline: datetime | None
    first_sent_at: datetime | None
    # When the business stops wanting the work (0012); None: only the job's deadlines hold.
    business_deadline: datetime | None = None
    # The status request the last decision reserved and counted; None when none is.
    reserved_request: int | None = None
    # At most concurrency_limit unfinished operations of one tenant share this key (0011).
    concurrency_key: str | None = None
    concurrency_limit: int | None = None
    # Under an Azure convention, what the remote job is polled through (conventions.Monitor:
    # status_monitor, location, resource); None for every other contract (0013).
    polling_mode: Monitor | None = None
    # A person's resubmission links two operations both ways (0016): the new one names
    # the one it replaces, and that one names its replacement; None when there is none.
    resubmit_of: uuid.UUID | None = None
    resubmitted_as: uuid.UUID | None = None
    # How the job ended while its resources are being cleaned up ([cleanup], 0019): the
    # state it ends in once the cleanup is confirmed; and the confirmation's deadline.
    ended_as: OperationState | None = None
    cleanup_deadline: datetime | None = None
    # The digest of the create request its approval bound (models/outgoing.request_digest,
    # 0025): the create step sends only a request with this digest. None: none is bound.
    approved_request_digest: str | None = None
    # The digest of the contract text it was created under (0026); None: created before
    # contracts were pinned, so the current contract holds (models/contracts/pins.py).
    contract_digest: str | None = None
    # The finish the last status reading implied (0027): the next reading that agrees
    # aims the poll past it (models/polling/estimates.py); None when that reading implied none.
    estimated_finish: datetime | None = None
    # Its turn among its tenant's requests waiting for the provider's rate limit, higher
    # first (0031; models/provider/fair_shares.py); set at intake.
    priority: int = 0
    # The pause that parked it (0030, models/humans/pauses.py); None when none did.
    held_by: uuid.UUID | None = None
    # Who allowed a cancel requested during a pause to leave before the resume (0030).
    cancel_during_pause_by: str | None = None
    # A follow-up operation (0029): the operation it follows and as what (capture, refund,
    # rollback: its parent contract's [follow_ups.<kind>]), and the amount it requests
    # under that kind's amount rule. None for every other operation.
    follows: uuid.UUID | None = None
    follow_up_kind: str | None = None
    follow_up_amount: int | None = None
    last_remote_state: str | None
    last_http_status: int | None
    progress: float | None
    escalation_reason: EscalationReason | None
    escalation_detail: str | None
    cancel_requested_by: str | None
    cancel_reason: str | None
    result_reference: str | None
    validation_summary: Mapping[str, Any] | None
    event_count: int
    last_event_hash: str
    updated_at: datetime
    # When the row entered its state (0021); None on a snapshot built without it.
    state_since: datetime | None = None
    # The kind of the newest event, written with it (0028; read from the history before,
    # by a subquery on every load). A create_sent or reconcile_sent with nothing after
    # it means the sender died mid-request.
    last_event_kind: EventKind | None = None
    # Not a column: the active pause covering it (provider, tenant or this operation), read
    # in the same query from the pauses table; the planner sends nothing while it is set.
    hold: Hold | None = None

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> Operation:
        """The snapshot of a row as read: its text columns become the enums they hold."""
        values = {name: row[name] for name in _FIELD_NAMES if name in row}
        for name, enum in _ENUM_COLUMNS.items():
            if name in values:
                values[name] = enum(values[name]) if values[name] else None
        if isinstance(values.get("hold"), Mapping):
            values["hold"] = Hold.from_mapping(values["hold"])
        return cls(**values)

    def with_changes(self, changes: RowChanges) -> Operation:
        """The snapshot after ``changes``: already typed as it holds them, so none converted.

        What ``dataclasses.replace`` returns (TypeError for a name that is no field), built
        without it: replace walks ``fields()`` in Python and then runs the generated frozen
        ``__init__``, one ``object.__setattr__`` per field; with 72 fields that was about
        30 us, twice per poll. Here the values are read in one C call (attrgetter) and set
        through the slots' own descriptors. Operation has no ``__post_init__`` and no
        default factories, so nothing else ran in ``__init__``; the parity with replace is
        pinned in tests/unit/test_operation_snapshot.py.
        """
        unknown = changes.keys() - _SETTERS.keys()
        if unknown:
            raise TypeError(f"not Operation fields: {', '.join(sorted(unknown))}")
        new = _new(Operation)
        for set_slot, value in zip(_SLOT_SETTERS, _ALL_VALUES(self), strict=True):
            set_slot(new, value)
        for name, value in changes.items():
            _SETTERS[name](new, value)
        return new


class RowChanges(TypedDict, total=False):
    """The columns one write may change, each typed as the snapshot holds it.

    ``Plan.changes`` and every planner build this, so a misspelt column is a mypy
    error (``typeddict-unknown-key``), not a silent no-op or a failed UPDATE at run
    time; tests/unit/test_row_changes_typing.py holds that line. States, reasons and
    the polling mode are their enums here, as in the snapshot: the store turns each
    into its text once, where it binds the parameters (persistence/store.py).
    """

    tenant: str
    provider: str
    idempotency_key: str
    source_event_id: str | None
    provider_token: str
    request_fingerprint: str
    method: str
    route: str
    command: Mapping[str, Any]
    remote_job_id: str | None
    status_url: str | None
    state: OperationState
    version: int
    trace_id: str
    requested_by: str
    authorized_by: str | None
    approval_expires_at: datetime | None
    created_at: datetime
    accepted_at: datetime | None
    create_deadline: datetime
    result_deadline: datetime
    cancel_deadline: datetime | None
    cancel_window_seconds: float | None
    next_poll_at: datetime | None
    dispatched_at: datetime | None
    create_attempts: int
    status_requests_used: int
    max_status_requests: int
    transport_failures_used: int
    max_transport_failures: int
    consecutive_rate_limited: int
    poll_attempt: int
    extensions_used: int
    step_failures: int
    poll_not_before: datetime | None
    result_fetch_attempts: int
    collect_deadline: datetime | None
    first_sent_at: datetime | None
    business_deadline: datetime | None
    reserved_request: int | None
    concurrency_key: str | None
    concurrency_limit: int | None
    polling_mode: Monitor | None
    resubmit_of: uuid.UUID | None
    resubmitted_as: uuid.UUID | None
    ended_as: OperationState | None
    cleanup_deadline: datetime | None
    approved_request_digest: str | None
    contract_digest: str | None
    estimated_finish: datetime | None
    priority: int
    held_by: uuid.UUID | None
    cancel_during_pause_by: str | None
    follows: uuid.UUID | None
    follow_up_kind: str | None
    follow_up_amount: int | None
    last_remote_state: str | None
    last_http_status: int | None
    progress: float | None
    escalation_reason: EscalationReason | None
    escalation_detail: str | None
    cancel_requested_by: str | None
    cancel_reason: str | None
    result_reference: str | None
    validation_summary: Mapping[str, Any] | None
    event_count: int
    last_event_hash: str
    updated_at: datetime
    state_since: datetime | None
    last_event_kind: EventKind | None


_FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in fields(Operation))
# with_changes' parts: every field's value in one call, and each slot's setter (a frozen
# dataclass refuses setattr; the slot descriptor is what its __init__ writes through).
_ALL_VALUES = operator.attrgetter(*_FIELD_NAMES)
_SETTERS: dict[str, Callable[[Operation, Any], None]] = {
    name: getattr(Operation, name).__set__ for name in _FIELD_NAMES
}
_SLOT_SETTERS = tuple(_SETTERS[name] for name in _FIELD_NAMES)
_new = object.__new__
COLUMNS: frozenset[str] = frozenset(_FIELD_NAMES) - {"hold"}
# The text columns (and the newest event's kind) a snapshot holds as enums; the store binds
# each as its value (models/persistence/store.py), and reads it back through this table.
_ENUM_COLUMNS: dict[str, type[OperationState | EscalationReason | Monitor | EventKind]] = {
    "state": OperationState,
    "escalation_reason": EscalationReason,
    "polling_mode": Monitor,
    "ended_as": OperationState,
    "last_event_kind": EventKind,
}
