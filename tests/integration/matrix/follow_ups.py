"""The follow-up door (issue 40): a capture, a refund or a rollback started from an
operation, held to every promise that applies (the HTTP route; the Python, Celery, MCP
and CLI spellings share its one call, tasks/follow_ups.start_follow_up).
"""

from __future__ import annotations

import uuid

from jobwarden.models.errors import RefusedInputError
from jobwarden.models.history.chain import EventKind
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.follow_ups import start_follow_up
from tests.integration.api_helpers import insert_operation, tenant_name
from tests.integration.matrix.attended import unattended
from tests.integration.matrix.doors import Doors, watching_logs

INTENT = {"kind": "payment_intent", "amount": 1000, "currency": "EUR"}
CAPTURE = {"kind": "capture", "amount": 1000, "currency": "EUR"}


def _intent(d: Doors, tenant: str) -> uuid.UUID:
    return insert_operation(d.url, tenant, S.succeeded, provider="sandbox_payments", command=INTENT)


def _started(d: Doors, parent: uuid.UUID) -> list[str]:
    return [
        str(e.draft.excerpt["follow_up"])
        for e in d.events(parent)
        if e.draft.kind is EventKind.follow_up_started and e.draft.excerpt
    ]


def tenant(d: Doors) -> None:
    ours, theirs = tenant_name(), tenant_name()
    parent = _intent(d, ours)
    with d.http(d.token(theirs, "oncall", ("submit", "read"))) as client:
        answer = client.post(
            f"/v1/operations/{parent}/follow-ups", json={"kind": "capture", "command": CAPTURE}
        )
    assert answer.status_code == 404, answer.text
    assert d.find(ours, f"follow-up:{parent}:capture") is None
    assert d.find(theirs, f"follow-up:{parent}:capture") is None
    assert _started(d, parent) == []


def identity(d: Doors) -> None:
    tenant = tenant_name()
    parent = _intent(d, tenant)
    with d.http(d.token(tenant, "oncall", ("submit", "read"))) as client:
        typed = client.post(
            f"/v1/operations/{parent}/follow-ups",
            json={"kind": "capture", "command": CAPTURE, "requested_by": "admin"},
        )
        assert typed.status_code == 422, typed.text  # nobody names themselves in a body
        answer = client.post(
            f"/v1/operations/{parent}/follow-ups", json={"kind": "capture", "command": CAPTURE}
        )
    assert answer.status_code == 201, answer.text
    child = answer.json()["operation_id"]
    assert d.events(child)[0].draft.actor.endswith("token:oncall")
    (started,) = [e.draft for e in d.events(parent) if e.draft.kind is EventKind.follow_up_started]
    assert started.actor.endswith("token:oncall")
    assert d.load(child).requested_by == "oncall"


def reserved_keys(d: Doors) -> None:
    tenant = tenant_name()
    parent = _intent(d, tenant)
    key = f"follow-up:{parent}:capture"
    with d.http(d.token(tenant, "svc", ("submit", "read"))) as client:
        planted = client.post(
            "/v1/operations",
            json={"provider": "sandbox_capture", "command": CAPTURE},
            headers={"Idempotency-Key": key},
        )
    assert planted.status_code == 422, planted.text
    assert d.find(tenant, key) is None
    # One planted before the rule (or by hand) is never adopted as the capture.
    held = insert_operation(
        d.url, tenant, S.create_pending, provider="sandbox_capture", idempotency_key=key
    )
    try:
        start_follow_up(parent, "capture", CAPTURE, "dana", runtime=d.rt)
    except RefusedInputError as exc:
        assert "refusing to adopt" in str(exc)
    else:
        raise AssertionError("a planted key was adopted as the capture")
    assert d.load(held).follows is None
    assert _started(d, parent) == []


def intake_log(d: Doors) -> None:
    tenant = tenant_name()
    parent = _intent(d, tenant)
    with d.http(d.token(tenant, "oncall", ("submit", "read"))) as client:
        made = client.post(
            f"/v1/operations/{parent}/follow-ups", json={"kind": "capture", "command": CAPTURE}
        )
        again = client.post(
            f"/v1/operations/{parent}/follow-ups", json={"kind": "capture", "command": CAPTURE}
        )
    assert (made.status_code, again.status_code) == (201, 201), (made.text, again.text)
    entries = d.intake(tenant, f"follow-up:{parent}:capture")
    assert [(e.door, e.outcome, e.http_status) for e in entries] == [
        ("http", "created", 201),
        ("http", "replayed", 201),
    ]
    assert all(e.actor.endswith("token:oncall") and e.token_id for e in entries)


HOSTILE: list[object] = [
    {"kind": "capture"},
    {"kind": "capture", "command": []},
    {"kind": "capture\u0000", "command": {}},
    {"kind": "refund", "command": {"amount": 1e300}, "instruction_id": "x\u0000"},
    {"kind": "capture", "command": {"kind": "capture", "amount": 2**70, "currency": "EUR"}},
    {"kind": "nope", "command": CAPTURE},
    "not an object",
]


def no_500(d: Doors) -> None:
    tenant = tenant_name()
    parent = _intent(d, tenant)
    with watching_logs() as lines, d.http(d.token(tenant, "svc", ("submit", "read"))) as client:
        for body in HOSTILE:
            answer = client.post(f"/v1/operations/{parent}/follow-ups", json=body)
            assert 400 <= answer.status_code < 500, (body, answer.status_code, answer.text)
        junk = client.post(f"/v1/operations/{parent}/follow-ups", content=b"{\xff")
        assert 400 <= junk.status_code < 500, junk.text
        other = client.post(
            "/v1/operations/not-an-id/follow-ups", json={"kind": "capture", "command": CAPTURE}
        )
        assert other.status_code == 404, other.text
    assert lines.errors() == []


def no_silent_wait(d: Doors) -> None:
    unattended(d)
    parent = _intent(d, tenant_name())
    answer = start_follow_up(parent, "capture", CAPTURE, "dana", runtime=d.rt)
    assert [w.code for w in answer.submitted.warnings] == ["no_worker"]


DEPLOY = {"kind": "deploy", "service": "web", "ref": "a" * 40, "previous_ref": "b" * 40}


def immutable_refs(d: Doors) -> None:
    # A person's rollback names the commit to go back to: a branch is refused at the
    # follow-up door as at every other, naming the field, and nothing is started.
    tenant = tenant_name()
    parent = insert_operation(d.url, tenant, S.succeeded, provider="sandbox_deploy", command=DEPLOY)
    with d.http(d.token(tenant, "oncall", ("submit", "read"))) as client:
        answer = client.post(
            f"/v1/operations/{parent}/follow-ups",
            json={"kind": "rollback", "command": {"service": "web", "ref": "main"}},
        )
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["type"].endswith("/invalid_submission"), problem
    assert [e["path"] for e in problem["errors"]] == ["/command/ref"], problem
    assert "immutable reference" in problem["detail"], problem
    assert d.find(tenant, f"follow-up:{parent}:rollback") is None
    assert _started(d, parent) == []
