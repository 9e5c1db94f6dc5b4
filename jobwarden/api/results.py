"""GET and HEAD /v1/operations/{id}/result: a collected result's bytes, streamed (issue 21).

Scope ``read``, the token's tenant only (another tenant's operation is the same 404 as an
unknown one, as on every read route). The bytes come from the row (a result within 64 KiB
is inline) or from the result store, streamed in the store's chunks, so a 2 GiB result
costs the API process about one chunk of memory (scripts/bench_result_download.py).

Headers (the rules are in ``models/results/access.py``): ``Content-Type`` (stored, else
octet-stream), ``Content-Length``, ``Repr-Digest`` (RFC 9530 section 3, the whole
result's sha256, also on a 206), a strong ``ETag`` (the sha256), ``Accept-Ranges: bytes``
and ``Jobwarden-Result-Validated``: ``true`` (succeeded), ``false`` (kept after failing
validation) or ``accepted`` (a person accepted it as it is). One range per request (RFC
9110 section 14): 206 with ``Content-Range``, read from the store by range; 416 with
``Content-Range: bytes */size`` when no byte of it exists; several ranges or a malformed
header are ignored (200, the whole). ``Content-Disposition: attachment`` and ``nosniff``
because the bytes are a provider's: a browser must never render them as our page.

What a client can act on:

- 404 ``no_result``: nothing to download in this state (still running, failed, ended
  without result, or invalid bytes that were not kept); the detail names the state.
- 410 ``result_missing``: the row says bytes were stored, the store has none (or other
  ones, of another size) at its location. Not a 5xx: retrying cannot help, the result is
  gone until an operator restores it, and ``jobwarden verify`` names the same fact; the
  event is logged at error level so the operator sees it without a client's report.
- 502 ``result_integrity_failed``: the stored bytes (in the store or the row) are not
  the ones whose digest was recorded; nothing was served, the mismatch is logged at
  WARNING and recorded in the operation's history (``api/result_checks.py``: every
  download, HEAD included, is checked against the digest before its first byte).
- 503 ``result_store_unavailable`` with ``Retry-After``: the store failed; try later.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request, Response
from fastapi.responses import StreamingResponse

from jobwarden.api import result_checks
from jobwarden.api.auth import Principal, Scope, require
from jobwarden.api.context import runtime_of, settings_of
from jobwarden.api.problems import ProblemError
from jobwarden.api.queries import parse_operation_id
from jobwarden.api.responses import problem_responses
from jobwarden.api.views import NOT_FOUND, NOT_FOUND_DETAIL, OperationId
from jobwarden.models.errors import (
    ResultChangedError,
    ResultLocationError,
    ResultMissingError,
    ResultStoreUnavailableError,
)
from jobwarden.models.persistence import query_store, result_rows
from jobwarden.models.persistence.db import snapshot
from jobwarden.models.persistence.result_rows import StoredResultRow
from jobwarden.models.results.access import (
    ByteRange,
    Unsatisfiable,
    choose_range,
    content_type,
    repr_digest,
    strong_etag,
    validated,
    validated_header,
)
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.runtime import Runtime

router = APIRouter(tags=["operations"])
log = get_logger("jobwarden.api")

VALIDATED_HEADER = "Jobwarden-Result-Validated"
STORE_RETRY_SECONDS = 30
_HEADERS: dict[str, Any] = {
    "Content-Length": {"schema": {"type": "integer"}},
    "Repr-Digest": {
        "description": "RFC 9530 section 3: sha-256 of the whole result",
        "schema": {"type": "string"},
    },
    "ETag": {"description": "strong: the result's sha256", "schema": {"type": "string"}},
    "Accept-Ranges": {"schema": {"type": "string", "enum": ["bytes"]}},
    VALIDATED_HEADER: {"schema": {"type": "string", "enum": ["true", "false", "accepted"]}},
}
# The stored media type (application/octet-stream when none was recorded).
_BYTES = {"*/*": {"schema": {"type": "string", "format": "binary"}}}
RESPONSES: dict[int | str, dict[str, Any]] = {
    **problem_responses(
        {
            404: f"{NOT_FOUND}; or no_result: the operation has no result to download",
            410: "result_missing: the stored bytes are gone from the result store",
            416: "range_not_satisfiable: no byte of the range is in the result",
            502: "result_integrity_failed: the stored bytes do not match the recorded digest",
            503: "result_store_unavailable: the result store failed (Retry-After)",
        }
    ),
    200: {"description": "the whole result, streamed", "content": _BYTES, "headers": _HEADERS},
    206: {"description": "one byte range of it", "content": _BYTES, "headers": _HEADERS},
}


def _owned_result(
    request: Request, principal: Principal, raw_id: str
) -> tuple[str, StoredResultRow]:
    """The state of the tenant's operation and its result row, or the problem to answer."""
    operation_id = parse_operation_id(raw_id)
    with snapshot(settings_of(request).database_url) as session:
        # The result first: it is written in the commit that sets its state, so the state
        # read after it is that one or a later one (never a stale result_collecting).
        result = result_rows.result_of(session, operation_id)
        row = query_store.operation_for_tenant(session, principal.tenant, operation_id)
    if row is None:
        raise ProblemError(404, "not_found", NOT_FOUND_DETAIL)
    if result is None:
        raise ProblemError(
            404, "no_result", f"operation {row.operation_id} is {row.state}: it has no result"
        )
    return row.state, result


def _store_problem(exc: Exception, operation_id: str, location: str) -> ProblemError:
    if isinstance(exc, ResultStoreUnavailableError):
        retry = int(exc.retry_after or STORE_RETRY_SECONDS)
        log.warning("result_download_store_unavailable", operation_id=operation_id, error=str(exc))
        return ProblemError(
            503,
            "result_store_unavailable",
            "the result store does not answer; try again later",
            headers={"Retry-After": str(retry)},
        )
    # Missing, another size, or a location outside this server's store: the bytes the row
    # promises cannot be served until an operator acts. The location stays in the log.
    log.error(
        "result_download_missing", operation_id=operation_id, location=location, error=str(exc)
    )
    return ProblemError(
        410, "result_missing", f"operation {operation_id}: its stored result bytes are gone"
    )


def _check_object(rt: Runtime, result: StoredResultRow, operation_id: uuid.UUID) -> str | None:
    """The store tag of the object at the result's location once the store holds the
    recorded bytes there (their size, then their sha256: ``result_checks``)."""
    location = result.location
    assert location is not None
    try:
        found = rt.result_store.head(location)
        if found is None or found[0] != result.size_bytes:
            raise _store_problem(
                ResultMissingError(location) if found is None else ValueError(f"{found[0]} bytes"),
                str(operation_id),
                location,
            )
        return result_checks.check_object(rt, operation_id, result, found[1])
    except (ResultStoreUnavailableError, ResultLocationError, ResultMissingError) as exc:
        raise _store_problem(exc, str(operation_id), location) from None


def _streamed(chunks: Iterator[bytes], operation_id: str) -> Iterator[bytes]:
    # Past the headers a failure can only cut the body short: the client sees fewer bytes
    # than Content-Length (and a digest that fails); the cut is logged here.
    try:
        yield from chunks
    except ResultStoreUnavailableError as exc:
        log.error("result_download_cut", operation_id=operation_id, error=str(exc))
        raise


def get_result(
    operation_id: OperationId,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.read))],
    range_: Annotated[str | None, Header(alias="Range")] = None,
    if_range: Annotated[str | None, Header(alias="If-Range")] = None,
) -> Response:
    """The operation's collected result, streamed; one byte range with ``Range``."""
    state, result = _owned_result(request, principal, operation_id)
    op_uuid = parse_operation_id(operation_id)
    op_id = str(op_uuid)
    etag = strong_etag(result.sha256)
    headers = {
        "Repr-Digest": repr_digest(result.sha256),
        "ETag": etag,
        "Accept-Ranges": "bytes",
        VALIDATED_HEADER: validated_header(validated(state)),
        "Content-Disposition": f'attachment; filename="{op_id}.result"',
        "X-Content-Type-Options": "nosniff",
        "Cache-Control": "private",
    }
    media = content_type(result.content_type)
    chosen = choose_range(range_, if_range, result.size_bytes, etag)
    if isinstance(chosen, Unsatisfiable):
        raise ProblemError(
            416,
            "range_not_satisfiable",
            f"the result has {chosen.size} bytes; no byte of the range is in it",
            headers={"Content-Range": chosen.content_range, **headers},
        )
    status, length = (206, chosen.length) if chosen else (200, result.size_bytes)
    headers["Content-Length"] = str(length)
    if chosen is not None:
        headers["Content-Range"] = chosen.content_range
    rt = runtime_of(request)
    if result.content is not None:
        result_checks.check_inline(rt, op_uuid, result)
        body = _slice(result.content, chosen)
        return Response(b"" if request.method == "HEAD" else body, status, headers, media)
    # The object is checked, then read with If-Match on the tag the check saw; an object
    # replaced in between is checked again, once (a second change: try again later).
    for attempt in range(2):
        tag = _check_object(rt, result, op_uuid)
        if request.method == "HEAD":
            return Response(b"", status, headers, media)
        chunks = _opened(rt, result, op_id, chosen, tag, last=attempt == 1)
        if chunks is not None:
            if chosen is None:
                chunks = result_checks.held_back(rt, op_uuid, result, chunks)
            return StreamingResponse(_streamed(chunks, op_id), status, headers, media)
    raise AssertionError("unreachable: the last attempt returns or raises")  # pragma: no cover


def _opened(  # noqa: PLR0913 - the read's own inputs, each named at the one call
    rt: Runtime,
    result: StoredResultRow,
    op_id: str,
    chosen: ByteRange | None,
    tag: str | None,
    *,
    last: bool,
) -> Iterator[bytes] | None:
    """The object's bytes (the chosen range) if it still has ``tag``; None: check again."""
    location = result.location
    assert location is not None
    start, end = (chosen.start, chosen.end) if chosen else (None, None)
    try:
        return rt.result_store.read(location, start, end, if_match=tag)
    except ResultChangedError:
        if not last:
            return None
        exc: Exception = ResultStoreUnavailableError(f"{location} changed while being read")
    except (ResultMissingError, ResultStoreUnavailableError, ResultLocationError) as err:
        exc = err
    raise _store_problem(exc, op_id, location) from None


# One route per method: each needs its own OpenAPI operation id.
for _method, _operation_id in (("GET", "download_result"), ("HEAD", "head_result")):
    router.add_api_route(
        "/v1/operations/{operation_id}/result",
        get_result,
        methods=[_method],
        response_class=Response,
        responses=RESPONSES,
        operation_id=_operation_id,
    )


def _slice(content: bytes, chosen: ByteRange | None) -> bytes:
    return content if chosen is None else content[chosen.start : chosen.end]
