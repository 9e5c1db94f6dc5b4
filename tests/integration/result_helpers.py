"""Helpers for the result download tests: an operation with its result row and object.

The object is written through ``ResultStore.put_stream`` (as collection writes it) into
the test run's own store (``JOBWARDEN_RESULT_STORE``, set by tests/conftest.py); the row
is inserted as ``store.write`` inserts it.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator

from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.tables import ResultRow
from jobwarden.models.results.objects import object_key
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.results.store import ResultStore
from tests.integration.api_helpers import NOW, insert_operation


def run_store() -> ResultStore:
    """The test run's result store, the one the API under test reads."""
    return ResultStore.from_url(os.environ["JOBWARDEN_RESULT_STORE"])


def pattern(size: int, seed: int = 7) -> bytes:
    """``size`` bytes that differ at every offset of a small period (a slice is checkable)."""
    return bytes((i * 31 + seed + i // 251) % 256 for i in range(size))


def chunks_of(data: bytes, size: int = 64 * 1024) -> Iterator[bytes]:
    for at in range(0, len(data), size):
        yield data[at : at + size]


def insert_result_row(
    url: str,
    op_id: uuid.UUID,
    *,
    data: bytes,
    location: str | None,
    content_type: str | None = "application/x-ndjson",
) -> None:
    with transaction(url) as session:
        session.add(
            ResultRow(
                operation_id=op_id,
                content=None if location is not None else data,
                location=location,
                content_type=content_type,
                sha256=hashlib.sha256(data).hexdigest(),
                size_bytes=len(data),
                record_count=None,
                failed_items=None,
                collected_at=NOW,
            )
        )


def operation_with_result(
    url: str,
    tenant: str,
    data: bytes,
    *,
    state: S = S.succeeded,
    inline: bool = False,
    store: ResultStore | None = None,
    content_type: str | None = "application/x-ndjson",
) -> tuple[uuid.UUID, str | None]:
    """An operation in ``state`` with ``data`` as its result; (its id, the object's URL)."""
    op_id = insert_operation(url, tenant, state)
    location = None
    if not inline:
        rs = store or run_store()
        stored = rs.put_stream(
            object_key(tenant, str(op_id)), chunks_of(data), max_bytes=len(data) + 1
        )
        location = stored.location
    insert_result_row(url, op_id, data=data, location=location, content_type=content_type)
    return op_id, location
