"""POST /v1/webhooks/{provider}: the webhook receiver (issue 10, item 10).

No API token: the signature the contract names is the authentication. The raw
body is read with a cap before anything parses it (the signature covers those
exact bytes); verification, deduplication and the wake-up live in
``tasks.provider.webhooks``, run off the event loop because they wait on Postgres and on
the operation's lease.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from jobwarden.api.context import runtime_of
from jobwarden.api.problems import problem_response
from jobwarden.api.responses import named_body, problem_answers
from jobwarden.models.provider.webhooks import Refusal
from jobwarden.tasks.provider import webhooks

router = APIRouter(tags=["webhooks"])

# Standard Webhooks recommends payloads under 20 kB; a webhook is a doorbell, not a result.
MAX_WEBHOOK_BYTES = 256 * 1024
_REFUSAL_KINDS = {
    Refusal.unsigned: "webhook_unsigned",
    Refusal.forged: "webhook_forged",
    Refusal.stale: "webhook_stale",
    Refusal.malformed: "webhook_malformed",
}
# RFC 9110 section 15.5.2: a 401 carries a challenge. The signature scheme is the
# contract's, not HTTP authentication, so the challenge names it rather than Bearer.
_CHALLENGE = {"WWW-Authenticate": 'Webhook-Signature realm="jobwarden"'}


class WebhookAck(BaseModel):
    outcome: str  # woke_poll, poll_already_due, not_polled, ..., unknown_job, duplicate
    event_id: str


async def _bounded_body(request: Request, limit: int) -> bytes | None:
    """The raw body, or None as soon as it passes ``limit`` (never held whole beyond it)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


@router.post(
    "/v1/webhooks/{provider}",
    response_model=WebhookAck,
    summary="Receive a provider's webhook (signed as its contract says; no API token)",
    operation_id="receive_webhook",
    responses={
        202: {"model": WebhookAck, "description": "verified, but no operation has this job"},
        **problem_answers(
            {
                400: "stale (outside the tolerance) or unreadable",
                401: "unsigned or forged",
                404: "no such provider, or its contract has no [webhook]",
                413: "body larger than the webhook limit",
                422: "the provider name does not match the path's schema",
                503: "the operation is busy or the secret is missing: deliver again",
            }
        ),
    },
    # The body is read as bytes (the signature covers them exactly): any JSON object.
    openapi_extra={
        "requestBody": named_body(
            "WebhookEvent",
            {
                "type": "object",
                "additionalProperties": True,
                "description": "the provider's event, as its contract's [webhook] describes",
            },
        )
    },
)
async def receive_webhook(provider: str, request: Request) -> JSONResponse:
    """Verify, deduplicate by event id, record on the operation and wake its poll.

    200 for a known job (and for a duplicate: nothing is recorded twice), 202 for a
    job no operation has. A webhook never changes an operation's state by itself.
    """
    instance = request.url.path
    rt = await run_in_threadpool(runtime_of, request)
    try:
        # Before the body: counters exist only for configured providers, never for any path.
        webhooks.webhook_spec(rt, provider)
    except webhooks.WebhookNotConfiguredError as exc:
        return problem_response(404, "not_found", str(exc), instance=instance)
    body = await _bounded_body(request, MAX_WEBHOOK_BYTES)
    if body is None:
        prefix = rt.settings.key_prefix
        await run_in_threadpool(webhooks.count_refusal, rt.redis, prefix, provider, "too_large")
        return problem_response(
            413,
            "body_too_large",
            f"a webhook body is at most {MAX_WEBHOOK_BYTES} bytes",
            instance=instance,
            extensions={"limit": MAX_WEBHOOK_BYTES},
        )
    headers = dict(request.headers.items())
    try:
        receipt = await run_in_threadpool(webhooks.receive, rt, provider, headers, body)
    except webhooks.WebhookNotConfiguredError as exc:
        return problem_response(404, "not_found", str(exc), instance=instance)
    except webhooks.WebhookSecretUnavailableError as exc:
        webhooks.log.error("webhook_secret_unavailable", detail=str(exc))
        return problem_response(
            503,
            "webhook_unavailable",
            "the receiver cannot verify deliveries for this provider yet; deliver again later",
            instance=instance,
            headers={"Retry-After": "60"},
        )
    except webhooks.WebhookBusyError as exc:
        return problem_response(
            503, "webhook_busy", str(exc), instance=instance, headers={"Retry-After": "1"}
        )
    if receipt.refusal is not None:
        kind = _REFUSAL_KINDS[receipt.refusal]
        headers_out = _CHALLENGE if receipt.status == 401 else None
        return problem_response(
            receipt.status, kind, receipt.detail, instance=instance, headers=headers_out
        )
    assert receipt.event_id is not None
    ack = WebhookAck(outcome=receipt.outcome, event_id=receipt.event_id)
    return JSONResponse(ack.model_dump(), status_code=receipt.status)
