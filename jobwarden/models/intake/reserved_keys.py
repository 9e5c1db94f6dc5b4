"""Reserved idempotency keys: the namespaces of the keys jobwarden derives for itself.

Pure. DESIGN invariant 17: a key jobwarden derives (a resubmission's, a schedule slot's)
decides which operation a later derivation adopts, so a caller who could submit one
first would own it: a planted ``resubmit:<id>`` became the "replacement" a person's
resubmit then linked (issue 33, finding 4). Every door's submissions are refused in
these namespaces; only the shell's own derivations (tasks/humans/interventions.py,
tasks/schedules.py) pass ``derived_key=True`` to intake, a keyword no door exposes.

Matched case-insensitively: ``Resubmit:<id>`` could not collide with a derived key, but
a key that reads as jobwarden's own would mislead whoever audits the intake log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from jobwarden.models.errors import InvalidSubmissionError


@dataclass(frozen=True, slots=True, kw_only=True)
class Namespace:
    prefix: str
    derived_by: str  # what in jobwarden makes keys here, for the refusal and the report


RESUBMIT: Final = Namespace(prefix="resubmit:", derived_by="a person's resubmission")
SCHEDULE: Final = Namespace(prefix="schedule:", derived_by="a schedule's slot")
FOLLOW_UP: Final = Namespace(prefix="follow-up:", derived_by="a follow-up operation")
# Any derivation added later takes a key under this prefix, reserved from the start.
JOBWARDEN: Final = Namespace(prefix="jobwarden:", derived_by="jobwarden itself")
RESERVED: Final = (RESUBMIT, SCHEDULE, FOLLOW_UP, JOBWARDEN)


class ReservedKeyError(InvalidSubmissionError):
    """A caller's idempotency key lies in a namespace jobwarden reserves for its own keys."""

    field = "idempotency_key"


def reserved_namespace(key: str) -> Namespace | None:
    """The reserved namespace ``key`` lies in, if any."""
    folded = key.casefold()
    for namespace in RESERVED:
        if folded.startswith(namespace.prefix):
            return namespace
    return None


def check_caller_key(key: str) -> str:
    """``key`` unless it lies in a reserved namespace; ReservedKeyError naming the field."""
    namespace = reserved_namespace(key)
    if namespace is not None:
        reserved = ", ".join(repr(n.prefix) for n in RESERVED)
        raise ReservedKeyError(
            f"idempotency_key must not start with {namespace.prefix!r}: that namespace is "
            f"reserved for keys jobwarden derives ({namespace.derived_by}); reserved: {reserved}"
        )
    return key
