"""The intake's insert as one statement: the operation, its first events, its intake entry.

``insert(session, op, plan, entry)`` is ``store.write``'s twin for an operation that
does not exist yet: the snapshot the core opened (models/intake/intent.py) and its
plan, chained once here with the digest of the row being inserted. Inserting the
operation, then its event, then ``api_store.append_intake`` took four statements
(lock timeout, operation, event, entry) and composed a SQLAlchemy construct per call,
which cost more CPU than the database work. Here the inserts are data-modifying CTEs
of one statement, built as text once per shape (which operation columns are given):

    WITH claimed AS (INSERT INTO operations ... ON CONFLICT DO NOTHING RETURNING ...),
         first_event AS (INSERT INTO operation_events SELECT ... FROM claimed),
         entry AS (INSERT INTO intake_log SELECT ... FROM claimed)
    SELECT count(*) FROM claimed

So the events and the ``created`` entry exist exactly when the row was inserted, in the
same atomic statement; a taken key inserts nothing. For intake (``claim``) the statement
also answers it: two more CTEs read the operation the key names and log the ``replayed``
or ``conflict`` entry, so a replay is one statement too; a key the statement's snapshot
cannot see yet is read and logged by the caller. Every bind is cast to its column's
type: a NULL or a string in a SELECT list would otherwise be typed text. The one driver
error the claim expects (the key held by a concurrent submission past the lock timeout)
leaves here as ``SubmissionInProgressError``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from typing import Any, Final, cast

from psycopg.types.json import Jsonb
from sqlalchemy import Table, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from jobwarden.models.errors import SubmissionInProgressError
from jobwarden.models.history.chain import GENESIS_HASH, ChainedEvent, chain
from jobwarden.models.history.row_facts import ROW_FACTS, row_digest
from jobwarden.models.humans.notifications import Notice, Subject, kind_for, notice
from jobwarden.models.operation import COLUMNS, Operation, RowChanges
from jobwarden.models.persistence import answer_tallies, outbox
from jobwarden.models.persistence.api_store import IntakeEntry
from jobwarden.models.persistence.api_tables import IntakeLogRow
from jobwarden.models.persistence.db import driver_execute, raw_execute, wrap_exceptions
from jobwarden.models.persistence.tables import HOT_COLUMNS, EventRow, OperationRow, TimerRow
from jobwarden.models.plan import Plan

# Postgres's lock_not_available: the lock timeout ran out while a concurrent, still
# uncommitted submission held the (tenant, key) unique index entry.
LOCK_NOT_AVAILABLE: Final = "55P03"

OPERATIONS = cast(Table, OperationRow.__table__)
TIMERS = cast(Table, TimerRow.__table__)
EVENTS = cast(Table, EventRow.__table__)
INTAKE_LOG = cast(Table, IntakeLogRow.__table__)
_PG = postgresql.dialect()  # type: ignore[no-untyped-call]  # SQLAlchemy leaves it untyped


def _cast(column: Any) -> str:
    """The column's type to cast a bind to; text for VARCHAR(n), whose cast would truncate."""
    compiled = column.type.compile(dialect=_PG)
    return "text" if compiled.startswith("VARCHAR") else compiled.lower()


def _casts(table: Table, generated: str) -> dict[str, str]:
    return {c.name: _cast(c) for c in table.c if c.name != generated}


_OPERATION_CASTS: Final = _casts(OPERATIONS, "")
_HOT_CASTS: Final = _casts(TIMERS, "operation_id")
_EVENT_CASTS: Final = _casts(EVENTS, "event_id")
_ENTRY_CASTS: Final = _casts(INTAKE_LOG, "entry_id")
_JSON: Final = frozenset(
    f"{prefix}{c.name}"
    for prefix, table in (("o_", OPERATIONS), ("t_", TIMERS), ("e_", EVENTS), ("l_", INTAKE_LOG))
    for c in table.c
    if isinstance(c.type, JSONB)
)


def _select(prefix: str, casts: Mapping[str, str]) -> tuple[str, str]:
    names = ", ".join(f'"{c}"' for c in casts)
    values = ", ".join(f"%({prefix}{c})s::{t}" for c, t in casts.items())
    return names, values


# The contract text the operation pins (0026), kept once by digest: inserted with the
# operation it first pins, and a text already kept is left as it is.
_PIN_CONTRACT: Final = (
    "pinned AS (INSERT INTO provider_contracts (digest, provider, text, first_seen) "
    "SELECT %(c_digest)s::text, %(c_provider)s::text, %(c_text)s::text, "
    "%(c_first_seen)s::timestamptz FROM claimed ON CONFLICT DO NOTHING), "
)


_NAMED: Final = re.compile(r"%\((\w+)\)s")


@dataclass(frozen=True, slots=True)
class _Positional:
    """A statement with ``$n`` placeholders and the parameter name each stands for.

    psycopg converts ``%(name)s`` placeholders on every call when a statement is over
    4096 bytes or 50 parameters (its conversion cache skips those), and the claim is
    both: that conversion was a regular expression over 6 kB per submission. Converted
    here once per shape, the statement goes through a RawCursor as it is, and psycopg
    prepares it after a few uses like any other.
    """

    sql: str
    names: tuple[str, ...]

    def values(self, params: Mapping[str, Any]) -> list[Any]:
        return [params[name] for name in self.names]


def _positional(sql: str) -> _Positional:
    names: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        return f"${names.setdefault(match.group(1), len(names) + 1)}"

    return _Positional(_NAMED.sub(number, sql), tuple(names))


@lru_cache(maxsize=64)
def _claim(  # noqa: PLR0913 - the statement's shape, one argument per optional part
    columns: tuple[str, ...],
    events: int = 1,
    notifications: int = 0,
    pinned: bool = False,
    answers: int = 0,
    *,
    answering: bool = False,
) -> _Positional:
    return _positional(
        _claim_sql(columns, events, notifications, pinned, answers, answering=answering)
    )


# A taken key's answer, decided and logged by the claim's own statement (issue 37: a
# replay was three statements, the claim, the stored read and its log entry). ``taken``
# runs only when nothing was claimed (a one-time filter: a new key pays no probe), and
# it reads the statement's snapshot: a key whose holder committed after the statement
# began, or a taken source event, is not seen here, and the caller reads it afresh.
# Conflict is decided by the fingerprint before anything else; the operation is only read.
_TAKEN: Final = (
    "taken AS (SELECT o.operation_id, o.request_fingerprint, o.state::text AS state, "
    "o.trace_id, o.request_fingerprint = %(l_fingerprint)s::text AS same, "
    "(SELECT l.state FROM intake_log l WHERE l.operation_id = o.operation_id "
    "AND l.outcome = 'created' ORDER BY l.entry_id LIMIT 1) AS created_state "
    "FROM operations o WHERE NOT EXISTS (SELECT 1 FROM claimed) "
    "AND o.tenant = %(o_tenant)s::text AND o.idempotency_key = %(o_idempotency_key)s::text)"
)
# The answer's entry: the created entry's fields, with the taken operation's and the outcome.
_ANSWERED: Final = {
    "outcome": "CASE WHEN taken.same THEN 'replayed' ELSE 'conflict' END",
    "operation_id": "taken.operation_id",
    "state": "taken.state",
    "http_status": "CASE WHEN taken.same THEN %(a_replayed)s::integer "
    "ELSE %(a_conflict)s::integer END",
    "trace_id": "taken.trace_id",
}


def _answered_sql() -> str:
    names = ", ".join(f'"{c}"' for c in _ENTRY_CASTS)
    values = ", ".join(_ANSWERED.get(c, f"%(l_{c})s::{t}") for c, t in _ENTRY_CASTS.items())
    return f"answered AS (INSERT INTO intake_log ({names}) SELECT {values} FROM taken)"


def _claim_sql(  # noqa: PLR0913 - as _claim
    columns: tuple[str, ...],
    events: int = 1,
    notifications: int = 0,
    pinned: bool = False,
    answers: int = 0,
    *,
    answering: bool = False,
) -> str:
    unknown = set(columns) - set(_OPERATION_CASTS) - HOT_COLUMNS
    if unknown:
        raise ValueError(f"not operation columns: {', '.join(sorted(unknown))}")
    row = [c for c in columns if c not in HOT_COLUMNS]
    op_names = ", ".join(f'"{c}"' for c in row)
    op_values = ", ".join(f"%(o_{c})s::{_OPERATION_CASTS[c]}" for c in row)
    timer_names, timer_values = _select("t_", _HOT_CASTS)
    event_names = ", ".join(f'"{c}"' for c in _EVENT_CASTS)
    event_rows = " UNION ALL ".join(
        "SELECT " + _select(f"e{i}_", _EVENT_CASTS)[1] + " FROM claimed" for i in range(events)
    )
    entry_names, entry_values = _select("l_", _ENTRY_CASTS)
    return (
        f"WITH claimed AS (INSERT INTO operations ({op_names}) VALUES ({op_values}) "
        "ON CONFLICT DO NOTHING RETURNING operation_id), "
        # Every operation has its hot row from the start (tables.TimerRow).
        f"timer AS (INSERT INTO operation_timers (operation_id, {timer_names}) "
        f"SELECT operation_id, {timer_values} FROM claimed), "
        f"first_event AS (INSERT INTO operation_events ({event_names}) {event_rows}), "
        + (_PIN_CONTRACT if pinned else "")
        + f"entry AS (INSERT INTO intake_log ({entry_names}) SELECT {entry_values} FROM claimed) "
        + (", " + outbox.cte("noted", notifications, "FROM claimed") + " " if notifications else "")
        # A history opened with answers in it (tests' rows) counts them (answer_tallies.py).
        + (", " + answer_tallies.cte("tallied", answers, "FROM claimed") + " " if answers else "")
        + (
            f", {_TAKEN}, {_answered_sql()} SELECT (SELECT count(*) FROM claimed), "
            "taken.operation_id, taken.request_fingerprint, taken.state, taken.trace_id, "
            "taken.created_state FROM (SELECT) AS one LEFT JOIN taken ON true"
            if answering
            else "SELECT count(*) FROM claimed"
        )
    )


def _default(name: str) -> Any:
    """What the column holds when an insert leaves it out (its scalar default, else NULL)."""
    table = TIMERS if name in HOT_COLUMNS else OPERATIONS
    default = table.c[name].default
    return default.arg if default is not None and default.is_scalar else None  # type: ignore[attr-defined]


# Read from the tables once: looking each default up per call (a SQLAlchemy column
# collection lookup for each of ~35 columns) was a tenth of a submission's Python work.
_DEFAULTS: Final[Mapping[str, Any]] = {
    name: _default(name)
    for name in {*_OPERATION_CASTS, *_HOT_CASTS, *ROW_FACTS}
    if name in OPERATIONS.c or name in HOT_COLUMNS
}
# Each column's parameter name and whether it binds as JSONB, spelt once, not per call.
_OPERATION_PARAMS: Final = tuple(
    (c, f"o_{c}", f"o_{c}" in _JSON) for c in _OPERATION_CASTS if c not in HOT_COLUMNS
)
_HOT_PARAMS: Final = tuple((c, f"t_{c}") for c in _HOT_CASTS)
_ENTRY_PARAMS: Final = tuple((c, f"l_{c}", f"l_{c}" in _JSON) for c in _ENTRY_CASTS)
_EVENT_PARAMS: Final = tuple((c, f"e_{c}" in _JSON) for c in _EVENT_CASTS)


def _bound(name: str, value: Any) -> Any:
    # As SQLAlchemy's JSONB type stores them: a JSON document, None as JSON null.
    return Jsonb(value) if name in _JSON else value


def _notices(op: Operation, last: ChainedEvent) -> tuple[Notice, ...]:
    """What the state the operation opens in owes a human (awaiting approval: a notice)."""
    kind = kind_for(op.state)
    if kind is None:
        return ()
    return (notice(kind, Subject.of(op), mark=last.seq, at=last.draft.at),)


def _event_row(event: ChainedEvent, created_at: Any) -> dict[str, Any]:
    draft = event.draft
    return {
        "operation_id": uuid.UUID(event.operation_id),
        "operation_created_at": created_at,  # the partition key (0023)
        "seq": event.seq,
        "actor": draft.actor,
        "at": draft.at,
        "from_state": draft.from_state,
        "to_state": draft.to_state,
        "kind": draft.kind.value,
        "cause": draft.cause,
        "delay_source": draft.delay_source,
        "http_status": draft.http_status,
        "provider_request_id": draft.provider_request_id,
        "excerpt": draft.excerpt,
        "row_digest": event.row_digest,
        "prev_hash": event.prev_hash,
        "hash": event.hash,
    }


def _columns(op: Operation) -> dict[str, Any]:
    """The row's columns as the snapshot holds them; one left unset takes its default
    (NULL for every one the snapshot has None), so the statement's shapes stay few."""
    # States, reasons, the ending and the polling mode are enums in the snapshot; their
    # columns hold the text, as store._bound binds them for every later write.
    values: dict[str, Any] = {}
    for name in COLUMNS:
        value = getattr(op, name)
        if value is not None:
            values[name] = value.value if isinstance(value, Enum) else value
    return values


@dataclass(frozen=True, slots=True, kw_only=True)
class Stored:
    """What a replay or a conflict answers from: the operation a taken key names."""

    operation_id: uuid.UUID
    request_fingerprint: str
    state: str
    trace_id: str
    created_state: str | None  # the state its ``created`` answer named, if on the log


@dataclass(frozen=True, slots=True)
class Claim:
    """What the claim's one statement did with a key."""

    # The snapshot as stored when this claim recorded the operation; None if the key (or
    # the source event) was taken.
    inserted: Operation | None
    # The operation a taken key names as the statement saw it, its replay or conflict
    # entry logged by the same statement; None when it saw none (the caller reads afresh).
    taken: Stored | None = None


def insert(  # noqa: PLR0913 - the claim's one statement, each part named at the call
    session: Session,
    op: Operation,
    plan: Plan,
    created: IntakeEntry,
    *,
    lock_timeout: str | None,
    contract_text: str | None = None,
) -> Operation | None:
    """``claim``'s inserted snapshot, for a writer that answers a taken key itself."""
    return claim(
        session, op, plan, created, lock_timeout=lock_timeout, contract_text=contract_text
    ).inserted


def claim(  # noqa: PLR0913 - as insert
    session: Session,
    op: Operation,
    plan: Plan,
    created: IntakeEntry,
    *,
    lock_timeout: str | None,
    contract_text: str | None = None,
    answer_taken: bool = False,
    http_statuses: Mapping[str, int] | None = None,
) -> Claim:
    """Insert a new operation with its plan's events and the ``created`` intake entry,
    unless (tenant, key) or its source event is taken. ``Claim.inserted`` is the snapshot
    as stored when this call recorded them, None when the key (or source event) was
    already taken.

    ``op`` is the snapshot the core opened (``plan.changes``, if any, applied to it);
    ``plan.events`` are chained here, once, from the genesis hash, the last with the
    digest of the row being inserted, and the row's head set to match. A concurrent
    submission of the same key still uncommitted makes this wait on the unique index
    for ``lock_timeout``, then raise SubmissionInProgressError (the transaction is
    aborted; nothing was recorded). ``lock_timeout=None``: the session's connection
    already carries it (db.claim_session, autocommit: the statement is its transaction).
    ``contract_text``: the text of the contract ``op.contract_digest`` names, kept unless
    it already is (its foreign key is checked at the statement's end, after every insert).
    ``answer_taken``: a taken key the statement sees is answered by it too, replayed or
    conflict, with ``created``'s fields and ``http_statuses``' codes (``Claim.taken``).
    """
    if not plan.events:
        raise ValueError("an operation is inserted with its intent event")
    opened = op.with_changes(plan.changes) if plan.changes else op
    values = _columns(opened)
    row = {name: values.get(name, _DEFAULTS[name]) for name in ROW_FACTS}
    chained = chain(
        str(opened.operation_id),
        plan.events,
        last_seq=0,
        last_hash=GENESIS_HASH,
        row_digest=row_digest(row),
    )
    head: RowChanges = {
        "event_count": len(chained),
        "last_event_hash": chained[-1].hash,
        "last_event_kind": chained[-1].draft.kind,
        "version": 1,
    }
    # The newest event's kind is held as its enum; its column holds the text (0028).
    columns = {**values, **row, **head, "last_event_kind": chained[-1].draft.kind.value}
    params: dict[str, Any] = {
        key: Jsonb(columns[c]) if json else columns[c]
        for c, key, json in _OPERATION_PARAMS
        if c in columns
    }
    for c, key in _HOT_PARAMS:
        params[key] = columns.get(c, _DEFAULTS[c])
    for i, event in enumerate(chained):
        fields = _event_row(event, columns["created_at"])
        for c, json in _EVENT_PARAMS:
            params[f"e{i}_{c}"] = Jsonb(fields[c]) if json else fields[c]
    for c, key, json in _ENTRY_PARAMS:
        value = getattr(created, c)
        params[key] = Jsonb(value) if json else value
    # An operation that starts by waiting for a human's approval tells them, atomically.
    notices = _notices(opened, chained[-1])
    params.update(outbox.params(notices))
    pinned = contract_text is not None and opened.contract_digest is not None
    if pinned:
        params.update(
            c_digest=opened.contract_digest,
            c_provider=opened.provider,
            c_text=contract_text,
            c_first_seen=opened.created_at,
        )
    answered = answer_tallies.classes(chained)
    params.update(answer_tallies.params(opened.provider, answered))
    if answer_taken:
        statuses = http_statuses or {}
        params.update(a_replayed=statuses.get("replayed"), a_conflict=statuses.get("conflict"))
    shape = (tuple(columns), len(chained), outbox.rows(notices), pinned, len(answered))
    statement = _claim(*shape, answering=answer_taken)
    if lock_timeout is not None:
        session.execute(text(f"SET LOCAL lock_timeout = '{lock_timeout}'"))
    in_progress = {
        LOCK_NOT_AVAILABLE: lambda: SubmissionInProgressError(opened.tenant, opened.idempotency_key)
    }
    with wrap_exceptions(in_progress):
        found = raw_execute(session, statement.sql, statement.values(params)).fetchone()
    assert found is not None  # count(*) and the LEFT JOIN answer exactly one row
    if found[0]:
        return Claim(inserted=opened.with_changes(head))
    if not answer_taken or found[1] is None:
        return Claim(inserted=None)
    return Claim(inserted=None, taken=_stored(found[1:]))


# One round trip for a taken key's answer: the operation's four columns and the state its
# created entry named (a whole snapshot and a second query cost a replay twice the CPU).
_STORED: Final = (
    "SELECT o.operation_id, o.request_fingerprint, o.state::text, o.trace_id, "
    "(SELECT l.state FROM intake_log l WHERE l.operation_id = o.operation_id "
    "AND l.outcome = 'created' ORDER BY l.entry_id LIMIT 1) "
    "FROM operations o WHERE o.tenant = %(tenant)s AND o.idempotency_key = %(key)s"
)


def stored(session: Session, tenant: str, key: str) -> Stored | None:
    """The operation (tenant, key) names, or None if no committed one does."""
    # On the session's psycopg connection: SQLAlchemy's result machinery around this one
    # read cost a replay more than the read's own driver work.
    row = driver_execute(session, _STORED, {"tenant": tenant, "key": key}).fetchone()
    return None if row is None else _stored(row)


def _stored(row: Sequence[Any]) -> Stored:
    operation_id, fingerprint, state, trace_id, created_state = row
    return Stored(
        operation_id=operation_id,
        request_fingerprint=fingerprint,
        state=state,
        trace_id=trace_id,
        created_state=created_state,
    )


# The log entry of an answer that created nothing (replayed, conflict, in progress ...),
# as one prepared text statement: SQLAlchemy's ORM insert built its values per call at
# a quarter of a replay's CPU.
_LOG: Final = "INSERT INTO intake_log ({}) VALUES ({})".format(*_select("l_", _ENTRY_CASTS))


def log(session: Session, entry: IntakeEntry) -> None:
    """Append ``entry`` to the intake log (api_store.append_intake's twin for intake's own
    answers, in the caller's session)."""
    params = {f"l_{c}": _bound(f"l_{c}", getattr(entry, c)) for c in _ENTRY_CASTS}
    driver_execute(session, _LOG, params)
