"""A stored result is checked before it is trusted (issue 33, finding 9).

The row records each result's sha256 and size (DESIGN invariant 14); the bytes live in
the row (inline) or in the result store, where anyone with access to the directory or
bucket can replace them. Before the first byte of a download leaves:

- an inline result is hashed (it is at most 64 KiB);
- a stored object is read once, streamed, and hashed (``ResultStore.digest``: memory of
  one chunk), and the bytes are then served with ``If-Match`` on the store tag that read
  saw, so a Range read only ever comes from the object that was verified. A check is
  remembered per process by (location, sha256, store tag), so a client resuming a large
  download range by range pays the hash once; a replaced object has another tag, and is
  checked again;
- a whole object is hashed once more as it streams, its last chunk held back until the
  digest matched: bytes changed in place during the read (a tag that did not move) cut
  the body short of its ``Content-Length``, which every HTTP client reports as an error.

A mismatch answers 502 ``result_integrity_failed`` (RFC 9110 section 15.6.3: the result
store, the server's upstream, gave an invalid answer; retrying cannot help), logs a
WARNING ``result_integrity_failed`` and appends one ``result_integrity_failed`` event to
the operation's history (not repeated while it is the history's last event).
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from datetime import datetime

from jobwarden.api.problems import ProblemError
from jobwarden.models.actions import Decided, Record
from jobwarden.models.errors import LostRaceError, ResultIntegrityError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.persistence.result_rows import StoredResultRow
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.runtime import Runtime
from jobwarden.tasks.steps import Writer, under_lease

log = get_logger("jobwarden.api")

ACTOR = "api:result_download"
# Objects remembered as verified per API process; the oldest is forgotten first.
VERIFIED_ENTRIES = 1024


class _Verified:
    """(location, sha256) -> the store tag of the object that hashed to that sha256."""

    def __init__(self, entries: int) -> None:
        self._entries = entries
        self._tags: OrderedDict[tuple[str, str], str] = OrderedDict()
        self._lock = threading.Lock()  # the route runs in Starlette's thread pool

    def holds(self, location: str, sha256: str, tag: str | None) -> bool:
        with self._lock:
            return tag is not None and self._tags.get((location, sha256)) == tag

    def add(self, location: str, sha256: str, tag: str | None) -> None:
        if tag is None:  # a store without tags: nothing to tell a replaced object by
            return
        with self._lock:
            self._tags[(location, sha256)] = tag
            self._tags.move_to_end((location, sha256))
            while len(self._tags) > self._entries:
                self._tags.popitem(last=False)

    def forget(self, location: str, sha256: str) -> None:
        with self._lock:
            self._tags.pop((location, sha256), None)


VERIFIED = _Verified(VERIFIED_ENTRIES)


def mismatch_problem(size: int, sha256: str, result: StoredResultRow) -> str | None:
    """What differs between bytes read and the row's record of them (None: they match)."""
    if size != result.size_bytes:
        return f"{size} bytes where {result.size_bytes} were recorded"
    if sha256 != result.sha256:
        return f"sha256 {sha256} where {result.sha256} was recorded"
    return None


def check_inline(rt: Runtime, operation_id: uuid.UUID, result: StoredResultRow) -> None:
    """Raise the 502 problem unless the row's own bytes hash to its recorded digest."""
    assert result.content is not None
    content = result.content
    problem = mismatch_problem(len(content), hashlib.sha256(content).hexdigest(), result)
    if problem is not None:
        raise failed(rt, operation_id, "inline result", problem)


def check_object(
    rt: Runtime, operation_id: uuid.UUID, result: StoredResultRow, tag: str | None
) -> str | None:
    """The store tag of the verified object at the result's location; the 502 problem if
    its bytes are not the recorded ones. Store failures raise as ``ResultStore.read``."""
    location = result.location
    assert location is not None
    if VERIFIED.holds(location, result.sha256, tag):
        return tag
    found = rt.result_store.digest(location, limit=result.size_bytes)
    problem = mismatch_problem(found.size, found.sha256, result)
    if problem is not None:
        VERIFIED.forget(location, result.sha256)
        raise failed(rt, operation_id, location, problem)
    VERIFIED.add(location, result.sha256, found.tag)
    return found.tag


def held_back(
    rt: Runtime, operation_id: uuid.UUID, result: StoredResultRow, chunks: Iterator[bytes]
) -> Iterator[bytes]:
    """``chunks`` (the whole object), the last one sent only once the digest matched."""
    running = hashlib.sha256()
    seen = 0
    last: bytes | None = None
    for chunk in chunks:
        running.update(chunk)
        seen += len(chunk)
        if last is not None:
            yield last
        last = chunk
    problem = mismatch_problem(seen, running.hexdigest(), result)
    if problem is not None:
        assert result.location is not None
        VERIFIED.forget(result.location, result.sha256)
        failed(rt, operation_id, result.location, problem)
        # Past the headers the only signal left is a body cut short of Content-Length.
        raise ResultIntegrityError(result.location, problem)
    if last is not None:
        yield last


def failed(rt: Runtime, operation_id: uuid.UUID, where: str, problem: str) -> ProblemError:
    """Log and record a mismatch; the problem to answer (502 ``result_integrity_failed``)."""
    log.warning(
        "result_integrity_failed", operation_id=str(operation_id), location=where, error=problem
    )
    _record(rt, operation_id, where, problem)
    return ProblemError(
        502,
        "result_integrity_failed",
        f"operation {operation_id}: its stored result's bytes do not match the recorded "
        "digest; they were not served",
    )


def _record(rt: Runtime, operation_id: uuid.UUID, where: str, problem: str) -> None:
    def record(op: Operation, _: datetime) -> Decided | None:
        # Every download of a damaged result fails alike; one event says it until
        # something else happens to the operation (a client retrying in a loop must not
        # grow the history without bound).
        if op.last_event_kind is EventKind.result_integrity_failed:
            return None
        excerpt = {"location": where, "problem": problem}
        return Decided(
            action=Record(
                event=EventKind.result_integrity_failed,
                cause="stored result bytes do not match their digest",
                excerpt=excerpt,
            )
        )

    writer = Writer(actor=ACTOR, lease_required=False, attempts=3)
    try:
        under_lease(rt, operation_id, record, writer)
    except LostRaceError as exc:  # three writers in a row were faster: the log line stays
        log.warning("result_integrity_unrecorded", operation_id=str(operation_id), error=str(exc))
