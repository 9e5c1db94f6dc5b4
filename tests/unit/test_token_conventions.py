"""The token's shape and its companions follow each convention: AIP-155 request_id is a
UUID; Azure's Repeatability-Request-ID travels with Repeatability-First-Sent (OASIS
Repeatable Requests 1.0), whose IMF-fixdate is the first attempt's on every retry."""

from __future__ import annotations

import uuid
from datetime import timedelta
from email.utils import parsedate_to_datetime

from jobwarden.models.actions import Send
from jobwarden.models.create_decisions import before_create
from jobwarden.models.provider.requests import create_request, provider_token
from jobwarden.models.states import OperationState as S
from tests.unit.factories import NOW, context, operation

AZURE = context("operation_location")
GOOGLE = context("google_aip151")


def test_aip_155_request_ids_are_uuids_and_the_default_token_is_prefixed_hex() -> None:
    op_id = uuid.uuid4()
    assert uuid.UUID(provider_token("uuid", op_id)).version == 4
    assert provider_token("prefixed_hex", op_id) == f"jw-{op_id.hex}"
    assert GOOGLE.contract.create.token_format == "uuid"
    assert AZURE.contract.create.token_format == "uuid"


def test_the_first_attempt_fixes_repeatability_first_sent_for_every_retry() -> None:
    op = operation(S.create_pending)
    send = before_create(op, AZURE, NOW).action
    assert isinstance(send, Send)
    first = send.request.headers["Repeatability-First-Sent"]
    assert first.endswith(" GMT") and parsedate_to_datetime(first) == NOW
    assert send.changes == {"first_sent_at": NOW}
    # A retry minutes later, from any worker, sends the same value from the row.
    retried = operation(S.create_pending, create_attempts=1, first_sent_at=NOW)
    later = before_create(retried, AZURE, NOW + timedelta(minutes=5)).action
    assert isinstance(later, Send)
    assert later.request.headers["Repeatability-First-Sent"] == first
    assert later.changes == {}


def test_a_contract_without_the_companion_sends_no_first_sent_header() -> None:
    request = create_request(GOOGLE, operation(S.create_pending, first_sent_at=NOW))
    assert not any(h.lower() == "repeatability-first-sent" for h in request.headers)
