"""The action routes over HTTP against the real database and Redis: cancel, approvals,
decisions — tenant isolation (404), scopes (403), the four-eyes rule on approvals, and
the principal recorded as the actor of every intervention.

Conventions: RFC 9457 problem details for every refusal; 404 for another tenant's
operation (RFC 9110 section 15.5.5); 202 for a recorded cancel (RFC 9110 section 15.3.3).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from jobwarden.models.states import OperationState as S
from tests.api_server import serving
from tests.integration.api_helpers import NOW, insert_operation, load, make_token, tenant_name

ALL = ["read", "cancel", "approve", "decide"]
TYPE = "tag:jobwarden.dev,2026:problem/"


@pytest.fixture(scope="module")
def client(database_url: str) -> Iterator[httpx.Client]:
    from jobwarden.api.app import create_app

    with serving(create_app()) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http


def _problem(answer: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = answer.json()
    assert body["type"] == TYPE + kind, body
    assert "Traceback" not in answer.text
    return body


def _events(client: httpx.Client, op: uuid.UUID, headers: dict[str, str]) -> list[dict[str, Any]]:
    answer = client.get(f"/v1/operations/{op}/events", headers=headers)
    assert answer.status_code == 200, answer.text
    events: list[dict[str, Any]] = answer.json()["events"]
    return events


def _unchanged(database_url: str, op: uuid.UUID, before: Any) -> None:
    after = load(database_url, op)
    assert (after.version, after.state, after.event_count) == (
        before.version,
        before.state,
        before.event_count,
    )


def _every_action(op: uuid.UUID, fingerprint: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"/v1/operations/{op}/cancel", {"reason": "not needed"}),
        (f"/v1/operations/{op}/approvals", {"fingerprint": fingerprint}),
        (f"/v1/operations/{op}/decisions", {"option": "abandon"}),
    ]


def test_another_tenant_gets_404_on_every_action_and_nothing_changes(
    database_url: str, client: httpx.Client
) -> None:
    owner = tenant_name()
    stranger = make_token(database_url, tenant_name(), "mallory", ALL, allow_self_approval=True)
    waiting = insert_operation(database_url, owner, S.awaiting_approval)
    stopped = insert_operation(database_url, owner, S.escalated, escalation_reason="unknown_state")
    for op in (waiting, stopped):
        before = load(database_url, op)
        for path, body in _every_action(op, before.request_fingerprint):
            refused = _problem(client.post(path, json=body, headers=stranger), 404, "not_found")
            unknown = _problem(
                client.post(path.replace(str(op), str(uuid.uuid4())), json=body, headers=stranger),
                404,
                "not_found",
            )
            assert refused["detail"] == unknown["detail"]
        _unchanged(database_url, op, before)


@pytest.mark.parametrize(
    ("action", "scope"),
    [("cancel", "cancel"), ("approvals", "approve"), ("decisions", "decide")],
)
def test_a_token_without_the_routes_scope_gets_403(
    database_url: str, client: httpx.Client, action: str, scope: str
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.awaiting_approval)
    before = load(database_url, op)
    others = [s for s in ["read", "submit", *ALL] if s != scope]
    headers = make_token(database_url, tenant, "reader", others)
    body = dict(_every_action(op, before.request_fingerprint))[f"/v1/operations/{op}/{action}"]
    refused = _problem(
        client.post(f"/v1/operations/{op}/{action}", json=body, headers=headers),
        403,
        "insufficient_scope",
    )
    assert refused["required_scope"] == scope
    _unchanged(database_url, op, before)


def test_a_cancel_is_recorded_with_the_principal_as_actor_and_answers_202(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.observing)
    headers = make_token(database_url, tenant, "ops-bot", ALL)
    answer = client.post(
        f"/v1/operations/{op}/cancel", json={"reason": "customer withdrew"}, headers=headers
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["state"] == "cancel_requested"
    row = load(database_url, op)
    assert (row.state, row.cancel_reason) == (S.cancel_requested, "customer withdrew")
    last = _events(client, op, headers)[-1]
    assert (last["kind"], last["actor"]) == ("cancel_requested", "human:token:ops-bot")


@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}, {"why": "x"}])
def test_a_cancel_without_a_reason_is_a_422_naming_the_field(
    database_url: str, client: httpx.Client, body: dict[str, str]
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.observing)
    before = load(database_url, op)
    headers = make_token(database_url, tenant, "ops-bot", ALL)
    refused = _problem(
        client.post(f"/v1/operations/{op}/cancel", json=body, headers=headers),
        422,
        "invalid_request",
    )
    assert any(e["path"] in ("reason", "why") for e in refused["errors"]), refused
    _unchanged(database_url, op, before)


def test_cancelling_an_ended_operation_is_a_409(database_url: str, client: httpx.Client) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.succeeded)
    headers = make_token(database_url, tenant, "ops-bot", ALL)
    refused = _problem(
        client.post(f"/v1/operations/{op}/cancel", json={"reason": "late"}, headers=headers),
        409,
        "conflict",
    )
    assert "succeeded" in refused["detail"]


def test_the_submitter_may_not_approve_its_own_operation(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.awaiting_approval, requested_by="alice")
    before = load(database_url, op)
    alice = make_token(database_url, tenant, "alice", ALL)
    _problem(
        client.post(
            f"/v1/operations/{op}/approvals",
            json={"fingerprint": before.request_fingerprint},
            headers=alice,
        ),
        403,
        "self_approval_refused",
    )
    _unchanged(database_url, op, before)
    bob = make_token(database_url, tenant, "bob", ALL)
    answer = client.post(
        f"/v1/operations/{op}/approvals",
        json={"fingerprint": before.request_fingerprint, "valid_for_seconds": 600},
        headers=bob,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "create_pending"
    row = load(database_url, op)
    assert row.authorized_by == "token:bob" and row.approval_expires_at is not None
    approved = [e for e in _events(client, op, bob) if e["kind"] == "approved"]
    assert [e["actor"] for e in approved] == ["human:token:bob"]


def test_a_tenant_that_allows_self_approval_lets_the_submitter_approve(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.awaiting_approval, requested_by="solo")
    fingerprint = load(database_url, op).request_fingerprint
    solo = make_token(database_url, tenant, "solo", ALL, allow_self_approval=True)
    answer = client.post(
        f"/v1/operations/{op}/approvals", json={"fingerprint": fingerprint}, headers=solo
    )
    assert answer.status_code == 200, answer.text
    assert load(database_url, op).state is S.create_pending


def test_an_approval_naming_another_fingerprint_is_refused_and_changes_nothing(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.awaiting_approval)
    before = load(database_url, op)
    headers = make_token(database_url, tenant, "bob", ALL)
    other = ("0" if before.request_fingerprint[0] != "0" else "1") + before.request_fingerprint[1:]
    _problem(
        client.post(f"/v1/operations/{op}/approvals", json={"fingerprint": other}, headers=headers),
        409,
        "fingerprint_mismatch",
    )
    _unchanged(database_url, op, before)


@pytest.mark.parametrize(
    "body",
    [
        {"fingerprint": "f" * 64, "valid_for_seconds": 59},
        {"fingerprint": "f" * 64, "valid_for_seconds": 7 * 24 * 3600 + 1},
        {"fingerprint": "not-hex"},
        {},
    ],
)
def test_an_approval_with_bounds_out_of_range_is_a_422(
    database_url: str, client: httpx.Client, body: dict[str, Any]
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.awaiting_approval)
    before = load(database_url, op)
    headers = make_token(database_url, tenant, "bob", ALL)
    _problem(
        client.post(f"/v1/operations/{op}/approvals", json=body, headers=headers),
        422,
        "invalid_request",
    )
    _unchanged(database_url, op, before)


def test_approving_an_operation_not_awaiting_approval_is_a_409(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.observing)
    row = load(database_url, op)
    headers = make_token(database_url, tenant, "bob", ALL)
    _problem(
        client.post(
            f"/v1/operations/{op}/approvals",
            json={"fingerprint": row.request_fingerprint},
            headers=headers,
        ),
        409,
        "conflict",
    )


def test_a_decision_picks_an_offered_option_and_records_the_principal(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(
        database_url, tenant, S.escalated, escalation_reason="request_budget_exhausted"
    )
    headers = make_token(database_url, tenant, "oncall", ALL)
    answer = client.post(
        f"/v1/operations/{op}/decisions",
        json={"option": "extend", "note": "provider is slow today"},
        headers=headers,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "observing"
    row = load(database_url, op)
    assert (row.max_status_requests, row.extensions_used) == (14, 1)
    decision = _events(client, op, headers)[-1]
    assert (decision["kind"], decision["actor"]) == ("human_decision", "human:token:oncall")
    assert decision["excerpt"]["note"] == "provider is slow today"


def test_an_option_not_offered_now_is_a_422_naming_the_offered_ones(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.escalated, escalation_reason="contract_violation")
    before = load(database_url, op)
    headers = make_token(database_url, tenant, "oncall", ALL)
    for option in ("extend", "reboot"):
        refused = _problem(
            client.post(f"/v1/operations/{op}/decisions", json={"option": option}, headers=headers),
            422,
            "option_not_offered",
        )
        assert refused["offered"] == ["cancel_at_provider", "abandon"]
        assert "cancel_at_provider, abandon" in refused["detail"]
    _unchanged(database_url, op, before)


def test_a_decision_for_an_operation_that_needs_none_is_a_409(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.observing)
    headers = make_token(database_url, tenant, "oncall", ALL)
    _problem(
        client.post(f"/v1/operations/{op}/decisions", json={"option": "abandon"}, headers=headers),
        409,
        "conflict",
    )


def test_an_operation_submitted_over_http_is_approved_by_another_token_only(
    database_url: str, client: httpx.Client
) -> None:
    # The whole door: POST /v1/operations as alice (a contract that demands approval),
    # alice's own approval refused, bob's accepted, both answers in the story.
    tenant = tenant_name()
    alice = make_token(database_url, tenant, "alice", ["submit", *ALL])
    submitted = client.post(
        "/v1/operations",
        json={"provider": "openai_batch", "command": {"input_file_id": "file-1"}},
        headers={**alice, "Idempotency-Key": f"approve-{uuid.uuid4()}"},
    )
    assert submitted.status_code == 201, submitted.text
    op = submitted.json()["operation_id"]
    shown = client.get(f"/v1/operations/{op}", headers=alice).json()
    assert shown["state"] == "awaiting_approval" and shown["requested_by"] == "alice"
    approval = {"fingerprint": shown["fingerprint"]}
    _problem(
        client.post(f"/v1/operations/{op}/approvals", json=approval, headers=alice),
        403,
        "self_approval_refused",
    )
    bob = make_token(database_url, tenant, "bob", ["approve", "read"])
    answer = client.post(f"/v1/operations/{op}/approvals", json=approval, headers=bob)
    assert answer.status_code == 200, answer.text
    story = client.get(f"/v1/operations/{op}/events", headers=bob).json()
    assert [(e["kind"], e["actor"]) for e in story["events"]][-1] == ("approved", "human:token:bob")
    assert [(a["door"], a["outcome"], a["actor"]) for a in story["intake"]] == [
        ("http", "created", "token:alice")
    ]
    assert story["chain"]["verified"] is True


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("cancel", b'{"reason": "a\\u0000b"}'),
        ("cancel", b'{"reason": "\\ud800"}'),
        ("decisions", b'{"option": "abandon", "note": "\\u0000"}'),
        ("decisions", b'{"option": "abandon", "note": "\\udfff lone"}'),
    ],
)
def test_text_postgres_cannot_store_is_a_422_not_a_500(
    database_url: str, client: httpx.Client, action: str, body: bytes
) -> None:
    # JSON may carry NUL and unpaired surrogates; Postgres text and UTF-8 cannot.
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.escalated, escalation_reason="unknown_state")
    before = load(database_url, op)
    headers = {
        **make_token(database_url, tenant, "oncall", ALL),
        "Content-Type": "application/json",
    }
    _problem(
        client.post(f"/v1/operations/{op}/{action}", content=body, headers=headers),
        422,
        "invalid_request",
    )
    _unchanged(database_url, op, before)


def test_concurrent_approvals_approve_once_and_every_other_answer_is_a_409(
    database_url: str, client: httpx.Client
) -> None:
    # Some lose the race inside the intervention (a stale version, or the state moved
    # after the route's check): that is a conflict with the new state, never a 500.
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.awaiting_approval)
    fingerprint = load(database_url, op).request_fingerprint
    approvers = [make_token(database_url, tenant, f"approver-{i}", ALL) for i in range(8)]
    barrier = threading.Barrier(len(approvers))
    answers: list[int] = []

    def approve(headers: dict[str, str]) -> None:
        barrier.wait(timeout=30)
        answer = client.post(
            f"/v1/operations/{op}/approvals", json={"fingerprint": fingerprint}, headers=headers
        )
        answers.append(answer.status_code)

    threads = [threading.Thread(target=approve, args=(h,)) for h in approvers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(answers) == [200] + [409] * (len(approvers) - 1)
    approved = [e for e in _events(client, op, approvers[0]) if e["kind"] == "approved"]
    assert len(approved) == 1


# --- the approval window (issue 20, item 1) ----------------------------------------------


def test_an_approval_after_the_create_deadline_passed_while_waiting_moves_both_deadlines(
    database_url: str, client: httpx.Client
) -> None:
    # The user's story: a 300 s create deadline, approved 8 minutes after the submission.
    tenant = tenant_name()
    submitted = NOW - timedelta(minutes=8)
    op = insert_operation(
        database_url,
        tenant,
        S.awaiting_approval,
        created_at=submitted,
        create_deadline=submitted + timedelta(seconds=300),
        result_deadline=submitted + timedelta(hours=2),
        next_poll_at=submitted + timedelta(days=1),
    )
    row = load(database_url, op)
    headers = make_token(database_url, tenant, "bob", ALL)
    answer = client.post(
        f"/v1/operations/{op}/approvals",
        json={"fingerprint": row.request_fingerprint},
        headers=headers,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] == "create_pending"
    approved = load(database_url, op)
    # Both moved by the wait (at least the 8 minutes): the create may still be sent.
    assert approved.create_deadline >= NOW + timedelta(seconds=300)
    assert approved.result_deadline - approved.create_deadline == timedelta(seconds=6900)
    event = next(e for e in _events(client, op, headers) if e["kind"] == "approved")
    assert event["excerpt"]["create_deadline"] == approved.create_deadline.isoformat()
    assert event["excerpt"]["result_deadline"] == approved.result_deadline.isoformat()


@pytest.mark.parametrize(
    ("overrides", "kind"),
    [
        ({"next_poll_at": NOW - timedelta(minutes=1)}, "approval_window_closed"),
        (
            {
                "business_deadline": NOW - timedelta(minutes=1),
                "next_poll_at": NOW - timedelta(minutes=1),
            },
            "business_deadline_passed",
        ),
    ],
)
def test_an_approval_after_its_window_is_a_409_naming_the_reason_and_the_operation_ends(
    database_url: str, client: httpx.Client, overrides: dict[str, Any], kind: str
) -> None:
    tenant = tenant_name()
    op = insert_operation(
        database_url,
        tenant,
        S.awaiting_approval,
        created_at=NOW - timedelta(days=1, minutes=1),
        **overrides,
    )
    row = load(database_url, op)
    headers = make_token(database_url, tenant, "bob", ALL)
    body = {"fingerprint": row.request_fingerprint}
    refused = _problem(
        client.post(f"/v1/operations/{op}/approvals", json=body, headers=headers), 409, kind
    )
    assert ("window closed" if kind == "approval_window_closed" else "deadline") in refused[
        "detail"
    ]
    ended = load(database_url, op)
    # Never a 200 followed by a failure: nothing approved, ended as what it is.
    assert ended.state is S.approval_expired
    assert ended.authorized_by is None and ended.next_poll_at is None
    assert ended.create_attempts == 0
    last = _events(client, op, headers)[-1]
    assert (last["from_state"], last["to_state"]) == ("awaiting_approval", "approval_expired")
    # Asked again, the operation has ended: the same reason, still a 409.
    _problem(
        client.post(f"/v1/operations/{op}/approvals", json=body, headers=headers),
        409,
        "approval_window_closed",
    )
