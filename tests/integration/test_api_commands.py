"""Commands validated per provider over HTTP (issue 10 item 6), with the shipped
sandbox_export contract: two spellings of one intent are one fingerprint (the second
POST replays), a float where the schema says integer minor units is a 422 whose
``errors[].path`` is an RFC 6901 JSON Pointer into the submission, and nothing is stored.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from jobwarden.api.app import create_app
from jobwarden.api.auth import Scope, create_token
from jobwarden.models.persistence.db import transaction
from tests.api_server import serving
from tests.integration.test_command_intake import MINIMAL, SPELLED_OUT, VALIDATED


@pytest.fixture(scope="module")
def api(database_url: str) -> Iterator[str]:
    with serving(create_app()) as url:
        yield url


@pytest.fixture
def tenant_and_bearer(database_url: str) -> tuple[str, str]:
    tenant = f"cmd-{secrets.token_hex(4)}"
    made = create_token(database_url, tenant=tenant, name="pytest", scopes=[Scope.submit])
    return tenant, made.token


def post(api: str, bearer: str, key: str, command: dict[str, Any]) -> httpx.Response:
    return httpx.post(
        f"{api}/v1/operations",
        content=json.dumps({"provider": "sandbox_export", "command": command}),
        headers={
            "Authorization": f"Bearer {bearer}",
            "Idempotency-Key": key,
            "Content-Type": "application/json",
        },
        timeout=30,
    )


def stored_commands(database_url: str, tenant: str) -> list[Any]:
    with transaction(database_url) as session:
        return list(
            session.scalars(text("SELECT command FROM operations WHERE tenant = :t"), {"t": tenant})
        )


def test_two_spellings_of_one_intent_over_http_are_one_fingerprint_and_one_operation(
    api: str, database_url: str, tenant_and_bearer: tuple[str, str]
) -> None:
    tenant, bearer = tenant_and_bearer
    key = secrets.token_hex(8)
    first = post(api, bearer, key, MINIMAL)
    second = post(api, bearer, key, SPELLED_OUT)  # fields reordered, every default written
    assert first.status_code == 201 and "idempotent-replayed" not in first.headers
    assert second.status_code == 201 and second.headers["idempotent-replayed"] == "true"
    assert second.json() == first.json()
    assert stored_commands(database_url, tenant) == [VALIDATED]


@pytest.mark.parametrize(
    ("command", "pointer"),
    [
        # 10.10 where the schema says integer minor units (1010).
        (
            {**MINIMAL, "spend_cap": {"amount": 10.10, "currency": "EUR"}},
            "/command/spend_cap/amount",
        ),
        # RFC 6901 section 3: "~" is written "~0" and "/" is written "~1" in a reference token.
        ({**MINIMAL, "a/b~c": 1}, "/command/a~1b~0c"),
    ],
)
def test_a_refused_command_is_422_with_a_json_pointer_to_the_failing_value_and_stores_nothing(
    api: str,
    database_url: str,
    tenant_and_bearer: tuple[str, str],
    command: dict[str, Any],
    pointer: str,
) -> None:
    tenant, bearer = tenant_and_bearer
    answer = post(api, bearer, secrets.token_hex(8), command)
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    problem = answer.json()
    assert problem["type"] == "tag:jobwarden.dev,2026:problem/invalid_submission"
    assert [e["path"] for e in problem["errors"]] == [pointer]
    assert stored_commands(database_url, tenant) == []
