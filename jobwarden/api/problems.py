"""RFC 9457 Problem Details: every error the HTTP API answers is application/problem+json.

Each error class has a stable ``type``: ``tag:jobwarden.dev,2026:problem/<kind>``.
RFC 9457 section 3.1.1 allows a non-dereferenceable type URI and names tag URIs
(RFC 4151) for it; docs/api.md lists every kind. Handlers here turn FastAPI's and
Starlette's own errors (404, 405, 422 validation, bodies too large) and any
unexpected exception into the same shape, never with a stack trace.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import Match

from jobwarden.observability.logs import get_logger

PROBLEM_MEDIA_TYPE = "application/problem+json"
TYPE_PREFIX = "tag:jobwarden.dev,2026:problem/"

log = get_logger("jobwarden.api")

# kind -> title. A title never changes between occurrences (RFC 9457 section 3.1.3);
# what differs per occurrence goes in detail and the extensions.
TITLES: dict[str, str] = {
    "bad_request": "The request is malformed",
    "malformed_json": "The body is not valid JSON",
    "json_too_deep": "The body nests deeper than allowed",
    "body_too_large": "The body is larger than allowed",
    "unsupported_media_type": "The body must be application/json",
    "invalid_request": "The request does not match the API's schema",
    "invalid_submission": "The submission breaks a rule",
    "missing_idempotency_key": "The Idempotency-Key header is required",
    "idempotency_key_reused": "The Idempotency-Key was used for a different request",
    "idempotency_key_in_progress": "A request with this Idempotency-Key is still being processed",
    "unauthenticated": "A valid API token is required",
    "insufficient_scope": "The API token lacks the scope this route needs",
    "webhook_unsigned": "The webhook carries no signature",
    "webhook_forged": "The webhook signature does not verify",
    "webhook_stale": "The webhook was signed outside the allowed tolerance",
    "webhook_malformed": "The webhook cannot be read",
    "webhook_busy": "The operation is busy; deliver the webhook again later",
    "webhook_unavailable": "Webhooks for this provider cannot be verified yet",
    "not_found": "Not found",
    "method_not_allowed": "Method not allowed",
    "conflict": "The request conflicts with the resource's state",
    "self_approval_refused": "The operation's submitter may not approve it",
    "same_approver": "This approver already approved; another approver must approve",
    "fingerprint_mismatch": "The approval names another fingerprint than the operation's",
    "request_digest_mismatch": "The approval names another request than the one that would leave",
    "approval_window_closed": "The operation's approval window has closed",
    "business_deadline_passed": "The operation's business deadline has passed",
    "option_not_offered": "The option is not offered for this operation now",
    "follow_up_not_allowed": "The operation does not allow this follow-up (now)",
    "amount_limit_exceeded": "The follow-up's amount exceeds what remains of its limit",
    "no_result": "The operation has no result to download",
    "result_missing": "The result's stored bytes are gone from the result store",
    "range_not_satisfiable": "No byte of the requested range is in the result",
    "result_integrity_failed": "The stored result's bytes do not match its recorded digest",
    "result_store_unavailable": "The result store does not answer",
    "not_ready": "A backing service does not answer",
    "receipt_unavailable": "Receipts cannot be issued here now",
    "internal_error": "Internal error",
}

# Starlette's status-only HTTPExceptions (404 route, 405, 413 ...) mapped to our kinds.
_STATUS_KINDS = {
    400: "bad_request",
    401: "unauthenticated",
    403: "insufficient_scope",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    422: "invalid_request",
    503: "not_ready",
}


class Problem(BaseModel):
    """An RFC 9457 problem object: every error answer of the API has this shape.

    ``type`` names the kind (``tag:jobwarden.dev,2026:problem/<kind>``) and is what a
    client branches on; ``title`` is the same for every occurrence of a kind; ``detail``
    says what went wrong this time. Extension members carry the particulars: ``errors``
    (each failing path and message), ``offered``, ``required_scope``, ``down`` ...
    """

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None


def problem_type(kind: str) -> str:
    return f"{TYPE_PREFIX}{kind}"


class ProblemError(Exception):
    """A refusal the API answers as a problem: status, a kind from TITLES, a detail.

    Extensions become extra members of the problem object (e.g. ``errors`` with the
    failing paths); ``headers`` are sent with it (e.g. Retry-After). An unknown kind is
    a programming error and fails at raise time.
    """

    def __init__(
        self,
        status: int,
        kind: str,
        detail: str,
        *,
        headers: Mapping[str, str] | None = None,
        **extensions: Any,
    ) -> None:
        if kind not in TITLES:
            raise ValueError(f"unknown problem kind {kind!r}; add it to TITLES and docs/api.md")
        super().__init__(status, kind, detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.headers = dict(headers or {})
        self.extensions = extensions


def problem_body(
    status: int,
    kind: str,
    detail: str,
    *,
    instance: str | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = dict(extensions or {})
    body.update(
        type=problem_type(kind),
        title=TITLES.get(kind, HTTPStatus(status).phrase),
        status=status,
        detail=detail,
    )
    if instance is not None:
        body["instance"] = instance
    shown: dict[str, Any] = _encodable(body)
    return shown


def _encodable(value: Any) -> Any:
    """``value`` with every string made UTF-8 encodable (a lone surrogate as ``\\udcff``).

    A problem may quote the caller's input (a key, a path); input Postgres cannot store
    (a lone surrogate) cannot be sent in a UTF-8 body either, and failing to encode the
    refusal would turn a stranger's 422 into a 500 (issue 33, finding 5).
    """
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, Mapping):
        return {_encodable(k): _encodable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_encodable(v) for v in value]
    return value


def problem_response(  # noqa: PLR0913 - the RFC 9457 members, each by keyword
    status: int,
    kind: str,
    detail: str,
    *,
    instance: str | None = None,
    headers: Mapping[str, str] | None = None,
    extensions: Mapping[str, Any] | None = None,
) -> JSONResponse:
    all_headers = dict(headers or {})
    if status == 401:
        # RFC 9110 section 15.5.2: a 401 carries a challenge; RFC 6750 names Bearer.
        all_headers.setdefault("WWW-Authenticate", "Bearer")
    return JSONResponse(
        problem_body(status, kind, detail, instance=instance, extensions=extensions),
        status_code=status,
        headers=all_headers,
        media_type=PROBLEM_MEDIA_TYPE,
    )


def _validation_errors(errors: Sequence[Any]) -> list[dict[str, str]]:
    """FastAPI's error list as paths and messages, without echoing the input back."""
    out = []
    for err in errors:
        loc = err.get("loc", ()) if isinstance(err, Mapping) else ()
        path = "/".join(str(p) for p in loc if p != "body")
        out.append({"path": path or "/", "message": str(err.get("msg", "invalid"))})
    return out


async def _on_problem(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, ProblemError)
    return problem_response(
        exc.status,
        exc.kind,
        exc.detail,
        instance=request.url.path,
        headers=exc.headers,
        extensions=exc.extensions,
    )


async def _on_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    kind = _STATUS_KINDS.get(exc.status_code, "bad_request" if exc.status_code < 500 else "")
    if not kind:
        kind = "internal_error"
    detail = exc.detail if isinstance(exc.detail, str) else HTTPStatus(exc.status_code).phrase
    headers = dict(getattr(exc, "headers", None) or {})
    if exc.status_code == 405:
        # Starlette's 405 names only the first route whose path matched; a path served by
        # several routes (GET and POST /v1/operations) allows all their methods (RFC 9110
        # section 15.5.6: Allow lists the target resource's methods).
        headers["Allow"] = ", ".join(allowed_methods(request))
    return problem_response(
        exc.status_code,
        kind,
        detail,
        instance=request.url.path,
        headers=headers,
    )


_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the app serves at the request's path, sorted.

    Asked of the routes themselves, one method at a time (Route.matches is Starlette's
    public interface, and FastAPI's included routers answer it too).
    """
    return [
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL
            for route in request.app.router.routes
        )
    ]


async def _on_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = _validation_errors(exc.errors())
    first = errors[0] if errors else {"path": "/", "message": "invalid"}
    return problem_response(
        422,
        "invalid_request",
        f"{first['path']}: {first['message']}",
        instance=request.url.path,
        extensions={"errors": errors},
    )


async def _on_disconnect(request: Request, exc: Exception) -> JSONResponse:
    # A client that hangs up mid-body is the network's ordinary weather, not our fault: one
    # info line, no traceback. The answer goes nowhere (nobody is left to read it).
    log.info("api_client_disconnected", path=request.url.path, method=request.method)
    return problem_response(
        400,
        "bad_request",
        "the client closed the connection before sending the whole body",
        instance=request.url.path,
    )


async def _on_unexpected(request: Request, exc: Exception) -> JSONResponse:
    # The stack trace goes to the log, never to the caller (it may name internals).
    log.error("api_unexpected_error", path=request.url.path, exc_info=exc)
    return problem_response(
        500, "internal_error", "an unexpected error occurred", instance=request.url.path
    )


def install_handlers(app: FastAPI) -> None:
    """Make every error of ``app`` answer application/problem+json (documented by
    jobwarden.api.responses.with_shared_schemas)."""
    app.add_exception_handler(ProblemError, _on_problem)
    app.add_exception_handler(StarletteHTTPException, _on_http)
    app.add_exception_handler(RequestValidationError, _on_validation)
    app.add_exception_handler(ClientDisconnect, _on_disconnect)
    app.add_exception_handler(Exception, _on_unexpected)
