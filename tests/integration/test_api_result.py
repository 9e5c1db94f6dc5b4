"""GET/HEAD /v1/operations/{id}/result against real Postgres and a real result store.

The bytes are written through ``ResultStore.put_stream`` into the run's file store (one
test uses a real S3-compatible server); the API runs on a real uvicorn. Headers are
checked as a client would: ``Repr-Digest`` decoded per RFC 9530 section 3, ranges per
RFC 9110 section 14.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from jobwarden.api.app import create_app
from jobwarden.models.results.objects import object_key
from jobwarden.models.states import OperationState as S
from jobwarden.tasks.results.store import ResultStore
from jobwarden.tasks.runtime import current
from tests.api_server import serving
from tests.integration.api_helpers import insert_operation, make_token, tenant_name
from tests.integration.result_helpers import (
    insert_result_row,
    operation_with_result,
    pattern,
    run_store,
)
from tests.s3_server import S3Server

TYPE = "tag:jobwarden.dev,2026:problem/"
SIZE = 300_000  # past the 64 KiB inline bound, several store chunks' worth of ranges
DATA = pattern(SIZE)


@pytest.fixture(scope="module")
def client(database_url: str) -> Iterator[httpx.Client]:
    with serving(create_app()) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http


def _reader(url: str, tenant: str) -> dict[str, str]:
    return make_token(url, tenant, "reader", ["read"])


def _problem(answer: httpx.Response, status: int, kind: str) -> dict[str, object]:
    assert answer.status_code == status, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert isinstance(body, dict) and body["type"] == TYPE + kind
    return body


def _digest_of(answer: httpx.Response) -> bytes:
    # RFC 9530 section 3: a Dictionary whose sha-256 member is a Byte Sequence, :base64:.
    field = answer.headers["repr-digest"]
    assert field.startswith("sha-256=:") and field.endswith(":"), field
    return base64.b64decode(field[len("sha-256=:") : -1], validate=True)


@pytest.fixture(scope="module")
def stored(database_url: str) -> tuple[str, str, dict[str, str]]:
    """One tenant's succeeded operation with a 300 kB stored result: (tenant, path, token)."""
    tenant = tenant_name()
    op, _ = operation_with_result(database_url, tenant, DATA)
    return tenant, f"/v1/operations/{op}/result", _reader(database_url, tenant)


def test_a_whole_result_streams_with_its_length_type_digest_and_etag(
    client: httpx.Client, stored: tuple[str, str, dict[str, str]]
) -> None:
    _, path, token = stored
    answer = client.get(path, headers=token)
    assert answer.status_code == 200, answer.text
    assert answer.content == DATA
    assert answer.headers["content-length"] == str(SIZE)
    assert answer.headers["content-type"] == "application/x-ndjson"
    assert _digest_of(answer) == hashlib.sha256(DATA).digest()
    assert answer.headers["etag"] == f'"{hashlib.sha256(DATA).hexdigest()}"'
    assert answer.headers["accept-ranges"] == "bytes"
    assert answer.headers["jobwarden-result-validated"] == "true"
    assert answer.headers["x-content-type-options"] == "nosniff"
    assert answer.headers["content-disposition"].startswith("attachment")


@pytest.mark.parametrize(
    ("header", "start", "end"),
    [
        ("bytes=0-99", 0, 100),  # the first bytes
        ("bytes=100000-200000", 100_000, 200_001),  # the middle, across store chunks
        ("bytes=-1000", SIZE - 1000, SIZE),  # a suffix
        ("bytes=299990-", 299_990, SIZE),  # open-ended
        ("bytes=299990-999999", 299_990, SIZE),  # a last-pos past the end is clipped
    ],
)
def test_a_range_request_answers_206_with_exactly_that_slice(
    client: httpx.Client, stored: tuple[str, str, dict[str, str]], header: str, start: int, end: int
) -> None:
    _, path, token = stored
    answer = client.get(path, headers={**token, "Range": header})
    assert answer.status_code == 206, answer.text
    assert answer.content == DATA[start:end]
    assert answer.headers["content-range"] == f"bytes {start}-{end - 1}/{SIZE}"
    assert answer.headers["content-length"] == str(end - start)
    # The representation's digest, not the part's (RFC 9530 section 3).
    assert _digest_of(answer) == hashlib.sha256(DATA).digest()


def test_a_range_past_the_end_is_416_naming_the_size(
    client: httpx.Client, stored: tuple[str, str, dict[str, str]]
) -> None:
    _, path, token = stored
    answer = client.get(path, headers={**token, "Range": f"bytes={SIZE}-"})
    _problem(answer, 416, "range_not_satisfiable")
    assert answer.headers["content-range"] == f"bytes */{SIZE}"


@pytest.mark.parametrize("header", ["bytes=0-1,10-20", "bytes=20-10", "lines=1-2", "bytes=x"])
def test_several_ranges_or_a_malformed_range_are_ignored_and_the_whole_is_sent(
    client: httpx.Client, stored: tuple[str, str, dict[str, str]], header: str
) -> None:
    _, path, token = stored
    answer = client.get(path, headers={**token, "Range": header})
    assert answer.status_code == 200 and answer.content == DATA
    assert "content-range" not in answer.headers


def test_if_range_with_another_etag_sends_the_whole_result(
    client: httpx.Client, stored: tuple[str, str, dict[str, str]]
) -> None:
    _, path, token = stored
    etag = f'"{hashlib.sha256(DATA).hexdigest()}"'
    same = client.get(path, headers={**token, "Range": "bytes=0-9", "If-Range": etag})
    assert same.status_code == 206 and same.content == DATA[:10]
    other = client.get(path, headers={**token, "Range": "bytes=0-9", "If-Range": '"old"'})
    assert other.status_code == 200 and other.content == DATA


def test_head_answers_the_same_headers_without_a_body(
    client: httpx.Client, stored: tuple[str, str, dict[str, str]]
) -> None:
    _, path, token = stored
    answer = client.head(path, headers=token)
    assert answer.status_code == 200 and answer.content == b""
    assert answer.headers["content-length"] == str(SIZE)
    assert _digest_of(answer) == hashlib.sha256(DATA).digest()
    ranged = client.head(path, headers={**token, "Range": "bytes=-10"})
    assert ranged.status_code == 206
    assert ranged.headers["content-range"] == f"bytes {SIZE - 10}-{SIZE - 1}/{SIZE}"


def test_an_inline_result_is_served_from_the_row_ranges_included(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    small = b'{"id": 1}\n{"id": 2}\n'
    op, _ = operation_with_result(database_url, tenant, small, inline=True, content_type=None)
    token = _reader(database_url, tenant)
    whole = client.get(f"/v1/operations/{op}/result", headers=token)
    assert whole.status_code == 200 and whole.content == small
    assert whole.headers["content-type"] == "application/octet-stream"
    assert _digest_of(whole) == hashlib.sha256(small).digest()
    part = client.get(f"/v1/operations/{op}/result", headers={**token, "Range": "bytes=-10"})
    assert part.status_code == 206 and part.content == small[-10:]


def test_another_tenants_result_is_a_404_like_an_unknown_operation(
    database_url: str, client: httpx.Client, stored: tuple[str, str, dict[str, str]]
) -> None:
    _, path, _ = stored
    stranger = _reader(database_url, tenant_name())
    foreign = _problem(client.get(path, headers=stranger), 404, "not_found")
    unknown = _problem(
        client.get(f"/v1/operations/{secrets.token_hex(16)}/result", headers=stranger),
        404,
        "not_found",
    )
    assert foreign["detail"] == unknown["detail"]


def test_a_token_without_the_read_scope_is_refused(
    database_url: str, client: httpx.Client, stored: tuple[str, str, dict[str, str]]
) -> None:
    tenant, path, _ = stored
    submitter = make_token(database_url, tenant, "submitter", ["submit"])
    _problem(client.get(path, headers=submitter), 403, "insufficient_scope")


@pytest.mark.parametrize("state", [S.observing, S.failed, S.result_validation_failed])
def test_an_operation_without_a_result_is_a_404_no_result_naming_its_state(
    database_url: str, client: httpx.Client, state: S
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, state)
    answer = client.get(f"/v1/operations/{op}/result", headers=_reader(database_url, tenant))
    assert state.value in str(_problem(answer, 404, "no_result")["detail"])


@pytest.mark.parametrize(
    ("state", "label"), [(S.result_validation_failed, "false"), (S.result_accepted, "accepted")]
)
def test_a_kept_invalid_result_is_served_labelled_as_what_it_is(
    database_url: str, client: httpx.Client, state: S, label: str
) -> None:
    tenant = tenant_name()
    op, _ = operation_with_result(database_url, tenant, DATA[:70_000], state=state)
    answer = client.get(f"/v1/operations/{op}/result", headers=_reader(database_url, tenant))
    assert answer.status_code == 200 and answer.content == DATA[:70_000]
    assert answer.headers["jobwarden-result-validated"] == label


def test_a_deleted_object_is_410_result_missing_for_get_and_head(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op, location = operation_with_result(database_url, tenant, DATA[:80_000])
    assert location is not None
    run_store().delete(location)
    token = _reader(database_url, tenant)
    _problem(client.get(f"/v1/operations/{op}/result", headers=token), 410, "result_missing")
    head = client.head(f"/v1/operations/{op}/result", headers=token)
    assert head.status_code == 410


def test_an_object_replaced_by_one_of_another_size_is_410_not_served(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op, location = operation_with_result(database_url, tenant, DATA[:80_000])
    assert location is not None
    rs = run_store()
    rs.put_stream(rs.url.key_of(location), [b"something else"], max_bytes=100)
    answer = client.get(f"/v1/operations/{op}/result", headers=_reader(database_url, tenant))
    _problem(answer, 410, "result_missing")


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server.start(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        server.stop()


def _app_reading(store: ResultStore) -> FastAPI:
    """The API with its runtime reading results from ``store`` (the rest as usual)."""
    app = create_app()
    app.state.runtime = lambda: dataclasses.replace(current(), result_store=store)
    return app


def test_a_ranged_read_from_an_s3_store_is_exactly_that_slice(
    database_url: str, s3_server: S3Server
) -> None:
    bucket = f"jobwarden-test-{secrets.token_hex(4)}"
    s3_server.create_bucket(bucket)
    s3 = ResultStore.from_url(f"s3://{bucket}/results", environ=s3_server.environ())
    tenant = tenant_name()
    op, _ = operation_with_result(database_url, tenant, DATA, store=s3)
    app = _app_reading(s3)
    token = {**_reader(database_url, tenant), "Range": "bytes=123456-234567"}
    with serving(app) as url, httpx.Client(base_url=url, timeout=30) as http:
        answer = http.get(f"/v1/operations/{op}/result", headers=token)
    assert answer.status_code == 206 and answer.content == DATA[123_456:234_568]


def test_a_result_store_that_is_down_is_503_with_retry_after(
    database_url: str, tmp_path: Path
) -> None:
    down = S3Server.start(tmp_path)
    down.stop()
    dead = ResultStore.from_url(
        "s3://jobwarden-down/results", environ=down.environ(), timeout_seconds=2, max_retries=0
    )
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.succeeded)
    where = dead.url.location(object_key(tenant, str(op)))
    insert_result_row(database_url, op, data=DATA[:70_000], location=where)
    with serving(_app_reading(dead)) as url, httpx.Client(base_url=url, timeout=30) as http:
        answer = http.get(f"/v1/operations/{op}/result", headers=_reader(database_url, tenant))
    _problem(answer, 503, "result_store_unavailable")
    assert int(answer.headers["retry-after"]) > 0
