"""A result download streamed into the result store and judged on the way (issue 21).

The edge hands a 2xx result body to ``collector(...)`` chunk by chunk; nothing holds the
whole body. Each chunk feeds the core's ``ResultScan`` (digests, size bound, JSON Lines
item outcomes) and the store's upload at once, so the verdict's sha256 and size are
those of the stored bytes. A body that ends within ``INLINE_LIMIT`` stays in the
database instead (no object for a 2 KiB answer).

What is never recorded as the result: a body past its bound (the upload is aborted), an
upload the store cut short (``ResultStoreUnavailableError`` reaches the edge, which
records a ``result_store`` transport failure: the download is tried again under the
same counted budget), and bytes that are not the provider's (a digest contradicted
them: the finished object is deleted again, best effort).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

from jobwarden.models.actions import Decided, RequestPurpose, Succeed
from jobwarden.models.errors import ResultStoreUnavailableError, ResultTooLargeError
from jobwarden.models.operation import Operation
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.results.objects import object_key
from jobwarden.models.results.pages import held_limit, page_shape
from jobwarden.models.results.validation import (
    INLINE_LIMIT,
    Collected,
    ResultScan,
    failed_lines_spec,
)
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.provider.edge import ResultCollector
from jobwarden.tasks.provider.transport import BodyState
from jobwarden.tasks.results.store import ResultStore

log = get_logger("jobwarden.results")


def collector(
    store: ResultStore,
    op: Operation,
    ctx: StepContext,
    purpose: RequestPurpose = RequestPurpose.result,
) -> ResultCollector:
    """What the edge calls with ``op``'s result body; its bytes go to ``store``.

    ``purpose`` ``failed_items``: the failed-items file (OpenAI ``error_file_id``), read
    as one failed item per line and always stored as an object of its own, never inline.
    """
    spec = ctx.contract.result
    assert spec is not None  # a result download is built only from a contract's [result]
    expected = dict((op.validation_summary or {}).get("expected") or {})
    key = object_key(op.tenant, str(op.operation_id))
    inline_limit = INLINE_LIMIT
    # A result that may be paged is also held whole up to the paging bound: the core reads
    # its next link (models/result_pages), as it would hold the pages' items anyway.
    page_limit = held_limit(spec) if page_shape(ctx.contract) is not None else -1
    if purpose is RequestPurpose.failed_items:
        spec, expected, inline_limit = failed_lines_spec(spec), {}, -1
        key = object_key(op.tenant, str(op.operation_id), "failed_items")
        page_limit = -1

    def collect(headers: Mapping[str, str], chunks: Iterator[bytes], state: BodyState) -> Collected:
        scan = ResultScan(
            spec, content_type=headers.get("content-type"), promised=expected, headers=headers
        )
        head = bytearray()
        for chunk in chunks:
            scan.feed(chunk)
            head += chunk
            if len(head) > inline_limit:
                break
        else:
            # Ended within the inline limit: the bytes stay beside their facts.
            whole = bytes(head)
            page = whole if len(whole) <= page_limit else None
            verdict = scan.finish(state.problem)
            return Collected(verdict=verdict, location=None, inline=whole, page=page)
        held: bytearray | None = bytearray(head) if len(head) <= page_limit else None

        def rest() -> Iterator[bytes]:
            nonlocal held
            yield bytes(head)
            for chunk in chunks:
                scan.feed(chunk)
                if held is not None:
                    held += chunk
                    if len(held) > page_limit:
                        held = None  # past the paging bound: this body is never paged
                yield chunk

        try:
            stored = store.put_stream(key, rest(), max_bytes=spec.max_bytes)
        except ResultTooLargeError:
            # Aborted before it was whole: nothing at the key, and the scan says why.
            return Collected(verdict=scan.finish("too_large"), location=None, inline=None)
        verdict = scan.finish(state.problem)
        if not verdict.keepable or (verdict.sha256, verdict.size_bytes) != (
            stored.sha256,
            stored.size,
        ):
            # Not the provider's bytes (a digest contradicted them, the body broke off):
            # never the result, so not kept in the store either.
            _discard(store, stored.location)
            return Collected(verdict=verdict, location=None, inline=None)
        page = bytes(held) if held is not None else None
        return Collected(verdict=verdict, location=stored.location, inline=None, page=page)

    return collect


def _discard(store: ResultStore, location: str) -> None:
    try:
        store.delete(location)
    except ResultStoreUnavailableError:
        # Unrecorded either way: an orphan the next collection overwrites at the same key.
        log.warning("result_discard_failed", location=location)


def stored_whole(store: ResultStore, op: Operation, decided: Decided) -> Decided:
    """A result the core assembled itself (a paged list's one artifact, models/result_pages)
    goes to the result store, through its one write (``put_stream``), when it is larger
    than a row keeps inline; the success then records where it is. Anything else passes.

    A store that fails raises ``ResultStoreUnavailableError``: the step fails, is counted,
    and runs again from the pages held in the row (nothing is recorded as collected).
    """
    action = decided.action
    if not isinstance(action, Succeed) or action.content is None or action.location:
        return decided
    if len(action.content) <= INLINE_LIMIT or action.verdict is None:
        return decided
    key = object_key(op.tenant, str(op.operation_id))
    stored = store.put_stream(key, iter((action.content,)), max_bytes=len(action.content))
    return replace(decided, action=replace(action, content=None, location=stored.location))
