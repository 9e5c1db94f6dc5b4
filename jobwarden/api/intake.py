"""POST /v1/operations: the HTTP door of intake (issue 10, items 3, 7, 8, 9).

The route builds one ``SubmissionRequest`` and calls tasks/intake.py ``submit_request``,
the same function behind every door, so they all fingerprint, claim and log alike.

Idempotency follows draft-ietf-httpapi-idempotency-key-header (section 2.7, error
scenarios): a missing key is 400, a key reused with another fingerprint is 422
(checked before "in progress"), a key whose first request is still being recorded
is 409. A retry of a completed request gets the original answer (status and body)
again; the draft names no header for that, so ours is ``Idempotent-Replayed: true``.

An answer naming an operation that waits on a queue no worker consumes says so (issue
36, point 5): a ``warnings`` member in the body, and ``Jobwarden-Warning: no_worker``, a
header of our own (RFC 9111 obsoleted ``Warning``, which was about caches anyway). The
warning is advice about now, so a replay carries today's, not the first answer's.
"""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from jobwarden.api.auth import Principal, Scope, authorize, bearer, read_for_submit
from jobwarden.api.context import runtime_of, settings_of
from jobwarden.api.problems import ProblemError
from jobwarden.api.responses import named_body, problem_answers
from jobwarden.api.views import storable
from jobwarden.models.errors import InvalidCommandError, RefusedInputError
from jobwarden.models.intake.submission import SubmissionRequest
from jobwarden.models.intake.trace_context import traceparent
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence.api_store import IntakeEntry
from jobwarden.models.persistence.db import snapshot
from jobwarden.observability import telemetry
from jobwarden.tasks.intake import Caller, SubmitOutcome, SubmitResult, submit_request
from jobwarden.tasks.provider.edge import json_depth, parse_json
from jobwarden.tasks.runtime import Runtime

router = APIRouter(tags=["operations"])

REPLAY_HEADER = "Idempotent-Replayed"
# RFC 8941 list of tokens: each warning's code (today only no_worker).
WARNING_HEADER = "Jobwarden-Warning"
# How long a caller should wait before retrying a key whose first request is in progress.
IN_PROGRESS_RETRY_SECONDS = 1
# The status code of each answer, also written to the intake log's http_status.
HTTP_STATUSES: dict[str, int] = {
    SubmitOutcome.created.value: 201,
    SubmitOutcome.replayed.value: 201,  # the original answer's code (the draft's "retry")
    SubmitOutcome.duplicate_event.value: 200,  # nothing created: the existing operation
    SubmitOutcome.conflict.value: 422,
    SubmitOutcome.in_progress.value: 409,
    "invalid": 422,
}


class Bounds(BaseModel):
    """Tighter bounds than the contract's defaults; omitted ones keep the defaults."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_status_requests: int | None = Field(default=None, gt=0)
    result_deadline_seconds: float | None = Field(default=None, gt=0)
    max_transport_failures: int | None = Field(default=None, gt=0)
    cancel_deadline_seconds: float | None = Field(default=None, gt=0)


class SubmissionBody(BaseModel):
    """The body of POST /v1/operations. The tenant is the token's, never a field here."""

    model_config = ConfigDict(extra="forbid", strict=True)

    provider: str = Field(min_length=1, max_length=200)
    command: dict[str, Any]
    source_event_id: str | None = Field(default=None, min_length=1, max_length=255)
    bounds: Bounds | None = None
    # Checked by intake's own rule (models/concurrency.py), whose error names the field.
    concurrency_key: str | None = None
    # An ISO 8601 time with its offset, or seconds from now; checked by intake's own rule
    # (models/polling/business_deadline.py). Not part of the fingerprint.
    business_deadline: str | float | None = Field(
        default=None,
        description="when the business stops wanting the work: an ISO 8601 time with its "
        "UTC offset, or seconds from now; automation stops with deadline_exceeded then",
    )
    # Checked by intake's own rule (models/provider/fair_shares.py), whose error names it.
    priority: int | None = Field(
        default=None,
        description="-10 to 10, default 0: among this tenant's requests waiting for the "
        "provider's rate limit, a higher priority goes first. Not part of the fingerprint.",
    )


class Links(BaseModel):
    self: str
    events: str


class SubmitWarning(BaseModel):
    code: str = Field(description="no_worker: no worker consumed the queue lately")
    queue: str
    last_seen: str | None = Field(description="the newest heartbeat on the queue, if kept")
    detail: str


class SubmissionAnswer(BaseModel):
    outcome: str
    operation_id: str
    state: str
    fingerprint: str
    trace_id: str
    links: Links
    warnings: list[SubmitWarning] = Field(
        default_factory=list,
        description="advice about now: no_worker when nothing consumes the operation's queue "
        "(also named by the Jobwarden-Warning header)",
    )


KEY_FIELD = "idempotency_key"
KEY_HEADER = "Idempotency-Key"


def idempotency_key(request: Request) -> str:
    """The key of the one Idempotency-Key field (draft section 2.1: an sf-string).

    A quoted value is read as an RFC 8941 sf-string; a bare one is taken as it is,
    as Stripe-style clients send it, so ``"k1"`` and ``k1`` name the same key.
    """
    values = request.headers.getlist("idempotency-key")
    if not values or not values[0].strip():
        raise ProblemError(
            400,
            "missing_idempotency_key",
            'POST /v1/operations needs an Idempotency-Key header, e.g. Idempotency-Key: "<uuid>"',
        )
    if len(values) > 1:
        # Draft section 2.1: clients MUST NOT send more than one.
        raise ProblemError(400, "bad_request", "send exactly one Idempotency-Key header")
    raw = values[0].strip(" \t")
    if not raw.startswith('"'):
        return raw
    key = _sf_string(raw)
    if key == "":
        raise ProblemError(400, "missing_idempotency_key", "the Idempotency-Key is empty")
    if key is None:
        raise ProblemError(400, "bad_request", "Idempotency-Key is not a valid RFC 8941 string")
    return key


def _sf_string(raw: str) -> str | None:
    """RFC 8941 section 4.2.5: DQUOTE *(unescaped / "\\" ( DQUOTE / "\\" )) DQUOTE."""
    out: list[str] = []
    i = 1
    while i < len(raw):
        ch = raw[i]
        if ch == "\\":
            if i + 1 >= len(raw) or raw[i + 1] not in '"\\':
                return None
            out.append(raw[i + 1])
            i += 2
            continue
        if ch == '"':
            return "".join(out) if i == len(raw) - 1 else None
        if not " " <= ch <= "~":
            return None
        out.append(ch)
        i += 1
    return None


def _read_json(raw: bytes, max_depth: int) -> object:
    """The body as JSON, its nesting checked by a linear scan before the parser recurses."""
    if not raw:
        raise ProblemError(400, "malformed_json", "the body is empty; send a JSON object")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ProblemError(400, "malformed_json", "the body is not UTF-8") from None
    if json_depth(text) > max_depth:
        raise ProblemError(
            422,
            "json_too_deep",
            f"the body nests deeper than {max_depth} levels",
            limit=max_depth,
        )
    body, problem = parse_json(raw)
    if problem == "undecodable":
        # Valid UTF-8 (checked above), so valid JSON holding text Postgres cannot store (a
        # NUL or a lone surrogate, both legal JSON escapes): name the field, like any other.
        pointer = _unstorable_pointer(json.loads(text))
        if pointer is not None:
            message = "must not contain NUL characters or unpaired surrogates"
            raise ProblemError(
                422,
                "invalid_request",
                f"{pointer}: {message}",
                errors=[{"path": pointer, "message": message}],
            )
    if problem is not None:
        raise ProblemError(400, "malformed_json", f"the body is not valid JSON ({problem})")
    return body


def _unstorable_pointer(value: object, at: str = "") -> str | None:
    """The RFC 6901 pointer of the first key or string Postgres cannot store, if any."""
    if isinstance(value, str):
        try:
            storable(value)
        except ValueError:
            return at or "/"
        return None
    items: list[tuple[str, object]] = []
    if isinstance(value, dict):
        items = [(str(k), v) for k, v in value.items()]
    elif isinstance(value, list):
        items = [(str(i), v) for i, v in enumerate(value)]
    for key, item in items:
        # A lone surrogate is shown as its JSON escape, so the pointer itself can be sent.
        shown = key.encode("utf-8", "backslashreplace").decode("utf-8")
        escaped = shown.replace("~", "~0").replace("/", "~1")
        if _unstorable_pointer(key) is not None:
            return f"{at}/{escaped}"
        found = _unstorable_pointer(item, f"{at}/{escaped}")
        if found is not None:
            return found
    return None


def _submission(parsed: object) -> SubmissionBody:
    if isinstance(parsed, dict) and "tenant" in parsed:
        raise ProblemError(
            422,
            "invalid_request",
            "tenant: the tenant comes from the API token, never from the body",
            errors=[{"path": "/tenant", "message": "not allowed: the token names the tenant"}],
        )
    try:
        return SubmissionBody.model_validate(parsed)
    except ValidationError as exc:
        errors = [
            {
                "path": "/" + "/".join(str(p) for p in e["loc"]),
                "message": e["msg"],
            }
            for e in exc.errors(include_url=False, include_input=False)
        ]
        raise ProblemError(
            422,
            "invalid_request",
            f"{errors[0]['path']}: {errors[0]['message']}",
            errors=errors,
        ) from None


def submission_request(
    principal: Principal, key: str, body: SubmissionBody, trace_parent: str | None
) -> SubmissionRequest:
    """What a token's caller asked for, as the HTTP and MCP doors both say it."""
    bounds = body.bounds or Bounds()
    return SubmissionRequest(
        tenant=principal.tenant,
        requested_by=principal.name,
        provider=body.provider,
        command=body.command,
        idempotency_key=key,
        source_event_id=body.source_event_id,
        max_status_requests=bounds.max_status_requests,
        result_deadline_seconds=bounds.result_deadline_seconds,
        max_transport_failures=bounds.max_transport_failures,
        cancel_deadline_seconds=bounds.cancel_deadline_seconds,
        concurrency_key=body.concurrency_key,
        business_deadline=body.business_deadline,
        priority=body.priority,
        trace_parent=trace_parent,
    )


def caller_of(principal: Principal, http_statuses: Mapping[str, int] | None = None) -> Caller:
    """The intake log's who for a token's caller (the HTTP door adds its status codes)."""
    return Caller(actor=principal.actor, token_id=principal.token_id, http_statuses=http_statuses)


def links(operation_id: str) -> dict[str, str]:
    return {
        "self": f"/v1/operations/{operation_id}",
        "events": f"/v1/operations/{operation_id}/events",
    }


def submission_answer(result: SubmitResult, *, outcome: str, state: str) -> dict[str, Any]:
    assert result.operation_id is not None and result.trace_id is not None
    return {
        "outcome": outcome,
        "operation_id": result.operation_id,
        "state": state,
        "fingerprint": result.fingerprint,
        "trace_id": result.trace_id,
        "links": links(result.operation_id),
        "warnings": [w.as_dict() for w in result.warnings],
    }


def trace_headers(trace_id: str | None) -> dict[str, str]:
    if trace_id is None:
        return {}
    # Tracing on: the request's own span, when it is in the operation's trace.
    current = telemetry.current_header(trace_id)
    return {"traceparent": current or traceparent(trace_id, secrets.token_hex(8))}


def _respond(result: SubmitResult) -> JSONResponse:
    """The answer for ``result``; a replay names its creating answer's state again."""
    outcome = result.outcome
    if outcome is SubmitOutcome.conflict:
        raise ProblemError(
            422,
            "idempotency_key_reused",
            "this Idempotency-Key was used for a request with a different fingerprint; "
            "the stored operation is unchanged",
            operation_id=result.operation_id,
            fingerprint=result.fingerprint,
        )
    if outcome is SubmitOutcome.in_progress:
        # RFC 9110 section 10.2.3: Retry-After (delay-seconds) says how long to wait
        # before the follow-up request; the body member says the same for readers.
        raise ProblemError(
            409,
            "idempotency_key_in_progress",
            "a request with this Idempotency-Key is still being recorded; retry it unchanged",
            headers={"Retry-After": str(IN_PROGRESS_RETRY_SECONDS)},
            retry_after_seconds=IN_PROGRESS_RETRY_SECONDS,
        )
    status = HTTP_STATUSES[outcome.value]
    headers = trace_headers(result.trace_id)
    if outcome is SubmitOutcome.created:
        body = submission_answer(result, outcome=outcome.value, state=str(result.state))
    elif outcome is SubmitOutcome.replayed:
        created = SubmitOutcome.created.value
        body = submission_answer(result, outcome=created, state=str(result.created_state))
        headers[REPLAY_HEADER] = "true"
    else:  # duplicate_event: another key already holds this source event's operation
        body = submission_answer(result, outcome=outcome.value, state=str(result.state))
    if status == 201:
        headers["Location"] = body["links"]["self"]
    if result.warnings:
        headers[WARNING_HEADER] = ", ".join(w.code for w in result.warnings)
    return JSONResponse(body, status_code=status, headers=headers)


@router.post(
    "/v1/operations",
    operation_id="submit_operation",
    status_code=201,
    response_model=SubmissionAnswer,
    summary="Submit an operation (Idempotency-Key required)",
    responses={
        201: {
            "headers": {
                WARNING_HEADER: {
                    "description": "no_worker: no worker consumed the operation's queue lately",
                    "schema": {"type": "string"},
                }
            }
        },
        200: {"model": SubmissionAnswer, "description": "duplicate_event: the existing one"},
        **problem_answers(
            {
                400: "missing Idempotency-Key, a malformed header or body",
                401: "missing, unknown or revoked token",
                403: "the token lacks the submit scope",
                409: "the key's first request is still being recorded",
                413: "the body is larger than JOBWARDEN_API_MAX_BODY_BYTES",
                415: "the body is not application/json",
                422: "invalid body, key reused with another fingerprint, or nested too deep",
            }
        ),
    },
    openapi_extra={
        "parameters": [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": True,
                "schema": {"type": "string", "minLength": 1, "maxLength": 257},
                "description": "draft-ietf-httpapi-idempotency-key-header: an sf-string",
            },
            {
                "name": "traceparent",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": "W3C Trace Context; its trace id becomes the operation's",
            },
        ],
        # Parsed by the route itself (bounded JSON), so named here for the document.
        "requestBody": named_body(SubmissionBody),
        # The route checks its token itself (_submitted: one worker-thread trip for the
        # token and the submission), not through a require_* dependency: the scope it
        # needs is named here, for the document's readers and tests/integration/test_api_routes.py.
        "x-required-scope": Scope.submit.value,
        # The bearer scheme is read by the route itself (below), not through a dependency;
        # named here so the document says what a Depends(bearer) would have said.
        "security": [{bearer.scheme_name: []}],
    },
)
async def submit(request: Request) -> JSONResponse:
    """Record an operation for the token's tenant; the same answer for the same request."""
    # HTTPBearer called as it is, not as Depends(bearer): FastAPI's dependency solving
    # for it cost more CPU than the header parse itself (~3 % of a submission).
    credentials = await bearer(request)
    # One trip to a worker thread for the token and the submission together (a thread hop
    # of its own for each cost about a tenth of the request's CPU). The headers and body
    # are read on the event loop first, but a refusal of them is raised only once the
    # token is accepted: 401 and 403 still come before any other answer.
    settings = settings_of(request)
    read: tuple[str, SubmissionBody] | ProblemError
    try:
        key = idempotency_key(request)
        content_type = request.headers.get("content-type", "application/json")
        media = content_type.split(";")[0].strip().lower()
        if media != "application/json" and not media.endswith("+json"):
            raise ProblemError(415, "unsupported_media_type", f"send application/json, not {media}")
        # BodyLimit stops the read at api_max_body_bytes, before any parsing.
        raw = await request.body()
        read = key, _submission(_read_json(raw, settings.api_max_json_depth))
    except ProblemError as refused:
        read = refused
    runtime = runtime_of(request)
    return await run_in_threadpool(_submitted, request, credentials, read, runtime)


def _submitted(
    request: Request,
    credentials: HTTPAuthorizationCredentials | None,
    read: tuple[str, SubmissionBody] | ProblemError,
    runtime: Runtime,
) -> JSONResponse:
    epoch, seen = read_for_submit(request)
    principal = authorize(request, credentials, Scope.submit, epoch)
    if isinstance(read, ProblemError):
        raise read
    key, body = read
    caller = caller_of(principal, http_statuses=HTTP_STATUSES)
    wanted = submission_request(principal, key, body, request.headers.get("traceparent"))
    try:
        result = submit_request(
            wanted, door="http", caller=caller, runtime=runtime, attendance=seen
        )
    except RefusedInputError as exc:
        extensions: dict[str, Any] = {}
        detail = str(exc)
        if isinstance(exc, InvalidCommandError):
            # RFC 6901: a key holding "/" or "~" is escaped, so the pointer resolves.
            extensions["errors"] = [{"path": exc.pointer, "message": detail}]
        elif detail.startswith(f"{KEY_FIELD} "):
            # This door's key is a header: the refusal names it as the caller sent it.
            detail = KEY_HEADER + detail.removeprefix(KEY_FIELD)
            extensions["errors"] = [{"path": f"header/{KEY_HEADER}", "message": detail}]
        raise ProblemError(422, "invalid_submission", detail, **extensions) from None
    return _respond(result)


def entry_json(entry: IntakeEntry) -> dict[str, Any]:
    """One intake-log entry as the API and the CLI show it."""
    return {
        "at": entry.at.isoformat(),
        "door": entry.door,
        "actor": entry.actor,
        "token_id": str(entry.token_id) if entry.token_id else None,
        "idempotency_key": entry.idempotency_key,
        "fingerprint": entry.fingerprint,
        "outcome": entry.outcome,
        "state": entry.state,
        "http_status": entry.http_status,
        "trace_id": entry.trace_id,
    }


def intake_attempts(database_url: str, operation_id: uuid.UUID) -> list[dict[str, Any]]:
    """Every submission attempt that named this operation, oldest first (for its story)."""
    with snapshot(database_url) as session:
        return [entry_json(e) for e in api_store.intake_for_operation(session, operation_id)]
