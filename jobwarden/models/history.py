"""The per-operation event chain: drafting, hashing and verification.

Each event's hash covers the previous hash and every recorded field in
RFC 8785 canonical form, so editing, deleting or reordering any event breaks
every later hash. The last event of every write also commits to a digest of
the operations row that write produced (``row_digest``), so the live row can
be checked against its chain, and the ``result_collected`` event records the
sha256 of the stored result bytes.

Numbers are canonicalised so the hash survives the JSONB round trip: RFC 8785
holds only IEEE doubles, and Postgres reads ``1e20`` back as an integer. Every
number outside the exact range (integers beyond 2^53 - 1, floats of at least
2^53, non-finite floats) is hashed as a tagged string of its exact decimal
value, which a float and the integer JSONB returns for it share.

What verification cannot detect: someone with write access to the database
who rewrites an operation's whole chain (or its tail) consistently, recomputing
every hash, and sets the row and its head to match. Nothing inside the database
can tell that from the truth; compare the heads with a copy kept elsewhere
(``jobwarden verify --export-heads`` and ``--heads FILE``).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any, Final

import rfc8785

from jobwarden.models.canonical import dumps as canonical_json
from jobwarden.models.canonical import plain_dumps

GENESIS_HASH = "0" * 64
SAFE_INTEGER: Final = 2**53 - 1
# Postgres text and JSONB cannot hold NUL, so no stored string can collide with a tag.
NUMBER_TAG: Final = "\x00number:"


class EventKind(StrEnum):
    intent_recorded = "intent_recorded"  # the operation row was committed
    approval_requested = "approval_requested"  # waits for a human approval
    approved = "approved"  # a human approved the fingerprint
    create_sent = "create_sent"  # a create request is about to leave (counter committed)
    create_accepted = "create_accepted"  # the provider answered with a remote job
    create_replayed = "create_replayed"  # the provider replayed an earlier create for our token
    create_ambiguous = "create_ambiguous"  # the create outcome is unknown
    create_refused = "create_refused"  # the provider refused the create; nothing was created
    reconcile_sent = "reconcile_sent"  # asking what became of the token
    reconciled = "reconciled"  # the provider told us what became of the token
    poll_sent = "poll_sent"  # a status request is about to leave (counter committed)
    observed = "observed"  # what a provider response said
    polled = "polled"  # a status request answered: what it said and the decision to wait
    decision = "decision"  # what we decided, with the source of the next delay
    cancel_requested = "cancel_requested"  # somebody asked us to cancel
    cancel_sent = "cancel_sent"  # the cancel request is about to leave
    cancel_confirmed = "cancel_confirmed"  # the provider reports the job cancelled
    result_fetch_sent = "result_fetch_sent"  # the result download is about to leave
    result_collected = "result_collected"  # result stored and validated
    result_rejected = "result_rejected"  # result unavailable or failed validation
    escalated = "escalated"  # automation stopped with a reason and options
    human_decision = "human_decision"  # a human picked an option
    webhook_received = "webhook_received"  # a verified webhook observation
    admitted = "admitted"  # a queued operation's concurrency key had room: it starts
    key_handed_over = "key_handed_over"  # an ended holder's concurrency key went to the next


@dataclass(frozen=True, slots=True, kw_only=True)
class EventDraft:
    """An event before it is chained; the store assigns seq, prev_hash and hash."""

    kind: EventKind
    actor: str
    at: datetime
    from_state: str | None = None
    to_state: str | None = None
    cause: str | None = None
    delay_source: str | None = None
    http_status: int | None = None
    provider_request_id: str | None = None
    excerpt: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainedEvent:
    operation_id: str
    seq: int
    draft: EventDraft
    prev_hash: str
    hash: str
    # Set on the last event of a write: the digest of the operations row it produced.
    row_digest: str | None = None

    def stored(self) -> StoredEvent:
        return StoredEvent(
            seq=self.seq,
            fields=draft_fields(self.draft),
            prev_hash=self.prev_hash,
            hash=self.hash,
            row_digest=self.row_digest,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredEvent:
    """An event as read back: its hashed fields verbatim (a tampered kind need not be known)."""

    seq: int
    fields: Mapping[str, Any]
    prev_hash: str
    hash: str
    row_digest: str | None = None


# --- canonical form -------------------------------------------------------------------


def exact_decimal(value: int | float) -> str:
    """The exact decimal value of a JSON number, spelled one way per value.

    Digits without trailing zeros, ``e``, the exponent: ``1e300`` for both the
    float 1e300 (as its shortest repr, the text JSON and Postgres hold) and the
    integer 10**300 JSONB returns for it. Non-finite floats are named.
    """
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
    exact = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    sign, digit_tuple, exponent = exact.as_tuple()
    digits = list(digit_tuple)
    assert isinstance(exponent, int)  # finite by the checks above
    while len(digits) > 1 and digits[-1] == 0:
        digits.pop()
        exponent += 1
    return ("-" if sign and any(digits) else "") + "".join(map(str, digits)) + f"e{exponent}"


def _key(key: object) -> str:
    # The same spelling json.dumps gives a non-string key when the value is stored.
    if isinstance(key, str):
        return key
    if key is None or isinstance(key, bool):
        return {None: "null", True: "true", False: "false"}[key]
    if isinstance(key, float) and not math.isfinite(key):
        return exact_decimal(key)
    if isinstance(key, int | float):
        return repr(key)
    raise TypeError(f"not a JSON object key: {type(key).__name__}")


def hashable(value: Any) -> Any:
    """``value`` with every number RFC 8785 cannot hold exactly replaced by its tagged text.

    Total over JSON values (and tuples, and the non-string keys json.dumps
    accepts); raises TypeError for anything JSON cannot hold.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, int):
        return (
            value if -SAFE_INTEGER <= value <= SAFE_INTEGER else NUMBER_TAG + exact_decimal(value)
        )
    if isinstance(value, float):
        # Every float of magnitude 2^53 or more is integral, and JSONB returns it as an int.
        if math.isfinite(value) and abs(value) <= SAFE_INTEGER:
            return value
        return NUMBER_TAG + exact_decimal(value)
    if isinstance(value, Mapping):
        return {_key(k): hashable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [hashable(v) for v in value]
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def canonical(value: Any) -> bytes:
    """The bytes that are hashed: RFC 8785 over ``hashable(value)``."""
    # A plain value (str keys, safe integers, no float json.dumps spells otherwise) is
    # its own hashable form: one walk over it instead of two, on every write's hashes.
    fast = plain_dumps(value)
    return fast if fast is not None else canonical_json(hashable(value))


def _legacy(value: Any) -> Any:
    """Undo a JSONB round trip the way the chain hashed before numbers were tagged.

    Events written then held no integer beyond 2^53 - 1 (RFC 8785 refused them),
    so such an integer read back was a float JSONB spelled without a fraction.
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > SAFE_INTEGER:
        return float(value)  # OverflowError for what no float wrote: caught as a mismatch
    if isinstance(value, Mapping):
        return {k: _legacy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_legacy(v) for v in value]
    return value


# --- events ---------------------------------------------------------------------------


def _utc_iso(at: datetime) -> str:
    if at.tzinfo is None:  # Postgres reads a naive timestamp as UTC in our sessions
        at = at.replace(tzinfo=UTC)
    return at.astimezone(UTC).isoformat(timespec="microseconds")


# What an event's hash covers besides its operation, seq, prev_hash and row digest.
EVENT_FIELDS: Final = (
    "kind",
    "actor",
    "at",
    "from_state",
    "to_state",
    "cause",
    "delay_source",
    "http_status",
    "provider_request_id",
    "excerpt",
)


def recorded_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    """The hashed fields of an event, from a draft or a stored row, as the hash reads them."""
    fields = {name: values[name] for name in EVENT_FIELDS}
    fields["at"] = _utc_iso(fields["at"])
    return fields


def draft_fields(draft: EventDraft) -> dict[str, Any]:
    values = {name: getattr(draft, name) for name in EVENT_FIELDS}
    values["kind"] = draft.kind.value
    return recorded_fields(values)


def _hash(operation_id: str, ev: StoredEvent, *, legacy: bool = False) -> str:
    material = {
        "operation_id": operation_id,
        "seq": ev.seq,
        "prev_hash": ev.prev_hash,
        **ev.fields,
    }
    if ev.row_digest is not None:
        # Absent, not null, when there is none: events written before row digests hash as then.
        material["row_digest"] = ev.row_digest
    encoded = rfc8785.dumps(_legacy(material)) if legacy else canonical(material)
    return hashlib.sha256(encoded).hexdigest()


def event_hash(
    operation_id: str,
    seq: int,
    draft: EventDraft,
    prev_hash: str,
    row_digest: str | None = None,
) -> str:
    pending = StoredEvent(
        seq=seq, fields=draft_fields(draft), prev_hash=prev_hash, hash="", row_digest=row_digest
    )
    return _hash(operation_id, pending)


def chain(
    operation_id: str,
    drafts: Iterable[EventDraft],
    *,
    last_seq: int,
    last_hash: str,
    row_digest: str | None = None,
) -> list[ChainedEvent]:
    """Number and hash drafts after an operation's current chain head.

    ``row_digest`` (the digest of the row this write produces) goes to the last event.
    """
    pending = list(drafts)
    out: list[ChainedEvent] = []
    seq, prev = last_seq, last_hash
    for i, draft in enumerate(pending):
        seq += 1
        # Postgres keeps microseconds; truncating here keeps stored and hashed times equal.
        normalised = replace(draft, at=draft.at.astimezone(UTC))
        digest = row_digest if i == len(pending) - 1 else None
        ev_hash = event_hash(operation_id, seq, normalised, prev, digest)
        out.append(
            ChainedEvent(
                operation_id=operation_id,
                seq=seq,
                draft=normalised,
                prev_hash=prev,
                hash=ev_hash,
                row_digest=digest,
            )
        )
        prev = ev_hash
    return out


# --- the operations row ---------------------------------------------------------------

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
    "authorised_by": "text",
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
}
# Facts added after rows were first digested: left out of the digest while unset, so a
# row written before its column existed still digests as its history recorded it (and
# setting or clearing one still changes the digest).
LATER_FACTS: Final = frozenset(
    {"business_deadline", "concurrency_key", "concurrency_limit", "polling_mode"}
)
# Columns deliberately outside the digest, each for a reason:
UNBOUND_COLUMNS: Final = frozenset(
    {
        "operation_id",  # every event hash covers it already
        "version",  # fencing bookkeeping, bumped by every write
        "updated_at",  # bookkeeping
        "event_count",  # the chain head: checked against the events themselves
        "last_event_hash",  # the chain head
        "next_poll_at",  # timers: when to look next, not what happened
        "dispatched_at",  # the sweeper sets it without an event
        "poll_not_before",  # a timer (the hint itself is in the observed event)
        # which counted request the next poll may send: the sweeper drops it, without an
        # event, when that poll's message is presumed lost (the count itself is bound)
        "reserved_request",
        "poll_attempt",  # backoff bookkeeping; each wait's event records its delay
        "consecutive_rate_limited",  # backoff bookkeeping, recorded per observation
        "last_remote_state",  # caches of the last observation, which its event records
        "last_http_status",
        "progress",
    }
)


def _fact(kind: str, value: Any) -> Any:
    if value is None:
        return None
    if kind == "text":
        return str(value)  # a StrEnum state digests as its value
    if kind == "time":
        return _utc_iso(value)
    if kind == "int":
        # Postgres rounds a float sent to an integer column half to even, as round() does.
        return round(value) if isinstance(value, float) else int(value)
    if kind == "float":
        return float(value)
    return value  # json


def row_digest(facts: Mapping[str, Any]) -> str:
    """sha256 over the row's ``ROW_FACTS`` (every one must be present, None when unset)."""
    material = {
        name: _fact(kind, facts[name])
        for name, kind in ROW_FACTS.items()
        if facts[name] is not None or name not in LATER_FACTS
    }
    return hashlib.sha256(canonical(material)).hexdigest()


# --- verification ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ChainProblem:
    seq: int  # the event concerned; 0 when it is about the operation as a whole
    problem: str


_HEAD_MISMATCH: Final = "chain head does not match the operation row"


def _hash_matches(operation_id: str, ev: StoredEvent) -> bool:
    """Recompute ``ev``'s hash; never raises, whatever a tampered row holds."""
    # An event without a row digest may predate tagged numbers: its second reading.
    readings = (False,) if ev.row_digest is not None else (False, True)
    for legacy in readings:
        try:
            computed = _hash(operation_id, ev, legacy=legacy)
        except (rfc8785.CanonicalizationError, TypeError, ValueError, OverflowError):
            continue
        if computed == ev.hash:
            return True
    return False


def _as_stored(events: Sequence[ChainedEvent | StoredEvent]) -> list[StoredEvent]:
    return [ev.stored() if isinstance(ev, ChainedEvent) else ev for ev in events]


def verify_chain(
    operation_id: str,
    events: Sequence[ChainedEvent | StoredEvent],
    *,
    head_seq: int,
    head_hash: str,
    row: Mapping[str, Any] | None = None,
) -> list[ChainProblem]:
    """Recompute every hash; report gaps, edits and a head that does not match the row.

    With ``row`` (its ``ROW_FACTS``), the live row must also digest to what the
    head event recorded. A head without a digest passes only when no event of the
    chain has one: its every write predates row digests (see ``row_bound``).
    An empty history is a problem: every operation records at least its intent.
    """
    stored = _as_stored(events)
    if not stored:
        problems = [ChainProblem(seq=0, problem="no events: the history is empty")]
        if head_seq != 0 or head_hash != GENESIS_HASH:
            problems.append(ChainProblem(seq=head_seq, problem=_HEAD_MISMATCH))
        return problems
    problems = []
    prev = GENESIS_HASH
    expected_seq = 1
    for ev in stored:
        if ev.seq != expected_seq:
            problems.append(ChainProblem(seq=ev.seq, problem=f"expected seq {expected_seq}"))
        if ev.prev_hash != prev:
            problems.append(ChainProblem(seq=ev.seq, problem="prev_hash does not match"))
        if not _hash_matches(operation_id, ev):
            problems.append(ChainProblem(seq=ev.seq, problem="hash does not match contents"))
        prev = ev.hash
        expected_seq = ev.seq + 1
    if stored[-1].seq != head_seq or prev != head_hash:
        problems.append(ChainProblem(seq=head_seq, problem=_HEAD_MISMATCH))
    if row is not None:
        problems.extend(_check_row(stored, row))
    return problems


def row_bound(events: Sequence[ChainedEvent | StoredEvent]) -> bool:
    """Whether the head event carries a row digest (False for histories from before them)."""
    return bool(events) and events[-1].row_digest is not None


def _check_row(events: Sequence[StoredEvent], row: Mapping[str, Any]) -> list[ChainProblem]:
    head = events[-1]
    if head.row_digest is None:
        bound = next((ev.seq for ev in events if ev.row_digest is not None), None)
        if bound is None:
            return []  # every write predates row digests: nothing binds this row
        return [
            ChainProblem(
                seq=head.seq,
                problem=f"head event carries no row digest, though event {bound} bound the "
                "row: the chain was cut inside a write",
            )
        ]
    try:
        live = row_digest(row)
    except (rfc8785.CanonicalizationError, TypeError, ValueError, OverflowError) as exc:
        return [ChainProblem(seq=head.seq, problem=f"operations row cannot be digested: {exc}")]
    if live == head.row_digest:
        return []
    return [
        ChainProblem(
            seq=head.seq,
            problem="operations row differs from the row this event recorded"
            + _row_hints(events, row),
        )
    ]


def _row_hints(events: Sequence[StoredEvent], row: Mapping[str, Any]) -> str:
    """Name the edited fields the history itself still shows; the digest alone cannot."""
    hints: list[str] = []
    states = [ev.fields.get("to_state") for ev in events if ev.fields.get("to_state")]
    if states and str(row.get("state")) != states[-1]:
        hints.append(f"state is {row.get('state')!s}, the history ends in {states[-1]}")
    intent = events[0].fields.get("excerpt")
    if events[0].fields.get("kind") == EventKind.intent_recorded.value and isinstance(
        intent, Mapping
    ):
        for field, key in (("request_fingerprint", "fingerprint"), ("idempotency_key", None)):
            recorded = intent.get(key or field)
            if recorded is not None and row.get(field) != recorded:
                hints.append(f"{field} differs from the one the intent recorded")
    shown = "; ".join(hints) if hints else "a bound field was changed since"
    return f" ({shown})"


def check_result(
    events: Sequence[ChainedEvent | StoredEvent],
    *,
    content: bytes | None,
    sha256: str | None,
    size_bytes: int | None,
) -> list[ChainProblem]:
    """The stored result bytes against their sha256, and that sha256 against the chain.

    ``content``, ``sha256`` and ``size_bytes`` are the operation_results row (None
    when there is none). The ``result_collected`` event's excerpt records the
    digest, so replacing both the bytes and their stored sha256 is still seen.
    """
    recorded: StoredEvent | None = None
    for ev in _as_stored(events):
        excerpt = ev.fields.get("excerpt")
        if (
            ev.fields.get("kind") == EventKind.result_collected.value
            and isinstance(excerpt, Mapping)
            and isinstance(excerpt.get("sha256"), str)
        ):
            recorded = ev
    if content is None:
        if recorded is None:
            return []
        return [ChainProblem(seq=recorded.seq, problem="the result bytes it recorded are missing")]
    if recorded is None:
        return [
            ChainProblem(
                seq=0, problem="result bytes are stored, but no result_collected event records them"
            )
        ]
    excerpt = recorded.fields["excerpt"]
    problems: list[ChainProblem] = []
    if sha256 != excerpt["sha256"]:
        problems.append(
            ChainProblem(
                seq=recorded.seq,
                problem="stored result sha256 differs from the digest this event recorded",
            )
        )
    if hashlib.sha256(content).hexdigest() != sha256:
        problems.append(
            ChainProblem(seq=recorded.seq, problem="stored result bytes do not match their sha256")
        )
    if size_bytes != len(content) or excerpt.get("size_bytes", len(content)) != len(content):
        problems.append(
            ChainProblem(
                seq=recorded.seq,
                problem=f"stored result is {len(content)} bytes; "
                f"{excerpt.get('size_bytes')} were recorded",
            )
        )
    return problems
