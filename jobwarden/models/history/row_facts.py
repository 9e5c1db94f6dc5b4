"""The operations row as the event chain binds it: which facts, and their digest.

Pure. The last event of every write commits to ``row_digest`` of the operations
row that write produced, so the live row can be checked against its chain
(``verification.verify_chain``). ``ROW_FACTS`` names every bound column with how
its value is normalised; ``UNBOUND_COLUMNS`` names every column left out, each
with its reason, and a unit test holds the two together equal to the table's
columns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from typing import Any, Final

from jobwarden.models.history.hash_form import canonical, utc_iso

# The facts of the operations row each write's last event commits to, with how each is
# normalised so the value a write holds and the value Postgres returns digest alike.
ROW_FACTS: Final[Mapping[str, str]] = {
    # who asked for what: fixed at intake
    "tenant": "text",
    "provider": "text",
    "idempotency_key": "text",
    "source_event_id": "text",
    "provider_token": "text",
    "request_fingerprint": "text",
    "method": "text",
    "route": "text",
    "command": "json",
    "trace_id": "text",
    "requested_by": "text",
    "authorized_by": "text",
    "approval_expires_at": "time",
    "created_at": "time",
    # what is known about the remote job
    "state": "text",
    "remote_job_id": "text",
    "status_url": "text",
    "polling_mode": "text",
    "accepted_at": "time",
    "result_reference": "text",
    "validation_summary": "json",
    "escalation_reason": "text",
    "escalation_detail": "text",
    "cancel_requested_by": "text",
    "cancel_reason": "text",
    # the bounds and what has been spent of them
    "create_deadline": "time",
    "result_deadline": "time",
    "cancel_deadline": "time",
    "cancel_window_seconds": "float",
    "create_attempts": "int",
    "status_requests_used": "int",
    "max_status_requests": "int",
    "transport_failures_used": "int",
    "max_transport_failures": "int",
    "extensions_used": "int",
    "step_failures": "int",
    "result_fetch_attempts": "int",
    "collect_deadline": "time",
    "first_sent_at": "time",
    "business_deadline": "time",
    # fixed at intake: which key the operation shares, and how many may hold it
    "concurrency_key": "text",
    "concurrency_limit": "int",
    # a person's resubmission: the operation this one replaces, and its replacement
    "resubmit_of": "text",
    "resubmitted_as": "text",
    # a job that ended leaving resources: how it ended, and the cleanup's deadline
    "ended_as": "text",
    "cleanup_deadline": "time",
    # the create request the approval bound (its digest)
    "approved_request_digest": "text",
    # the contract text it runs under (0026): set at intake, moved only by a decision
    "contract_digest": "text",
    # a pause (0030): the pause that parked it, and who let a cancel leave during one
    "held_by": "text",
    "cancel_during_pause_by": "text",
    # a follow-up operation (0029): its parent, its kind, the amount it requests
    "follows": "text",
    "follow_up_kind": "text",
    "follow_up_amount": "int",
}
# Facts added after rows were first digested: left out of the digest while unset, so a
# row written before its column existed still digests as its history recorded it (and
# setting or clearing one still changes the digest).
LATER_FACTS: Final = frozenset(
    {
        "business_deadline",
        "concurrency_key",
        "concurrency_limit",
        "polling_mode",
        "resubmit_of",
        "resubmitted_as",
        "ended_as",
        "cleanup_deadline",
        "approved_request_digest",
        "contract_digest",
        "held_by",
        "cancel_during_pause_by",
        "follows",
        "follow_up_kind",
        "follow_up_amount",
    }
)
# Columns deliberately outside the digest, each for a reason:
UNBOUND_COLUMNS: Final = frozenset(
    {
        "operation_id",  # every event hash covers it already
        "version",  # fencing bookkeeping, bumped by every write
        "updated_at",  # bookkeeping
        "event_count",  # the chain head: checked against the events themselves
        "last_event_hash",  # the chain head
        "last_event_kind",  # the newest event's kind (0028): the events themselves say it
        # timers, kept in operation_timers: when to look next, not what happened; the
        # sweeper sets dispatched_at without an event
        "next_poll_at",
        "dispatched_at",
        "state_since",  # bookkeeping: when the state (which is bound) was entered
        "poll_not_before",  # a timer (the hint itself is in the observed event)
        # which counted request the next poll may send: the sweeper drops it, without an
        # event, when that poll's message is presumed lost (the count itself is bound)
        "reserved_request",
        "poll_attempt",  # backoff bookkeeping; each wait's event records its delay
        "consecutive_rate_limited",  # backoff bookkeeping, recorded per observation
        "last_remote_state",  # caches of the last observation, which its event records
        "last_http_status",
        "progress",
        "estimated_finish",  # what the last reading implied; an aimed wait's event names it
        # the turn it takes at the rate limit, fixed at intake and named by its intent
        # event; kept out so rows digested before 0031 still verify
        "priority",
    }
)


def _fact(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "text":
        return str(value)  # a StrEnum state digests as its value
    if kind == "time":
        return utc_iso(value)
    if kind == "int":
        # Postgres rounds a float sent to an integer column half to even, as round() does.
        return round(value) if isinstance(value, float) else int(value)
    if kind == "float":
        return float(value)
    return value  # json


# Columns renamed after rows were digested keep the name they were digested under, so a
# history written before the rename still verifies (0014: authorised_by -> authorized_by).
DIGESTED_AS: Final[Mapping[str, str]] = {"authorized_by": "authorised_by"}


def _int_fact(value: Any) -> int:
    return round(value) if isinstance(value, float) else int(value)


def _as_is(value: Any) -> Any:
    return value


# ``_fact`` per kind, looked up once: the digest runs on every write, over every fact.
_NORMALISERS: Final[Mapping[str, Callable[[Any], Any]]] = {
    "text": str,
    "time": utc_iso,
    "int": _int_fact,
    "float": float,
    "json": _as_is,
}
# (the name it is digested under, the column, its normaliser, whether it is a later fact)
_DIGEST_PLAN: Final = tuple(
    (DIGESTED_AS.get(name, name), name, _NORMALISERS[kind], name in LATER_FACTS)
    for name, kind in ROW_FACTS.items()
)


def row_digest(facts: Mapping[str, Any]) -> str:
    """sha256 over the row's ``ROW_FACTS`` (every one must be present, None when unset)."""
    material: dict[str, Any] = {}
    for digested_as, name, normalise, later in _DIGEST_PLAN:
        value = facts[name]
        if value is not None:
            material[digested_as] = normalise(value)
        elif not later:
            material[digested_as] = None
    return hashlib.sha256(canonical(material)).hexdigest()
