"""One function behind every door (issue 10, item 8), and W3C Trace Context end to end.

The HTTP API runs on uvicorn in this process; the Celery door is the real
``jobwarden.submit`` task on the stack's workers; the sandbox logs what it was sent.
"""

from __future__ import annotations

import os
import secrets
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from jobwarden.api.app import create_app
from jobwarden.api.auth import Scope, create_token
from jobwarden.demo.harness import Stack
from jobwarden.models.intake.trace_context import trace_id_from
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence.db import transaction
from tests.acceptance.conftest import Pipeline
from tests.api_server import serving

COMMAND = {"kind": "export", "behaviour": {"polls_to_finish": 1}}
TRACE = "0af7651916cd43dd8448eb211c80319c"


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[str]:
    with serving(create_app()) as url:
        yield url


@pytest.fixture(scope="module")
def bearer(database_url: str) -> str:
    return create_token(
        database_url, tenant="acceptance", name="pytest", scopes=[Scope.submit]
    ).token


def _via_http(api: str, bearer: str, key: str, **headers: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{api}/v1/operations",
        json={"provider": "sandbox", "command": COMMAND},
        headers={"Authorization": f"Bearer {bearer}", "Idempotency-Key": key, **headers},
        timeout=30,
    )
    if answer.status_code == 409:
        return {"outcome": "in_progress", "operation_id": None, "fingerprint": None}
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    if answer.headers.get("idempotent-replayed") == "true":
        body["outcome"] = "replayed"  # the body repeats the original answer; the header says so
    return body


def _via_python(key: str) -> dict[str, Any]:
    from jobwarden.tasks.intake import submit_operation

    return submit_operation(
        tenant="acceptance",
        provider="sandbox",
        idempotency_key=key,
        command=COMMAND,
        requested_by="pytest",
    ).as_dict()


def _via_celery(key: str) -> dict[str, Any]:
    from jobwarden.config.celery_app import app

    result = app.send_task(
        "jobwarden.submit",
        kwargs={
            "tenant": "acceptance",
            "provider": "sandbox",
            "idempotency_key": key,
            "command": COMMAND,
            "requested_by": "pytest",
        },
        queue=os.environ["JOBWARDEN_QUEUE"],
    )
    answer: dict[str, Any] = result.get(timeout=30)
    result.forget()
    return answer


def test_the_same_key_through_python_celery_and_http_at_once_makes_one_operation(
    stack: Stack, pipeline: Pipeline, api: str, bearer: str, database_url: str
) -> None:
    key = secrets.token_hex(8)
    barrier = threading.Barrier(3)
    answers: dict[str, dict[str, Any]] = {}

    def door(name: str, submit: Any) -> None:
        barrier.wait(timeout=30)
        answers[name] = submit()

    threads = [
        threading.Thread(target=door, args=("http", lambda: _via_http(api, bearer, key))),
        threading.Thread(target=door, args=("python", lambda: _via_python(key))),
    ]
    for t in threads:
        t.start()
    # The Celery client stays on this thread: Celery's result backend is per thread, and
    # one made on a short-lived thread would leave its Redis socket to the collector.
    door("celery", lambda: _via_celery(key))
    for t in threads:
        t.join(60)
    assert set(answers) == {"http", "python", "celery"}
    outcomes = sorted(a["outcome"] for a in answers.values())
    assert outcomes.count("created") == 1, answers
    assert set(outcomes) <= {"created", "replayed", "in_progress"}, answers
    ids = {a["operation_id"] for a in answers.values() if a["outcome"] != "in_progress"}
    fingerprints = {a["fingerprint"] for a in answers.values() if a["fingerprint"]}
    assert len(ids) == 1 and len(fingerprints) == 1, answers
    (op_id,) = ids
    pipeline.created.append(op_id)
    with transaction(database_url) as session:
        log = api_store.intake_for_key(session, "acceptance", key)
    assert sorted(e.door for e in log) == ["celery", "http", "python"]
    assert sorted(e.outcome for e in log) == outcomes
    assert {e.fingerprint for e in log} == fingerprints
    assert {e.operation_id for e in log if e.outcome != "in_progress"} == {uuid.UUID(op_id)}
    assert pipeline.wait_state(op_id).state == "succeeded"
    assert len(pipeline.creates(op_id)) == 1


def test_a_callers_traceparent_reaches_every_provider_request_as_a_valid_traceparent(
    stack: Stack, pipeline: Pipeline, api: str, bearer: str
) -> None:
    header = f"00-{TRACE}-b7ad6b7169203331-01"
    answer = _via_http(api, bearer, secrets.token_hex(8), traceparent=header)
    op_id = answer["operation_id"]
    pipeline.created.append(op_id)
    assert answer["trace_id"] == TRACE
    assert pipeline.wait_state(op_id).state == "succeeded"
    by_seq = {r["seq"]: r for r in pipeline.creates(op_id) + pipeline.job_requests(op_id)}
    sent = list(by_seq.values())
    assert {r["kind"] for r in sent} >= {"create", "status"}
    for request in sent:
        assert trace_id_from(request["traceparent"]) == TRACE, request
    # Each request is its own span: the parent ids differ, the trace id does not.
    parents = {r["traceparent"].split("-")[2] for r in sent}
    assert len(parents) == len(sent)
