"""Verification: what ``jobwarden verify`` proves about an operation's history.

Pure. ``verify_chain`` recomputes every event hash and reports gaps, edits, a
head that does not match the row and a live row that differs from the one its
last write recorded; ``check_result`` checks the stored result bytes against
their sha256 and that sha256 against the ``result_collected`` event. Each finding
is a ``ChainProblem``; nothing here raises for what a tampered row holds.

What verification cannot detect: someone with write access to the database
who rewrites an operation's whole chain (or its tail) consistently, recomputing
every hash, and sets the row and its head to match. Nothing inside the database
can tell that from the truth; compare the heads with a copy kept elsewhere
(``jobwarden verify --export-heads`` and ``--heads FILE``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import rfc8785

from jobwarden.models.history.chain import (
    GENESIS_HASH,
    ChainedEvent,
    EventKind,
    StoredEvent,
    stored_hash,
)
from jobwarden.models.history.row_facts import row_digest


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
            computed = stored_hash(operation_id, ev, legacy=legacy)
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
    location: str | None = None,
) -> list[ChainProblem]:
    """The stored result bytes against their sha256, and that sha256 against the chain.

    ``content``, ``sha256`` and ``size_bytes`` are the operation_results row (None
    when there is none). The ``result_collected`` event's excerpt records the
    digest (for a result kept after failing validation, the ``result_rejected`` event's),
    so replacing both the bytes and their stored sha256 is still seen.
    """
    recorded: StoredEvent | None = None
    for ev in _as_stored(events):
        excerpt = ev.fields.get("excerpt")
        # A result kept without being a success (it failed validation, or it is a job's
        # partial output) is recorded by the event that ended the operation with it.
        kind = ev.fields.get("kind")
        if (
            isinstance(excerpt, Mapping)
            and isinstance(excerpt.get("sha256"), str)
            and (kind == EventKind.result_collected.value or excerpt.get("kept") is True)
        ):
            recorded = ev
    if content is None and location is None:
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
    if content is None:
        # In the result store: the row must say where the chain says, with the size it
        # says; the object's own bytes are re-read by the shell (tasks/results/store.py).
        if excerpt.get("location") != location:
            problems.append(
                ChainProblem(
                    seq=recorded.seq,
                    problem=f"the result's location {location} is not the one recorded",
                )
            )
        if size_bytes != excerpt.get("size_bytes"):
            problems.append(
                ChainProblem(
                    seq=recorded.seq,
                    problem=f"stored result is {size_bytes} bytes; "
                    f"{excerpt.get('size_bytes')} were recorded",
                )
            )
        return problems
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
