"""Both doors name where a result is: ``result`` in GET /v1/operations/{id} and in the MCP
``get_operation`` (the same OperationView), with how to check it and where to download it."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from jobwarden.api.app import create_app
from jobwarden.models.states import OperationState as S
from tests.api_server import serving
from tests.integration.api_helpers import insert_operation, make_token, tenant_name
from tests.integration.result_helpers import operation_with_result, pattern
from tests.integration.test_mcp_door import _answer, _in_process, _token

DATA = pattern(70_000)


@pytest.fixture(scope="module")
def client(database_url: str) -> Iterator[httpx.Client]:
    with serving(create_app()) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http


def _view(client: httpx.Client, url: str, tenant: str, op: object) -> dict[str, Any]:
    answer = client.get(f"/v1/operations/{op}", headers=make_token(url, tenant, "r", ["read"]))
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def test_a_stored_result_is_named_with_its_location_digest_and_download_path(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op, location = operation_with_result(database_url, tenant, DATA)
    assert _view(client, database_url, tenant, op)["result"] == {
        "location": location,
        "sha256": hashlib.sha256(DATA).hexdigest(),
        "size_bytes": len(DATA),
        "content_type": "application/x-ndjson",
        "validated": True,
        "download": f"/v1/operations/{op}/result",
    }


def test_an_inline_result_has_no_location_and_a_kept_invalid_one_is_not_validated(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    inline, _ = operation_with_result(database_url, tenant, b"small", inline=True)
    kept, _ = operation_with_result(database_url, tenant, DATA, state=S.result_validation_failed)
    accepted, _ = operation_with_result(database_url, tenant, DATA, state=S.result_accepted)
    shown = _view(client, database_url, tenant, inline)["result"]
    assert shown["location"] is None and shown["size_bytes"] == 5
    assert _view(client, database_url, tenant, kept)["result"]["validated"] is False
    assert _view(client, database_url, tenant, accepted)["result"]["validated"] == "accepted"


def test_an_operation_without_a_result_shows_result_null(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.observing)
    assert _view(client, database_url, tenant, op)["result"] is None


def test_the_mcp_get_operation_names_the_result_as_the_http_view_does(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op, _ = operation_with_result(database_url, tenant, DATA)

    async def call() -> dict[str, Any]:
        async with _in_process(database_url, _token(database_url, tenant)) as mcp:
            return _answer(await mcp.call_tool("get_operation", {"operation_id": str(op)}))

    seen = anyio.run(call)
    assert seen["result"] == _view(client, database_url, tenant, op)["result"]
    assert seen["result"]["download"] == f"/v1/operations/{op}/result"
