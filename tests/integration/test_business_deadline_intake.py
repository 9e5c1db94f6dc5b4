"""The business deadline through the doors: stored on the row, bound by the history,
kept out of the fingerprint, and refused naming its field when malformed."""

from __future__ import annotations

import json
import secrets
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from jobwarden.api.app import create_app
from jobwarden.api.auth import Scope, create_token
from jobwarden.config.settings import get_settings
from jobwarden.models.errors import InvalidSubmissionError
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.tasks.intake import SubmitOutcome, submit_from_message, submit_operation
from tests.api_server import serving

COMMAND = {"kind": "export", "behaviour": {"polls_to_finish": 1}}


def _row(operation_id: str | None) -> Operation:
    assert operation_id is not None
    with transaction(get_settings().database_url) as session:
        op = store.load(session, uuid.UUID(operation_id))
    assert op is not None
    return op


def _submit(key: str, **extra: object) -> tuple[str, str | None]:
    result = submit_operation(
        tenant="bd-tenant",
        provider="sandbox",
        idempotency_key=key,
        command=COMMAND,
        requested_by="pytest",
        **extra,  # type: ignore[arg-type]
    )
    return result.outcome.value, result.operation_id


def test_a_business_deadline_in_seconds_is_stored_from_the_intake_s_now(database_url: str) -> None:
    before = datetime.now(UTC)
    outcome, op_id = _submit(secrets.token_hex(8), business_deadline=90)
    after = datetime.now(UTC)
    assert outcome == SubmitOutcome.created.value
    stored = _row(op_id).business_deadline
    assert stored is not None
    assert before + timedelta(seconds=90) <= stored <= after + timedelta(seconds=90)


def test_a_business_deadline_as_a_time_is_stored_as_given_and_the_history_verifies(
    database_url: str,
) -> None:
    outcome, op_id = _submit(secrets.token_hex(8), business_deadline="2031-01-02T09:00:00+01:00")
    assert outcome == SubmitOutcome.created.value
    op = _row(op_id)
    assert op.business_deadline == datetime(2031, 1, 2, 8, tzinfo=UTC)
    with transaction(get_settings().database_url) as session:
        assert store.verify(session, op.operation_id) == []
        intent = store.events_for(session, op.operation_id)[0]
    assert intent.draft.excerpt is not None
    assert intent.draft.excerpt["business_deadline"] == "2031-01-02T08:00:00+00:00"


def test_a_repeat_with_a_relative_deadline_a_moment_later_is_a_replay(database_url: str) -> None:
    key = secrets.token_hex(8)
    first, op_id = _submit(key, business_deadline=600)
    again, same = _submit(key, business_deadline=600.5)
    assert (first, again) == (SubmitOutcome.created.value, SubmitOutcome.replayed.value)
    assert same == op_id


def test_without_a_business_deadline_the_row_holds_none(database_url: str) -> None:
    _, op_id = _submit(secrets.token_hex(8))
    assert _row(op_id).business_deadline is None


def test_a_malformed_business_deadline_is_refused_naming_the_field(database_url: str) -> None:
    with pytest.raises(InvalidSubmissionError, match="business_deadline must name its UTC offset"):
        _submit(secrets.token_hex(8), business_deadline="2031-01-02T09:00:00")


def test_the_celery_door_passes_the_business_deadline_through(database_url: str) -> None:
    answer = submit_from_message(
        {
            "tenant": "bd-tenant",
            "provider": "sandbox",
            "idempotency_key": secrets.token_hex(8),
            "command": COMMAND,
            "requested_by": "pytest",
            "business_deadline": "2031-01-02T09:00:00Z",
        }
    )
    assert answer["outcome"] == "created", answer
    assert _row(answer["operation_id"]).business_deadline == datetime(2031, 1, 2, 9, tzinfo=UTC)


@pytest.fixture(scope="module")
def api(database_url: str) -> Iterator[str]:
    with serving(create_app()) as url:
        yield url


def _post(api: str, database_url: str, body: dict[str, object]) -> httpx.Response:
    bearer = create_token(
        database_url,
        tenant=f"t-{secrets.token_hex(4)}",
        name=f"n-{secrets.token_hex(4)}",
        scopes=(Scope.submit, Scope.read),
    ).token
    return httpx.post(
        f"{api}/v1/operations",
        content=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {bearer}",
            "Idempotency-Key": secrets.token_hex(8),
            "Content-Type": "application/json",
        },
        timeout=30,
    )


def test_the_http_door_stores_the_business_deadline(api: str, database_url: str) -> None:
    body: dict[str, object] = {
        "provider": "sandbox",
        "command": COMMAND,
        "business_deadline": "2031-01-02T09:00:00Z",
    }
    response = _post(api, database_url, body)
    assert response.status_code == 201, response.text
    op = _row(response.json()["operation_id"])
    assert op.business_deadline == datetime(2031, 1, 2, 9, tzinfo=UTC)
    read = httpx.get(
        f"{api}/v1/operations/{op.operation_id}",
        headers={"Authorization": response.request.headers["Authorization"]},
        timeout=30,
    )
    assert read.status_code == 200, read.text
    assert read.json()["deadlines"]["business"] == "2031-01-02T09:00:00Z"


def test_the_http_door_refuses_a_malformed_business_deadline_as_a_422(
    api: str, database_url: str
) -> None:
    body: dict[str, object] = {"provider": "sandbox", "command": COMMAND, "business_deadline": -5}
    response = _post(api, database_url, body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert "business_deadline" in response.json()["detail"]
