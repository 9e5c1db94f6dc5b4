"""The create an approval shows is the create the edge sends (models/provider/outgoing.py)."""

from __future__ import annotations

import json
from dataclasses import replace

from jobwarden.models.history.excerpts import REDACTED
from jobwarden.models.provider.outgoing import (
    FIRST_SENT_LATER,
    NEW_PER_REQUEST,
    credential_header,
    outgoing_body,
    outgoing_headers,
    shown_create,
)
from jobwarden.models.provider.requests import create_request
from tests.unit.factories import TOKEN, context, operation

SECRET = "sk-live-0123456789abcdefghij"
UA = "jobwarden (httpx/test)"
BATCH = {
    "input_file_id": "file-abc",
    "endpoint": "/v1/chat/completions",
    "completion_window": "24h",
}


def test_the_openai_batch_create_is_shown_as_the_provider_route_with_its_body_as_sent() -> None:
    ctx = context("openai_batch")
    op = operation(provider="openai_batch", command=BATCH)
    shown = shown_create(ctx, op, user_agent=UA, secrets=(SECRET,))
    assert (shown.method, shown.url) == ("POST", "https://api.openai.com/v1/batches")
    sent = create_request(ctx, op)
    assert shown.body == json.dumps(sent.json_body, separators=(",", ":"))
    assert json.loads(shown.body) == BATCH  # the token travels in a header, not the body
    headers = dict(shown.headers)
    assert headers["Authorization"] == f"Bearer {REDACTED}"
    assert headers["Idempotency-Key"] == TOKEN
    assert headers["content-type"] == "application/json"
    assert headers["x-jobwarden-trace-id"] == op.trace_id
    assert headers["traceparent"] == f"00-{op.trace_id}-{NEW_PER_REQUEST}-01"
    assert headers["user-agent"] == UA
    assert shown.fingerprint == op.request_fingerprint
    assert SECRET not in repr(shown)


def test_the_shown_headers_are_the_edges_headers_with_the_credential_as_a_placeholder() -> None:
    ctx = context("openai_batch")
    op = operation(provider="openai_batch", command=BATCH)
    sent = create_request(ctx, op)
    edge = outgoing_headers(
        ctx.contract,
        sent,
        traceparent="00-x-y-01",
        trace_id=op.trace_id,
        credential=credential_header(ctx.contract.auth, SECRET),
    )
    shown = dict(shown_create(ctx, op, user_agent=UA).headers)
    assert edge["Authorization"] == f"Bearer {SECRET}"
    assert list(shown) == [*edge, "user-agent"]
    differ = {n for n in edge if edge[n] != shown[n]}
    assert differ == {"Authorization", "traceparent"}
    assert shown["Authorization"] == edge["Authorization"].replace(SECRET, REDACTED)
    assert outgoing_body(sent) == (shown_create(ctx, op, user_agent=UA).body or "").encode()


def test_secrets_in_a_command_and_secret_named_headers_are_redacted_in_what_is_shown() -> None:
    ctx = context("sandbox")
    ctx = replace(
        ctx, contract=replace(ctx.contract, extra_headers={"X-Api-Key": "k1", "X-Team": "blue"})
    )
    op = operation(command={"report": "monthly", "api_key": "by-name", "note": f"is {SECRET}"})
    shown = shown_create(ctx, op, user_agent=UA, secrets=(SECRET,))
    headers = dict(shown.headers)
    assert (headers["X-Api-Key"], headers["X-Team"]) == (REDACTED, "blue")
    assert json.loads(shown.body or "") == {
        "report": "monthly",
        "api_key": REDACTED,
        "note": f"is {REDACTED}",
    }
    assert SECRET not in repr(shown) and "by-name" not in repr(shown)


def test_a_first_sent_header_is_shown_as_set_at_the_first_send_and_a_user_agent_kept() -> None:
    ctx = context("sandbox")
    spec = replace(ctx.contract.create, first_sent_header="Repeatability-First-Sent")
    ctx = replace(
        ctx,
        contract=replace(
            ctx.contract, create=spec, extra_headers={"User-Agent": "contract-agent/1"}
        ),
    )
    headers = dict(shown_create(ctx, operation(), user_agent=UA).headers)
    assert headers["Repeatability-First-Sent"] == FIRST_SENT_LATER
    assert headers["User-Agent"] == "contract-agent/1" and "user-agent" not in headers


def test_a_header_credential_keeps_its_name_and_hides_its_value() -> None:
    ctx = context("sandbox")
    assert ctx.contract.auth is not None
    auth = replace(ctx.contract.auth, scheme="header", header="X-Secret-Key")
    ctx = replace(ctx, contract=replace(ctx.contract, auth=auth))
    headers = dict(shown_create(ctx, operation(), user_agent=UA).headers)
    assert headers["X-Secret-Key"] == REDACTED and "Authorization" not in headers
