"""The read routes over HTTP against the real database: one operation, lists with keyset
pagination, the story, escalations — each only ever showing the caller's tenant.

A foreign operation answers exactly like an unknown one (404, RFC 9110 section 15.5.5:
the server need not disclose that it exists); next pages are Link rel="next" (RFC 8288).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import text

from jobwarden.models.persistence.db import engine_for
from jobwarden.models.persistence.tables import NEEDS_A_HUMAN
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.humans.interventions import escalation_options
from tests.api_server import serving
from tests.integration.api_helpers import (
    NOW,
    insert_operation,
    load,
    make_token,
    pages,
    tenant_name,
)

READ = ["read"]


@pytest.fixture(scope="module")
def client(database_url: str) -> Iterator[httpx.Client]:
    from jobwarden.api.app import create_app

    with serving(create_app()) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http


def _problem(answer: httpx.Response, status: int) -> dict[str, object]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")
    body = answer.json()
    assert isinstance(body, dict) and body["status"] == status
    return body


def test_an_operation_shows_its_counters_deadlines_and_fingerprint(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.observing, status_requests_used=3)
    answer = client.get(f"/v1/operations/{op}", headers=make_token(database_url, tenant, "r", READ))
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["operation_id"] == str(op) and body["state"] == "observing"
    assert body["tenant"] == tenant and body["remote_job_id"] == f"job_{op.hex[:12]}"
    assert body["counters"]["status_requests"] == {"used": 3, "max": 10, "text": "3 of 10"}
    assert body["counters"]["transport_failures"]["text"] == "0 of 3"
    assert body["counters"]["create_attempts"]["text"] == "1 of 5"
    assert len(body["fingerprint"]) == 64 and len(body["trace_id"]) == 32
    assert body["deadlines"]["result"] is not None and body["escalation"] is None
    assert body["links"]["events"] == f"/v1/operations/{op}/events"


def test_an_operation_shows_the_create_request_as_it_leaves_with_its_credential_redacted(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(
        database_url, tenant, S.awaiting_approval, command={"kind": "export", "api_key": "k9"}
    )
    answer = client.get(f"/v1/operations/{op}", headers=make_token(database_url, tenant, "r", READ))
    row = load(database_url, op)
    create = answer.json()["create_request"]
    # The provider's create route on its base URL, not jobwarden's own intake route.
    assert (create["method"], create["url"]) == ("POST", "http://127.0.0.1:8765/v1/jobs")
    assert create["headers"]["Authorization"] == "Bearer [redacted]"
    assert create["headers"]["Idempotency-Key"] == row.provider_token
    assert create["body"] == '{"kind":"export","api_key":"[redacted]"}'
    assert create["fingerprint"] == row.request_fingerprint
    assert create["transport_headers"] == ["host", "content-length", "connection"]
    assert "k9" not in answer.text


def test_an_escalated_operation_shows_its_reason_and_the_options_offered_now(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(
        database_url,
        tenant,
        S.escalated,
        escalation_reason="request_budget_exhausted",
        escalation_detail="10 of 10 status requests used",
    )
    answer = client.get(f"/v1/operations/{op}", headers=make_token(database_url, tenant, "r", READ))
    escalation = answer.json()["escalation"]
    assert escalation["reason"] == "request_budget_exhausted"
    assert escalation["detail"] == "10 of 10 status requests used"
    offered = [o.kind.value for o in escalation_options(str(op))]
    assert [o["option"] for o in escalation["options"]] == offered
    assert offered == ["extend", "cancel_at_provider", "abandon"]


def test_another_tenants_operation_is_not_found_exactly_like_an_unknown_one(
    database_url: str, client: httpx.Client
) -> None:
    mine, theirs = tenant_name(), tenant_name()
    op = insert_operation(database_url, theirs, S.escalated, escalation_reason="unknown_state")
    me = make_token(database_url, mine, "r", READ)
    for path in (f"/v1/operations/{op}", f"/v1/operations/{op}/events"):
        foreign = _problem(client.get(path, headers=me), 404)
        unknown = _problem(client.get(path.replace(str(op), str(uuid.uuid4())), headers=me), 404)
        malformed = _problem(client.get(path.replace(str(op), "not-a-uuid"), headers=me), 404)
        # Same type, title and detail: nothing tells a foreign operation from a missing one.
        for body in (unknown, malformed):
            assert {k: v for k, v in body.items() if k != "instance"} == {
                k: v for k, v in foreign.items() if k != "instance"
            }
    listed = client.get("/v1/operations", headers=me).json()
    assert listed["operations"] == []
    waiting = client.get("/v1/escalations", headers=me).json()
    assert waiting["escalations"] == [] and waiting["counts"]["total"] == 0
    owner = make_token(database_url, theirs, "r", READ)
    assert client.get(f"/v1/operations/{op}", headers=owner).status_code == 200
    assert [
        o["operation_id"] for o in client.get("/v1/operations", headers=owner).json()["operations"]
    ] == [str(op)]


def test_a_token_without_the_read_scope_cannot_read(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant)
    writer = make_token(database_url, tenant, "w", ["submit", "cancel", "approve", "decide"])
    for path in (
        f"/v1/operations/{op}",
        f"/v1/operations/{op}/events",
        "/v1/operations",
        "/v1/escalations",
    ):
        body = _problem(client.get(path, headers=writer), 403)
        assert body["required_scope"] == "read"
    _problem(client.get("/v1/operations"), 401)


def test_keyset_pages_return_every_row_once_even_while_rows_are_inserted(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    # Ties on created_at are broken by operation_id: three rows share each timestamp.
    before = {
        insert_operation(database_url, tenant, created_at=NOW - timedelta(hours=1, seconds=i // 3))
        for i in range(23)
    }
    headers = make_token(database_url, tenant, "r", READ)
    seen: list[str] = []
    inserted: set[uuid.UUID] = set()
    for number, page in enumerate(pages(client, "/v1/operations?limit=5", headers)):
        assert len(page["operations"]) <= 5
        seen += [o["operation_id"] for o in page["operations"]]
        if number < 3:
            # Written while the client pages: later than every row shown so far.
            inserted.add(
                insert_operation(database_url, tenant, created_at=NOW + timedelta(minutes=number))
            )
    assert len(seen) == len(set(seen))
    assert set(seen) == {str(op) for op in before | inserted}
    created = [
        o["created_at"]
        for p in pages(client, "/v1/operations?limit=200", headers)
        for o in p["operations"]
    ]
    assert created == sorted(created)


def test_the_next_page_is_also_a_link_header(database_url: str, client: httpx.Client) -> None:
    tenant = tenant_name()
    for _ in range(3):
        insert_operation(database_url, tenant, S.failed)
    headers = make_token(database_url, tenant, "r", READ)
    first = client.get("/v1/operations?state=failed&limit=2", headers=headers)
    nxt = first.json()["links"]["next"]
    assert nxt.startswith("/v1/operations?") and "state=failed" in nxt and "cursor=" in nxt
    assert first.headers["link"] == f'<{nxt}>; rel="next"'
    last = client.get(nxt, headers=headers)
    assert len(last.json()["operations"]) == 1 and last.json()["links"]["next"] is None
    assert "link" not in last.headers


def test_every_filter_narrows_the_list(database_url: str, client: httpx.Client) -> None:
    tenant = tenant_name()
    old = insert_operation(
        database_url,
        tenant,
        S.escalated,
        escalation_reason="rate_limited",
        created_at=NOW - timedelta(days=2),
    )
    other = insert_operation(database_url, tenant, S.observing, provider="azure_lro")
    keyed = insert_operation(database_url, tenant, S.succeeded, idempotency_key="order-7")
    headers = make_token(database_url, tenant, "r", READ)

    def ids(query: str) -> set[str]:
        answer = client.get(f"/v1/operations?{query}", headers=headers)
        assert answer.status_code == 200, answer.text
        return {o["operation_id"] for o in answer.json()["operations"]}

    assert ids("state=escalated") == {str(old)}
    assert ids("reason=rate_limited") == {str(old)}
    assert ids("provider=azure_lro") == {str(other)}
    assert ids(f"remote_job_id=job_{other.hex[:12]}") == {str(other)}
    assert ids("idempotency_key=order-7") == {str(keyed)}
    since = (NOW - timedelta(days=1)).isoformat().replace("+00:00", "Z")
    assert ids(f"since={since}") == {str(other), str(keyed)}
    assert ids("state=observing&provider=sandbox") == set()


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("state=finished", "state"),
        ("reason=bored", "reason"),
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("since=2026-01-01T00:00:00", "since"),  # no time zone: ambiguous
        ("cursor=bm9wZQ", "cursor"),
        ("colour=blue", "colour"),
        # Postgres text holds no NUL: refused here, never a driver error (a 500).
        ("provider=a%00b", "provider"),
        ("remote_job_id=%00", "remote_job_id"),
        ("idempotency_key=k%00", "idempotency_key"),
    ],
)
def test_an_invalid_filter_is_a_422_naming_the_parameter(
    database_url: str, client: httpx.Client, query: str, parameter: str
) -> None:
    headers = make_token(database_url, tenant_name(), "r", READ)
    body = _problem(client.get(f"/v1/operations?{query}", headers=headers), 422)
    assert body["type"] == "tag:jobwarden.dev,2026:problem/invalid_request"
    errors = body["errors"]
    assert isinstance(errors, list)
    assert any(e["path"] == f"query/{parameter}" for e in errors), errors


def test_the_story_lists_every_event_verifies_the_chain_and_shows_the_intake(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    # Written as intake writes it: the row, its intent event and its created entry.
    op = insert_operation(database_url, tenant, S.create_pending)
    headers = make_token(database_url, tenant, "r", READ)
    story = client.get(f"/v1/operations/{op}/events", headers=headers).json()
    assert [(e["seq"], e["kind"], e["to_state"]) for e in story["events"]] == [
        (1, "intent_recorded", "create_pending")
    ]
    assert story["chain"] == {"verified": True, "problems": []}
    assert [(a["door"], a["outcome"]) for a in story["intake"]] == [("python", "created")]
    # A history edited behind the store's back no longer verifies, and the route says so.
    with engine_for(database_url).begin() as conn:
        conn.execute(text("ALTER TABLE operation_events DISABLE TRIGGER USER"))
        conn.execute(
            text("UPDATE operation_events SET actor = 'mallory' WHERE operation_id = :op"),
            {"op": op},
        )
        conn.execute(text("ALTER TABLE operation_events ENABLE TRIGGER USER"))
    tampered = client.get(f"/v1/operations/{op}/events", headers=headers).json()
    assert tampered["chain"]["verified"] is False and tampered["chain"]["problems"]


def test_escalations_are_oldest_first_with_counts_by_reason(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    newest = insert_operation(
        database_url, tenant, S.escalated, escalation_reason="unknown_state", updated_at=NOW
    )
    oldest = insert_operation(
        database_url,
        tenant,
        S.result_timed_out,
        escalation_reason="deadline_exceeded",
        updated_at=NOW - timedelta(hours=3),
    )
    middle = insert_operation(
        database_url, tenant, S.awaiting_approval, updated_at=NOW - timedelta(hours=1)
    )
    also = insert_operation(
        database_url,
        tenant,
        S.escalated,
        escalation_reason="unknown_state",
        updated_at=NOW - timedelta(minutes=30),
    )
    insert_operation(database_url, tenant, S.observing)
    insert_operation(database_url, tenant, S.succeeded)
    headers = make_token(database_url, tenant, "r", READ)
    shown = [
        o["operation_id"]
        for page in pages(client, "/v1/escalations?limit=3", headers)
        for o in page["escalations"]
    ]
    assert shown == [str(oldest), str(middle), str(also), str(newest)]
    counts = client.get("/v1/escalations", headers=headers).json()["counts"]
    assert counts == {
        "total": 4,
        "by_reason": {"unknown_state": 2, "deadline_exceeded": 1, "awaiting_approval": 1},
        "by_state": {"escalated": 2, "result_timed_out": 1, "awaiting_approval": 1},
    }


def test_the_escalations_index_covers_exactly_the_states_the_list_shows(database_url: str) -> None:
    # Migration 0010 spells the states out; a state added to the list needs a new revision.
    from tests.integration.test_migrations import string_literals

    with engine_for(database_url).connect() as conn:
        predicate = conn.scalar(
            text(
                "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i JOIN pg_class c "
                "ON c.oid = i.indexrelid WHERE c.relname = 'ix_operations_needs_a_human'"
            )
        )
    assert predicate is not None, "ix_operations_needs_a_human is missing or not partial"
    assert string_literals(str(predicate)) == {s.value for s in NEEDS_A_HUMAN}
