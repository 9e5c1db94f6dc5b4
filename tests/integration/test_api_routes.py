"""Every /v1 route, enumerated from the app itself, so a new one cannot skip these rules:
it needs a token (401 without, with an RFC 6750 Bearer challenge), it needs its own scope
(403 with a token holding every other), another tenant's operation is a 404 exactly like
an unknown one and is left unchanged, and docs/api.md lists it.

The webhook receiver is the one route without a token: the provider's signature
authenticates it (tests/integration/test_webhook_receiver.py).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from jobwarden.api.app import ROUTERS, create_app
from jobwarden.models.states import OperationState as S
from tests.api_server import serving
from tests.integration.api_helpers import insert_operation, load, make_token, tenant_name

DOCS = (Path(__file__).resolve().parents[2] / "docs" / "api.md").read_text(encoding="utf-8")
TYPE = "tag:jobwarden.dev,2026:problem/"
SCOPES = ["submit", "read", "cancel", "approve", "decide", "pause"]
ROUTES = {
    f"{method} {route.path}": route
    for router in ROUTERS
    for route in router.routes
    # /v1/ only: the receipt key at /.well-known/ is public on purpose (test_receipts.py).
    if isinstance(route, APIRoute) and route.path.startswith("/v1/")
    for method in sorted(route.methods or ())
}
# Signed by the provider instead (DESIGN: webhooks are verified as the contract says).
UNAUTHENTICATED = {"POST /v1/webhooks/{provider}"}
# A body each route accepts, so a refusal can only come from the token.
BODIES: dict[str, Any] = {
    "POST /v1/operations": {"provider": "sandbox", "command": {"kind": "export"}},
    "POST /v1/operations/{operation_id}/cancel": {"reason": "not needed"},
    "POST /v1/operations/{operation_id}/decisions": {"option": "abandon"},
    "POST /v1/operations/{operation_id}/pause": {"reason": "incident"},
    "POST /v1/providers/{provider}/pause": {"reason": "incident"},
    "POST /v1/operations/{operation_id}/follow-ups": {"kind": "capture", "command": {}},
    "PUT /v1/schedules/{name}": {
        "cron": "0 3 * * *",
        "provider": "sandbox",
        "command": {"kind": "export"},
    },
    "POST /v1/schedules/{name}/backfill": {
        "from": "2026-01-01T00:00:00Z",
        "to": "2026-01-02T00:00:00Z",
    },
}


def _scope(route: APIRoute) -> str | None:
    names = [getattr(d.call, "__name__", "") for d in route.dependant.dependencies]
    scopes = [n.removeprefix("require_") for n in names if n.startswith("require_")]
    # A route that checks its token itself names its scope in its OpenAPI extension.
    scopes += [s for s in [(route.openapi_extra or {}).get("x-required-scope")] if s]
    assert len(scopes) <= 1, f"{route.path} requires {scopes}"
    return scopes[0] if scopes else None


@pytest.fixture(scope="module")
def client(database_url: str) -> Iterator[httpx.Client]:
    with serving(create_app()) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http


def _send(
    client: httpx.Client, label: str, op: uuid.UUID, headers: dict[str, str], fingerprint: str
) -> httpx.Response:
    method, path = label.split(" ")
    url = path.replace("{operation_id}", str(op)).replace("{provider}", "sandbox")
    url = url.replace("{name}", "nightly").replace("{pause_id}", str(uuid.uuid4()))
    body = BODIES.get(label)
    if label.endswith("/approvals"):
        body = {"fingerprint": fingerprint}
    sent = {**headers, "Idempotency-Key": uuid.uuid4().hex}
    return client.request(method, url, json=body, headers=sent)


def _problem(answer: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    if answer.request.method == "HEAD":
        # RFC 9110 section 9.3.2: the GET answer's headers without its body; the problem's
        # members are checked on the GET of the same route.
        return {}
    body: dict[str, Any] = answer.json()
    assert body["type"] == TYPE + kind
    return body


def test_the_routes_enumerated_are_every_v1_route_of_the_openapi_document() -> None:
    document = create_app().openapi()
    documented = {
        f"{method.upper()} {path}"
        for path, item in document["paths"].items()
        if path.startswith("/v1/")
        for method in item
    }
    assert documented == set(ROUTES)


def test_every_v1_route_but_the_webhook_receiver_requires_one_scope() -> None:
    unscoped = {label for label, route in ROUTES.items() if _scope(route) is None}
    assert unscoped == UNAUTHENTICATED
    assert {_scope(r) for r in ROUTES.values()} - {None} == set(SCOPES)


def test_every_route_that_takes_a_token_names_the_bearer_scheme_in_the_document() -> None:
    # POST /v1/operations reads its bearer token itself (no Depends), so its security
    # requirement is spelt by hand: a client generator must still send the token.
    document = create_app().openapi()
    unnamed = {
        label
        for label in set(ROUTES) - UNAUTHENTICATED
        for method, path in [label.split(" ")]
        if document["paths"][path][method.lower()].get("security") != [{"HTTPBearer": []}]
    }
    assert unnamed == set()


@pytest.mark.parametrize("label", sorted(ROUTES))
def test_docs_api_md_lists_every_route(label: str) -> None:
    method, path = label.split(" ")
    shown = re.escape(path.replace("{operation_id}", "{id}"))
    assert re.search(rf"{method} {shown}(?![\w/{{}}])", DOCS), f"add {label} to docs/api.md"


@pytest.mark.parametrize("label", sorted(set(ROUTES) - UNAUTHENTICATED))
def test_a_route_refuses_a_missing_token_and_a_token_without_its_scope(
    database_url: str, client: httpx.Client, label: str
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.awaiting_approval)
    before = load(database_url, op)
    scope = _scope(ROUTES[label])
    missing = _send(client, label, op, {}, before.request_fingerprint)
    _problem(missing, 401, "unauthenticated")
    assert missing.headers["www-authenticate"] == "Bearer"
    others = make_token(database_url, tenant, "others", [s for s in SCOPES if s != scope])
    refused = _problem(
        _send(client, label, op, others, before.request_fingerprint), 403, "insufficient_scope"
    )
    assert refused.get("required_scope", scope) == scope
    after = load(database_url, op)
    assert (after.version, after.state, after.event_count) == (
        before.version,
        before.state,
        before.event_count,
    )


@pytest.mark.parametrize("label", sorted(label for label in ROUTES if "{operation_id}" in label))
def test_another_tenants_operation_is_a_404_like_an_unknown_one_on_every_route(
    database_url: str, client: httpx.Client, label: str
) -> None:
    owner = tenant_name()
    stranger = make_token(database_url, tenant_name(), "mallory", SCOPES, allow_self_approval=True)
    for state in (S.awaiting_approval, S.escalated):
        op = insert_operation(database_url, owner, state, escalation_reason="unknown_state")
        before = load(database_url, op)
        foreign = _problem(
            _send(client, label, op, stranger, before.request_fingerprint), 404, "not_found"
        )
        unknown = _problem(
            _send(client, label, uuid.uuid4(), stranger, before.request_fingerprint),
            404,
            "not_found",
        )
        assert foreign.get("detail") == unknown.get("detail")
        after = load(database_url, op)
        assert (after.version, after.state, after.event_count) == (
            before.version,
            before.state,
            before.event_count,
        )


def test_the_lists_filtered_by_another_tenants_key_or_job_id_find_nothing(
    database_url: str, client: httpx.Client
) -> None:
    owner = tenant_name()
    op = insert_operation(database_url, owner, S.escalated, escalation_reason="unknown_state")
    stored = load(database_url, op)
    stranger = make_token(database_url, tenant_name(), "mallory", ["read"])
    for query in (
        {"idempotency_key": stored.idempotency_key},
        {"remote_job_id": str(stored.remote_job_id)},
        {"state": "escalated", "reason": "unknown_state"},
    ):
        listed = client.get("/v1/operations", params=query, headers=stranger)
        assert listed.status_code == 200 and listed.json()["operations"] == []
    waiting = client.get("/v1/escalations", headers=stranger).json()
    assert waiting["escalations"] == [] and waiting["counts"]["total"] == 0
    reader = make_token(database_url, owner, "owner", ["read"])
    found = client.get(
        "/v1/operations", params={"idempotency_key": stored.idempotency_key}, headers=reader
    )
    assert [o["operation_id"] for o in found.json()["operations"]] == [str(op)]
