"""Webhook deliveries: verification as the contract says, and what one does to an operation.

Both are pure: the shell passes the headers, the raw body, the secret it read by
reference and the time. A verified delivery is only an observation; the wake-up
decision (``after_webhook``) can move the next status read earlier, never before
the provider's Retry-After or poll hint (``poll_not_before``), and never changes
the state: the status read that follows decides what the remote job did
(DESIGN: a webhook never by itself marks an operation succeeded).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Final

from standardwebhooks.webhooks import Webhook

from jobwarden.models.actions import DelaySource
from jobwarden.models.contracts.contract import ChecksumEncoding, WebhookScheme, WebhookSpec
from jobwarden.models.operation import Operation
from jobwarden.models.provider.pointers import MISSING, resolve_pointer
from jobwarden.models.states import AUTOMATION_STOPPED, TERMINAL, OperationState

__all__ = [
    "POLLED",
    "REFUSAL_STATUS",
    "Delivery",
    "Refusal",
    "Refused",
    "WebhookDecision",
    "WebhookOutcome",
    "WebhookSecretError",
    "after_webhook",
    "delivery_excerpt",
    "hmac_signature",
    "verify_delivery",
]

# Standard Webhooks 1.0, "Webhook headers": exact names, sent lower case by HTTP/2 anyway.
STANDARD_ID: Final = "webhook-id"
STANDARD_TIMESTAMP: Final = "webhook-timestamp"
STANDARD_SIGNATURE: Final = "webhook-signature"
# Unix seconds as an integer, no sign, no leading zero: the exact text that was signed.
_UNIX_SECONDS: Final = re.compile(r"(0|[1-9][0-9]{0,11})\Z")
MAX_EVENT_ID: Final = 255  # webhook_deliveries.event_id
MAX_JOB_ID: Final = 500  # operations.remote_job_id


class Refusal(StrEnum):
    """Why a delivery was refused; each is counted, nothing else is recorded."""

    unsigned = "unsigned"  # no signature header: nothing proves who sent it
    forged = "forged"  # the signature does not verify with our secret
    stale = "stale"  # authentic, but signed outside the tolerance: a replay, or a late retry
    malformed = "malformed"  # headers or body cannot be read (timestamp, JSON, ids)


# 401 for an unauthenticated delivery, 400 for one we can authenticate but not accept.
REFUSAL_STATUS: Final[Mapping[Refusal, int]] = {
    Refusal.unsigned: 401,
    Refusal.forged: 401,
    Refusal.stale: 400,
    Refusal.malformed: 400,
}


class WebhookSecretError(ValueError):
    """The configured secret cannot key the scheme (e.g. not whsec_<base64>); never shows it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Refused:
    reason: Refusal
    detail: str  # names the header or field, never a secret or the signature


@dataclass(frozen=True, slots=True, kw_only=True)
class Delivery:
    """A verified delivery: who it is about, when it was signed, what it carried."""

    event_id: str
    remote_job_id: str
    signed_at: datetime
    payload: Mapping[str, Any]
    payload_sha256: str  # of the raw body as received


def hmac_signature(secret: str, timestamp: str, body: bytes) -> bytes:
    """The hmac scheme's MAC: HMAC-SHA256(secret, timestamp + "." + raw body)."""
    return hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).digest()


def _given_mac(value: str, encoding: ChecksumEncoding) -> bytes | None:
    text = value.strip()
    try:
        if encoding is ChecksumEncoding.hex:
            return bytes.fromhex(text)
        return base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error):
        return None


def _check_hmac(
    spec: WebhookSpec, secret: str, headers: Mapping[str, str], body: bytes
) -> tuple[str, str | None] | Refused:
    """(timestamp text, event id from a header: none for hmac) or the refusal."""
    assert spec.signature_header is not None and spec.timestamp_header is not None
    signature = headers.get(spec.signature_header.lower())
    if not signature:
        return Refused(reason=Refusal.unsigned, detail=f"no {spec.signature_header} header")
    timestamp = headers.get(spec.timestamp_header.lower())
    if not timestamp:
        return Refused(reason=Refusal.malformed, detail=f"no {spec.timestamp_header} header")
    given = _given_mac(signature, spec.signature_encoding)
    expected = hmac_signature(secret, timestamp, body)
    if given is None or not hmac.compare_digest(expected, given):
        return Refused(reason=Refusal.forged, detail=f"{spec.signature_header} does not verify")
    return timestamp, None


def _check_standard(
    secret: str, headers: Mapping[str, str], body: bytes
) -> tuple[str, str | None] | Refused:
    """Standard Webhooks 1.0: HMAC-SHA256 over "id.timestamp.body", any v1 entry matching.

    The library signs (its secret decoding and content format are the spec's); its
    ``verify`` is not used because it reads the clock itself, fixes the tolerance at
    five minutes and raises ValueError on a signature entry without a comma.
    """
    signature = headers.get(STANDARD_SIGNATURE)
    if not signature:
        return Refused(reason=Refusal.unsigned, detail=f"no {STANDARD_SIGNATURE} header")
    msg_id = headers.get(STANDARD_ID)
    timestamp = headers.get(STANDARD_TIMESTAMP)
    if not msg_id or not timestamp:
        missing = STANDARD_ID if not msg_id else STANDARD_TIMESTAMP
        return Refused(reason=Refusal.malformed, detail=f"no {missing} header")
    if not _UNIX_SECONDS.match(timestamp):
        return Refused(reason=Refusal.malformed, detail=f"{STANDARD_TIMESTAMP} is not Unix seconds")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return Refused(reason=Refusal.malformed, detail="the body is not UTF-8")
    try:
        signer = Webhook(secret)
    except Exception as exc:  # EmptyWebhookSecretError, binascii.Error: the library's own
        raise WebhookSecretError(
            "the webhook secret is not a Standard Webhooks secret (whsec_<base64>)"
        ) from exc
    signed = signer.sign(msg_id, datetime.fromtimestamp(int(timestamp), UTC), text)
    expected = base64.b64decode(signed.partition(",")[2])
    # A space-delimited list, so a provider can sign with an old and a new key while rotating.
    for entry in signature.split():
        version, _, value = entry.partition(",")
        if version != "v1":
            continue  # v1a (ed25519) and future versions: not ours to check
        try:
            given = base64.b64decode(value, validate=True)
        except binascii.Error:
            continue
        if hmac.compare_digest(expected, given):
            return timestamp, msg_id
    return Refused(reason=Refusal.forged, detail=f"no {STANDARD_SIGNATURE} entry verifies")


def _text_at(payload: Mapping[str, Any], pointer: str, limit: int) -> str | None:
    value = resolve_pointer(payload, pointer)
    if value is MISSING or isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value)
    if not text or len(text) > limit or not text.isprintable():
        return None
    return text


def verify_delivery(
    spec: WebhookSpec,
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    now: datetime,
) -> Delivery | Refused:
    """Authenticate first, then check the age, then read the ids from the body.

    ``headers`` are keyed in lower case. A forged delivery is refused as forged
    whatever its age; only an authentic one can be stale (a replay). Raises
    WebhookSecretError when the secret itself is unusable (a configuration fault).
    """
    checked = (
        _check_standard(secret, headers, body)
        if spec.scheme is WebhookScheme.standard
        else _check_hmac(spec, secret, headers, body)
    )
    if isinstance(checked, Refused):
        return checked
    timestamp, header_event_id = checked
    if not _UNIX_SECONDS.match(timestamp):
        return Refused(reason=Refusal.malformed, detail="the timestamp is not Unix seconds")
    signed_at = datetime.fromtimestamp(int(timestamp), UTC)
    # Both directions: a timestamp far ahead is as unproven as one far behind.
    if abs((now - signed_at).total_seconds()) > spec.tolerance_seconds:
        return Refused(
            reason=Refusal.stale,
            detail=f"signed {(now - signed_at).total_seconds():.0f} s from now; "
            f"the tolerance is {spec.tolerance_seconds:g} s",
        )
    try:
        payload = json.loads(body)
    except (ValueError, RecursionError):
        return Refused(reason=Refusal.malformed, detail="the body is not JSON")
    if not isinstance(payload, dict):
        return Refused(reason=Refusal.malformed, detail="the body is not a JSON object")
    if header_event_id is not None:
        event_id: str | None = header_event_id if len(header_event_id) <= MAX_EVENT_ID else None
        where = STANDARD_ID
    else:
        assert spec.event_id_pointer is not None
        event_id = _text_at(payload, spec.event_id_pointer, MAX_EVENT_ID)
        where = f"webhook.event_id_pointer {spec.event_id_pointer}"
    if event_id is None:
        return Refused(reason=Refusal.malformed, detail=f"no usable event id at {where}")
    job_id = _text_at(payload, spec.job_id_pointer, MAX_JOB_ID)
    if job_id is None:
        return Refused(
            reason=Refusal.malformed,
            detail=f"no usable job id at webhook.job_id_pointer {spec.job_id_pointer}",
        )
    return Delivery(
        event_id=event_id,
        remote_job_id=job_id,
        signed_at=signed_at,
        payload=payload,
        payload_sha256=hashlib.sha256(body).hexdigest(),
    )


# --- what a verified delivery does to an operation --------------------------------------


class WebhookOutcome(StrEnum):
    """What a verified delivery did; stored as webhook_deliveries.outcome."""

    woke_poll = "woke_poll"  # the next status read moved earlier, to wake_at
    poll_already_due = "poll_already_due"  # the next status read is already as early as allowed
    not_polled = "not_polled"  # the state's own step runs (creating, cancelling, collecting)
    automation_stopped = "automation_stopped"  # a human decides; the delivery is on the record
    finished = "finished"  # terminal: a late or out-of-order delivery, recorded only
    unknown_job = "unknown_job"  # no operation has this remote job id: acknowledged, logged


# States whose step is a status read: only these can be woken by a webhook.
POLLED: Final = frozenset(
    {OperationState.accepted, OperationState.observing, OperationState.cancelling}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class WebhookDecision:
    outcome: WebhookOutcome
    wake_at: datetime | None = None  # set only for woke_poll: the new next_poll_at
    cause: str
    # Why a woken read waits past now: the provider's word, or the webhook interval.
    delay_source: DelaySource | None = None


def after_webhook(
    op: Operation, now: datetime, *, webhook_not_before: datetime | None = None
) -> WebhookDecision:
    """What a verified delivery does to ``op``: record only, or wake the poll at a time.

    Never a state change. The earliest allowed status read is the latest of ``now``, the
    end of the provider's last Retry-After / poll hint (``poll_not_before``) and
    ``webhook_not_before`` (the previous webhook-woken read plus the contract's
    ``min_status_interval_seconds``: deliveries arriving in a burst wake one read per
    interval, not one each, so they cannot spend the status budget); the poll step still
    checks the deadline and the budget before it sends.
    """
    if op.state in TERMINAL:
        return WebhookDecision(
            outcome=WebhookOutcome.finished,
            cause=f"the operation is {op.state.value}: recorded, nothing changes",
        )
    if op.state in AUTOMATION_STOPPED:
        return WebhookDecision(
            outcome=WebhookOutcome.automation_stopped,
            cause=f"automation is stopped ({op.state.value}): recorded for the person deciding",
        )
    if op.state not in POLLED:
        return WebhookDecision(
            outcome=WebhookOutcome.not_polled,
            cause=f"{op.state.value} is not waiting for a status read: recorded only",
        )
    provider = max(now, op.poll_not_before) if op.poll_not_before is not None else now
    earliest = max(provider, webhook_not_before or now)
    if op.next_poll_at is not None and op.next_poll_at <= earliest:
        return WebhookDecision(
            outcome=WebhookOutcome.poll_already_due,
            cause="the next status read is already as early as allowed",
        )
    if earliest == now:
        return WebhookDecision(
            outcome=WebhookOutcome.woke_poll, wake_at=now, cause="webhook: status read now"
        )
    if earliest == provider:
        return WebhookDecision(
            outcome=WebhookOutcome.woke_poll,
            wake_at=earliest,
            cause="webhook: status read at the end of the provider's Retry-After",
            delay_source=DelaySource.provider_retry_after,
        )
    return WebhookDecision(
        outcome=WebhookOutcome.woke_poll,
        wake_at=earliest,
        cause="webhook: status read one webhook interval after the last one a webhook woke",
        delay_source=DelaySource.webhook_interval,
    )


def delivery_excerpt(delivery: Delivery, decision: WebhookDecision) -> dict[str, Any]:
    """The webhook_received event's excerpt: ids, times and a digest, never the payload.

    The payload is the provider's claim; the status read that follows is the evidence,
    so only its digest is kept (and no provider text that might echo a secret).
    """
    return {
        "event_id": delivery.event_id,
        "remote_job_id": delivery.remote_job_id,
        "signed_at": delivery.signed_at.isoformat(),
        "payload_sha256": delivery.payload_sha256,
        "outcome": decision.outcome.value,
        "wake_at": decision.wake_at.isoformat() if decision.wake_at else None,
    }
