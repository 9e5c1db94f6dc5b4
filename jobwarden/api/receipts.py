"""Receipts over HTTP: an operation's signed receipt, and the key that verifies it.

``GET /v1/operations/{id}/receipt`` is authorised as every read of an operation is (a
read token of its tenant; another tenant's operation is the same 404 as a missing
one). ``GET /.well-known/jobwarden-receipt-key`` serves the public key, unauthenticated:
whoever holds a receipt (a customer, a provider's support, an auditor) needs the key to
check it and has no token. A well-known URI (RFC 8615) because it is metadata about the
whole origin that a verifier finds without knowing our routes; the name says whose key.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel

from jobwarden.api.auth import Principal, Scope, require
from jobwarden.api.context import runtime_of, settings_of
from jobwarden.api.problems import ProblemError
from jobwarden.api.queries import owned_operation
from jobwarden.api.responses import problem_answers, problem_responses
from jobwarden.api.views import NOT_FOUND, NOT_FOUND_DETAIL, OperationId
from jobwarden.models.errors import SettingsError
from jobwarden.tasks.receipts import (
    ReceiptUnavailableError,
    public_key_pem,
    receipt_of,
    signing_key,
)

router = APIRouter(tags=["receipts"])


class ReceiptHead(BaseModel):
    seq: int
    hash: str | None


class ReceiptSignature(BaseModel):
    algorithm: str
    key_id: str
    value: str


class Receipt(BaseModel):
    """A signed receipt: facts, the bound row, the whole event chain (docs/how-to/receipts.md).

    Documents the answer only: the document is sent as built, never re-serialised through
    this model, so every number and string is what was signed.
    """

    format: str
    operation_id: str
    issued_at: str
    facts: dict[str, Any]
    row: dict[str, Any]
    head: ReceiptHead
    events: list[dict[str, Any]]
    signature: ReceiptSignature


KEY_PATH = "/.well-known/jobwarden-receipt-key"
PEM_MEDIA_TYPE = "application/x-pem-file"
UNAVAILABLE = "Receipts cannot be issued here now"
NO_KEY = "This API publishes no receipt key (none is configured)"


@router.get(
    "/v1/operations/{operation_id}/receipt",
    operation_id="get_operation_receipt",
    response_model=None,
    responses={
        200: {"model": Receipt, "description": "The signed receipt"},
        **problem_responses({404: NOT_FOUND, 503: UNAVAILABLE}),
    },
)
def get_operation_receipt(
    operation_id: OperationId,
    request: Request,
    principal: Annotated[Principal, Depends(require(Scope.read))],
) -> JSONResponse:
    """The operation's signed receipt: its facts and whole event chain (docs/how-to/receipts.md).

    Verify it offline with `jobwarden receipt verify FILE --public-key K`.
    """
    row = owned_operation(request, principal, operation_id)
    try:
        document = receipt_of(
            settings_of(request), runtime_of(request), row.operation_id, now=datetime.now(UTC)
        )
    except (SettingsError, ReceiptUnavailableError) as exc:
        raise ProblemError(503, "receipt_unavailable", str(exc)) from None
    if document is None:
        raise ProblemError(404, "not_found", NOT_FOUND_DETAIL)
    return JSONResponse(document)


@router.get(
    KEY_PATH,
    operation_id="get_receipt_public_key",
    response_class=PlainTextResponse,
    responses={
        200: {"content": {PEM_MEDIA_TYPE: {}}, "description": "The Ed25519 public key (PEM)"},
        # Public: no token, so none of a guarded route's 401/403, and no parameters (422).
        **problem_answers({404: NO_KEY, 503: UNAVAILABLE}),
    },
)
def get_receipt_public_key(request: Request) -> PlainTextResponse:
    """The Ed25519 public key (PEM, SubjectPublicKeyInfo) that verifies this API's receipts."""
    if settings_of(request).receipt_signing_key is None:
        # Nothing is published, which is not an outage: a stranger's GET is a 404, never 5xx.
        raise ProblemError(404, "not_found", NO_KEY)
    try:
        key = signing_key(settings_of(request))
    except SettingsError as exc:
        raise ProblemError(503, "receipt_unavailable", str(exc)) from None
    return PlainTextResponse(public_key_pem(key.public_key()), media_type=PEM_MEDIA_TYPE)
