"""An operation's collected result as the shell reads it: where its bytes are (inline in
the row, or an object in the result store) and how to check them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import cast

from sqlalchemy import Table, select
from sqlalchemy.orm import Session

from jobwarden.models.persistence.tables import ResultRow

RESULTS = cast(Table, ResultRow.__table__)


def result_of(session: Session, operation_id: uuid.UUID) -> StoredResultRow | None:
    """Where an operation's collected result is and how to check it (None: no result)."""
    found = session.execute(
        select(
            RESULTS.c.content,
            RESULTS.c.location,
            RESULTS.c.content_type,
            RESULTS.c.sha256,
            RESULTS.c.size_bytes,
            RESULTS.c.record_count,
        ).where(RESULTS.c.operation_id == operation_id)
    ).first()
    if found is None:
        return None
    return StoredResultRow(
        content=bytes(found.content) if found.content is not None else None,
        location=found.location,
        content_type=found.content_type,
        sha256=found.sha256,
        size_bytes=found.size_bytes,
        record_count=found.record_count,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredResultRow:
    """An operation_results row as the shell reads it: inline bytes or a location."""

    content: bytes | None
    location: str | None
    content_type: str | None
    sha256: str
    size_bytes: int
    # How many items the result holds, when its contract counts them (records, lines).
    record_count: int | None = None
