"""The shipped contracts read real-shaped provider bodies the way each provider means them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from standardwebhooks.webhooks import Webhook

from jobwarden.models.contracts.contract import ProviderContract, RemoteStatus, WebhookScheme
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.conventions.strategies import Monitor, read_monitor_answer
from jobwarden.models.provider.signals import HttpObservation, read_status
from jobwarden.models.provider.webhooks import Delivery, Refusal, Refused, verify_delivery

SHIPPED = Path(__file__).resolve().parents[2] / "config" / "providers"
NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
DEADLINE = NOW + timedelta(hours=2)


def contract(name: str) -> ProviderContract:
    return load_contract(SHIPPED / f"{name}.toml")


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"status": "NotStarted"}, RemoteStatus.pending),
        ({"status": "Running", "percentComplete": 40}, RemoteStatus.pending),
        ({"status": "Succeeded", "result": {"rows": 3}}, RemoteStatus.succeeded),
        ({"status": "Failed", "error": {"code": "BadThing"}}, RemoteStatus.failed),
        ({"status": "Canceled"}, RemoteStatus.cancelled),
        # azure-core reads every status but the three terminal ones as still running.
        ({"status": "InProgress"}, RemoteStatus.pending),
        ({"status": "Deleting"}, RemoteStatus.pending),
        ({"status": "succeeded"}, RemoteStatus.succeeded),  # compared without case
    ],
)
def test_azure_operation_status_monitor(body: dict[str, object], status: RemoteStatus) -> None:
    azure = contract("azure_lro")
    url = "https://example.cognitiveservices.azure.com/users/madge/operations/1"
    answer = read_monitor_answer(azure, Monitor.status_monitor, url, _observed(200, body))
    reading = read_status(
        azure,
        body,
        now=NOW,
        deadline=DEADLINE,
        state=answer.state,
        state_pointer=answer.state_pointer,
    )
    assert reading.remote_status is status


def _observed(code: int, body: object) -> HttpObservation:
    return HttpObservation(
        status_code=code, headers={}, body=body, body_problem=None, transport_failure=None
    )


def test_azure_progress_is_read_from_percent_complete() -> None:
    reading = read_status(
        contract("azure_lro"),
        {"status": "Running", "percentComplete": 40},
        now=NOW,
        deadline=DEADLINE,
        state_pointer="/status",
    )
    assert reading.progress == 40


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({"name": "operations/1"}, RemoteStatus.pending),  # proto3 JSON omits done=false
        ({"name": "operations/1", "done": False}, RemoteStatus.pending),
        ({"name": "operations/1", "done": True, "response": {"rows": 3}}, RemoteStatus.succeeded),
        ({"name": "operations/1", "done": True, "error": {"code": 3}}, RemoteStatus.failed),
    ],
)
def test_google_aip_151_operations(body: dict[str, object], status: RemoteStatus) -> None:
    reading = read_status(contract("google_aip151"), body, now=NOW, deadline=DEADLINE)
    assert reading.remote_status is status
    assert reading.contradiction is None


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        ("validating", RemoteStatus.pending),
        ("in_progress", RemoteStatus.pending),
        ("finalizing", RemoteStatus.pending),
        ("cancelling", RemoteStatus.pending),
        ("completed", RemoteStatus.succeeded),
        ("failed", RemoteStatus.failed),
        ("expired", RemoteStatus.expired),
        ("cancelled", RemoteStatus.cancelled),
    ],
)
def test_openai_batch_states(raw: str, status: RemoteStatus) -> None:
    body = {
        "id": "batch_1",
        "status": raw,
        "output_file_id": "file-1",
        "expires_at": int((NOW + timedelta(hours=24)).timestamp()),
    }
    assert (
        read_status(contract("openai_batch"), body, now=NOW, deadline=DEADLINE).remote_status
        is status
    )


def test_an_openai_batch_still_running_after_expires_at_is_a_contradiction() -> None:
    body = {
        "id": "batch_1",
        "status": "in_progress",
        "expires_at": int((NOW - timedelta(minutes=1)).timestamp()),
    }
    reading = read_status(contract("openai_batch"), body, now=NOW, deadline=DEADLINE)
    assert reading.contradiction == "running_after_expiry"


def test_an_openai_batch_completed_without_an_output_file_is_a_contradiction() -> None:
    body = {"id": "batch_1", "status": "completed", "output_file_id": None}
    reading = read_status(contract("openai_batch"), body, now=NOW, deadline=DEADLINE)
    assert reading.contradiction == "succeeded_without_result_reference"


# --- OpenAI webhooks (Standard Webhooks) ------------------------------------------------------

OPENAI_SECRET = "whsec_" + base64.b64encode(b"openai-webhook-signing-key-32by").decode()


def _library_signature(msg_id: str, timestamp: int, body: bytes) -> str:
    signed_at = datetime.fromtimestamp(timestamp, UTC)
    return Webhook(OPENAI_SECRET).sign(msg_id, signed_at, body.decode())


def _spec_signature(msg_id: str, timestamp: int, body: bytes) -> str:
    # Standard Webhooks 1.0 "Verifying webhook signatures", written out: HMAC-SHA256 keyed by
    # the base64 after whsec_, over "id.timestamp.body", sent as "v1,<base64>".
    key = base64.b64decode(OPENAI_SECRET.removeprefix("whsec_"))
    content = f"{msg_id}.{timestamp}.".encode() + body
    return "v1," + base64.b64encode(hmac.new(key, content, hashlib.sha256).digest()).decode()


def _openai_delivery(
    event_type: str, sign: Callable[[str, int, bytes], str]
) -> tuple[dict[str, str], bytes]:
    # The event object of OpenAI's API reference (Webhook Events), data.id the batch's id.
    body = json.dumps(
        {
            "object": "event",
            "id": "evt_685343a1381c819085d44c354e1b330e",
            "type": event_type,
            "created_at": int(NOW.timestamp()) - 2,
            "data": {"id": "batch_abc123"},
        }
    ).encode()
    msg_id, timestamp = "wh_685342e6c53c8190a1be43f081506c52", int(NOW.timestamp())
    headers = {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(msg_id, timestamp, body),
    }
    return headers, body


@pytest.mark.parametrize("sign", [_library_signature, _spec_signature], ids=["library", "by-hand"])
@pytest.mark.parametrize(
    "event_type", ["batch.completed", "batch.failed", "batch.cancelled", "batch.expired"]
)
def test_an_openai_batch_webhook_signed_as_standard_webhooks_maps_to_the_batch_id(
    event_type: str, sign: Callable[[str, int, bytes], str]
) -> None:
    spec = contract("openai_batch").webhook
    assert spec is not None and spec.scheme is WebhookScheme.standard
    assert spec.secret_env == "JOBWARDEN_OPENAI_WEBHOOK_SECRET" and spec.secret_file is None
    headers, body = _openai_delivery(event_type, sign)
    delivery = verify_delivery(spec, OPENAI_SECRET, headers, body, now=NOW)
    assert isinstance(delivery, Delivery), delivery
    assert delivery.remote_job_id == "batch_abc123"
    # Deduplicated on the Standard Webhooks message id, the same on every retry.
    assert delivery.event_id == "wh_685342e6c53c8190a1be43f081506c52"
    assert delivery.payload["type"] == event_type
    assert delivery.signed_at == NOW


def test_an_openai_webhook_altered_stale_or_signed_with_another_secret_is_refused() -> None:
    spec = contract("openai_batch").webhook
    assert spec is not None
    headers, body = _openai_delivery("batch.completed", _library_signature)
    altered = body.replace(b"batch_abc123", b"batch_other1")
    assert verify_delivery(spec, OPENAI_SECRET, headers, altered, now=NOW) == Refused(
        reason=Refusal.forged, detail="no webhook-signature entry verifies"
    )
    other = "whsec_" + base64.b64encode(b"another-signing-key-of-32-bytes").decode()
    refused = verify_delivery(spec, other, headers, body, now=NOW)
    assert isinstance(refused, Refused) and refused.reason is Refusal.forged
    late = verify_delivery(spec, OPENAI_SECRET, headers, body, now=NOW + timedelta(minutes=6))
    assert isinstance(late, Refused) and late.reason is Refusal.stale
