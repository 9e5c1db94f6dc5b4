"""The intake's claim as one statement: the operation, its first event, its intake entry.

Inserting the operation, then its event, then ``api_store.append_intake`` took four
statements (lock timeout, operation, event, entry) and composed a SQLAlchemy construct
per call, which cost more CPU than the database work. Here the three inserts are
data-modifying CTEs of one statement, built as text once per shape (which operation
columns are given):

    WITH claimed AS (INSERT INTO operations ... ON CONFLICT DO NOTHING RETURNING ...),
         first_event AS (INSERT INTO operation_events SELECT ... FROM claimed),
         entry AS (INSERT INTO intake_log SELECT ... FROM claimed)
    SELECT count(*) FROM claimed

So the event and the ``created`` entry exist exactly when the row was inserted, in the
same atomic statement; a taken key inserts nothing and the caller reads the stored row
and logs its own answer. Every bind is cast to its column's type: a NULL or a string in
a SELECT list would otherwise be typed text.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Final, cast

from psycopg.types.json import Jsonb
from sqlalchemy import Table, text
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Session

from jobwarden.models.history.chain import GENESIS_HASH, ChainedEvent, chain
from jobwarden.models.history.row_facts import ROW_FACTS, row_digest
from jobwarden.models.humans.notifications import Notice, Subject, kind_for, notice
from jobwarden.models.persistence import outbox
from jobwarden.models.persistence.api_store import IntakeEntry
from jobwarden.models.persistence.api_tables import IntakeLogRow
from jobwarden.models.persistence.tables import TIMER_COLUMNS, EventRow, OperationRow
from jobwarden.models.states import OperationState

OPERATIONS = cast(Table, OperationRow.__table__)
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
_EVENT_CASTS: Final = _casts(EVENTS, "event_id")
_ENTRY_CASTS: Final = _casts(INTAKE_LOG, "entry_id")
_JSON: Final = frozenset(
    f"{prefix}{c.name}"
    for prefix, table in (("o_", OPERATIONS), ("e_", EVENTS), ("l_", INTAKE_LOG))
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


@lru_cache(maxsize=64)
def _claim_sql(columns: tuple[str, ...], notifications: int = 0, pinned: bool = False) -> str:
    unknown = set(columns) - set(_OPERATION_CASTS) - TIMER_COLUMNS
    if unknown:
        raise ValueError(f"not operation columns: {', '.join(sorted(unknown))}")
    row = [c for c in columns if c not in TIMER_COLUMNS]
    op_names = ", ".join(f'"{c}"' for c in row)
    op_values = ", ".join(f"%(o_{c})s::{_OPERATION_CASTS[c]}" for c in row)
    timer = sorted(TIMER_COLUMNS)
    timer_names = ", ".join(f'"{c}"' for c in timer)
    timer_values = ", ".join(f"%(t_{c})s::timestamptz" for c in timer)
    event_names, event_values = _select("e_", _EVENT_CASTS)
    entry_names, entry_values = _select("l_", _ENTRY_CASTS)
    return (
        f"WITH claimed AS (INSERT INTO operations ({op_names}) VALUES ({op_values}) "
        "ON CONFLICT DO NOTHING RETURNING operation_id), "
        # Every operation has its timer row from the start (tables.TimerRow).
        f"timer AS (INSERT INTO operation_timers (operation_id, {timer_names}) "
        f"SELECT operation_id, {timer_values} FROM claimed), "
        f"first_event AS (INSERT INTO operation_events ({event_names}) "
        f"SELECT {event_values} FROM claimed), "
        + (_PIN_CONTRACT if pinned else "")
        + f"entry AS (INSERT INTO intake_log ({entry_names}) SELECT {entry_values} FROM claimed) "
        + (", " + outbox.cte("noted", notifications, "FROM claimed") + " " if notifications else "")
        + "SELECT count(*) FROM claimed"
    )


def _default(name: str) -> Any:
    """What the column holds when an insert leaves it out (its scalar default, else NULL)."""
    default = OPERATIONS.c[name].default
    return default.arg if default is not None and default.is_scalar else None  # type: ignore[attr-defined]


def _bound(name: str, value: Any) -> Any:
    # As SQLAlchemy's JSONB type stores them: a JSON document, None as JSON null.
    return Jsonb(value) if name in _JSON else value


def _notices(columns: Mapping[str, Any], first: ChainedEvent) -> tuple[Notice, ...]:
    state = OperationState(columns["state"])
    kind = kind_for(state)
    if kind is None:
        return ()
    subject = Subject(
        operation_id=first.operation_id,
        tenant=columns["tenant"],
        provider=columns["provider"],
        state=state,
        trace_id=columns["trace_id"],
        request_fingerprint=columns["request_fingerprint"],
        next_poll_at=columns.get("next_poll_at"),
    )
    return (notice(kind, subject, mark=first.seq, at=first.draft.at),)


def claim(  # noqa: PLR0913 - the claim's one statement, each part named at the call
    session: Session,
    values: Mapping[str, Any],
    first: ChainedEvent,
    created: IntakeEntry,
    *,
    lock_timeout: str,
    contract_text: str | None = None,
) -> bool:
    """Insert a new operation, its first event and the ``created`` intake entry, unless
    (tenant, key) or its source event is taken; True when this call recorded them.

    ``first`` is chained again with the digest of the row being inserted, and the head
    in ``values`` replaced to match. A concurrent
    submission of the same key still uncommitted makes this wait on the unique index
    for ``lock_timeout``, then raise lock_not_available (55P03). ``contract_text``: the
    text of the contract ``values["contract_digest"]`` names, kept unless it already is
    (its foreign key is checked at the statement's end, after every insert in it).
    """
    if first.seq != 1 or first.prev_hash != GENESIS_HASH:
        raise ValueError("claim records an operation's first event only")
    row = {name: values[name] if name in values else _default(name) for name in ROW_FACTS}
    (bound,) = chain(
        first.operation_id,
        [first.draft],
        last_seq=0,
        last_hash=GENESIS_HASH,
        row_digest=row_digest(row),
    )
    columns = {**values, **row, "event_count": 1, "last_event_hash": bound.hash}
    draft = bound.draft
    event = {
        "operation_id": uuid.UUID(bound.operation_id),
        "operation_created_at": columns["created_at"],  # the partition key (0023)
        "seq": bound.seq,
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
        "row_digest": bound.row_digest,
        "prev_hash": bound.prev_hash,
        "hash": bound.hash,
    }
    entry = {name: getattr(created, name) for name in _ENTRY_CASTS}
    params = {f"o_{c}": _bound(f"o_{c}", v) for c, v in columns.items() if c not in TIMER_COLUMNS}
    params.update({f"t_{c}": columns.get(c) for c in TIMER_COLUMNS})
    params.update({f"e_{c}": _bound(f"e_{c}", event[c]) for c in _EVENT_CASTS})
    params.update({f"l_{c}": _bound(f"l_{c}", entry[c]) for c in _ENTRY_CASTS})
    # An operation that starts by waiting for a human's approval tells them, atomically.
    notices = _notices(columns, bound)
    params.update(outbox.params(notices))
    pinned = contract_text is not None and values.get("contract_digest") is not None
    if pinned:
        params.update(
            c_digest=values["contract_digest"],
            c_provider=values["provider"],
            c_text=contract_text,
            c_first_seen=values["created_at"],
        )
    sql = _claim_sql(tuple(columns), outbox.rows(notices), pinned)
    session.execute(text(f"SET LOCAL lock_timeout = '{lock_timeout}'"))
    inserted = session.connection().exec_driver_sql(sql, params).scalar_one()
    return bool(inserted)
