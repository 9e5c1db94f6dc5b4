"""Intake: the Celery task answers like the Python call; bad input is refused and loses nothing."""

from __future__ import annotations

import os
import secrets
from typing import Any

import pytest
from sqlalchemy import func, select

from jobwarden.demo.harness import Stack
from jobwarden.models.errors import InvalidSubmissionError
from tests.acceptance.conftest import Pipeline


def _submit_via_celery(**kwargs: Any) -> dict[str, Any]:
    from jobwarden.config.celery_app import app

    result = app.send_task("jobwarden.submit", kwargs=kwargs, queue=os.environ["JOBWARDEN_QUEUE"])
    answer: dict[str, Any] = result.get(timeout=30)
    result.forget()
    return answer


def test_a_celery_only_client_gets_created_replayed_and_conflict_answers(
    stack: Stack, pipeline: Pipeline
) -> None:
    key = secrets.token_hex(8)
    request = {
        "tenant": "acceptance",
        "provider": "sandbox",
        "idempotency_key": key,
        "command": {"kind": "export", "behaviour": {"polls_to_finish": 1}},
        "requested_by": "celery-client",
    }
    first = _submit_via_celery(**request)
    assert first["outcome"] == "created"
    pipeline.created.append(first["operation_id"])
    again = _submit_via_celery(**request)
    assert (again["outcome"], again["operation_id"]) == ("replayed", first["operation_id"])
    changed = _submit_via_celery(**{**request, "command": {"kind": "other"}})
    assert (changed["outcome"], changed["operation_id"]) == ("conflict", first["operation_id"])
    invalid = _submit_via_celery(**{**request, "idempotency_key": "", "command": {}})
    assert invalid["outcome"] == "invalid" and "idempotency_key" in invalid["error"]
    assert pipeline.wait_state(first["operation_id"]).state == "succeeded"
    assert len(pipeline.creates(first["operation_id"])) == 1


def test_a_second_key_for_the_same_source_event_is_a_duplicate_event(
    stack: Stack, pipeline: Pipeline
) -> None:
    from jobwarden.tasks.intake import submit_operation

    event = secrets.token_hex(6)
    op = pipeline.submit({"polls_to_finish": 1}, source_event_id=event)
    answer = submit_operation(
        tenant="acceptance",
        provider="sandbox",
        idempotency_key=secrets.token_hex(8),
        command={"kind": "export"},
        requested_by="pytest",
        source_event_id=event,
    )
    assert (answer.outcome.value, answer.operation_id) == ("duplicate_event", op)
    pipeline.wait_state(op)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"command": ["not", "an", "object"]}, "command must be a JSON object"),
        ({"command": {"n": float("nan")}}, "finite"),
        ({"command": {"n": 2**60}}, "2^53 - 1"),
        ({"command": {"blob": "x" * 300_000}}, "limit"),
        ({"provider": "nope"}, "unknown provider"),
        ({"idempotency_key": ""}, "idempotency_key is required"),
        ({"idempotency_key": "k" * 300}, "longer than"),
        ({"max_status_requests": 0}, "must be positive"),
        ({"result_deadline_seconds": -5}, "must be positive"),
    ],
)
def test_invalid_submissions_are_refused_clearly_and_record_nothing(
    pipeline: Pipeline, database_url: str, change: dict[str, Any], message: str
) -> None:
    from jobwarden.models.persistence.db import transaction
    from jobwarden.models.persistence.tables import OperationRow
    from jobwarden.tasks.intake import submit_operation

    tenant = f"invalid-{secrets.token_hex(4)}"
    request: dict[str, Any] = {
        "tenant": tenant,
        "provider": "sandbox",
        "idempotency_key": secrets.token_hex(8),
        "command": {"kind": "export"},
        "requested_by": "pytest",
        **change,
    }
    with pytest.raises(InvalidSubmissionError, match=message.replace("^", r"\^")):
        submit_operation(**request)
    with transaction(database_url) as session:
        count = session.scalar(
            select(func.count()).select_from(OperationRow).where(OperationRow.tenant == tenant)
        )
    assert count == 0
