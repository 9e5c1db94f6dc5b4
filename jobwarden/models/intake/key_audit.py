"""Which stored keys in a reserved namespace jobwarden did not derive (invariant 17).

Pure. Intake refuses a caller's key in a reserved namespace (models/intake/reserved_keys.py),
but keys stored before that rule may have been planted. A key was derived by jobwarden
exactly when the operation carries the link its derivation records: a resubmission's
``resubmit_of`` (and the key names that operation), a schedule slot's row naming the
operation (and the key names that slot). Anything else in a reserved namespace,
including namespaces nothing derives yet, is reported for a person to judge.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

from jobwarden.models.intake.reserved_keys import RESUBMIT, SCHEDULE, reserved_namespace
from jobwarden.models.schedules.slots import slot_key


@dataclass(frozen=True, slots=True, kw_only=True)
class KeyedOperation:
    """An operation whose key lies in a reserved namespace, with the links it carries."""

    operation_id: uuid.UUID
    tenant: str
    idempotency_key: str
    created_at: datetime
    resubmit_of: uuid.UUID | None
    slot: tuple[str, datetime] | None  # (schedule name, slot) of a slot row naming it
    # The intake log's created entry: who knocked, through which door (None: not logged).
    door: str | None
    actor: str | None


def planted_reason(op: KeyedOperation) -> str | None:
    """Why ``op``'s key was not derived by jobwarden; None when it was (or is not reserved)."""
    namespace = reserved_namespace(op.idempotency_key)
    if namespace is None:
        return None
    if namespace is RESUBMIT:
        if op.resubmit_of is None:
            return "no resubmission links it to an operation it replaces"
        if op.idempotency_key != f"{RESUBMIT.prefix}{op.resubmit_of}":
            return f"its key does not name the operation it replaces ({op.resubmit_of})"
        return None
    if namespace is SCHEDULE:
        if op.slot is None:
            return "no schedule slot names it"
        name, slot_at = op.slot
        if op.idempotency_key != slot_key(name, slot_at):
            return f"its key does not name the slot that fired it ({slot_key(name, slot_at)})"
        return None
    return f"jobwarden derives no keys under {namespace.prefix!r} yet"
