"""A stored result is checked before it is trusted (issue 33, finding 9).

An object replaced in the store with one of the same size, or an inline result edited in
its row, is never served: GET, HEAD and Range reads answer 502 ``result_integrity_failed``
(RFC 9110 section 15.6.3) before any byte, the mismatch is logged at WARNING and recorded
once in the operation's history, and the recorded ``Repr-Digest`` (RFC 9530) never goes
out over bytes it does not describe. Real Postgres, a real file store and a real
S3-compatible server, the API on a real uvicorn.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import secrets
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import text

from jobwarden.api import result_checks
from jobwarden.api.app import create_app
from jobwarden.models.errors import ResultIntegrityError
from jobwarden.models.persistence import store
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.result_rows import result_of
from jobwarden.observability.logs import formatter
from jobwarden.tasks.results.store import ResultStore
from jobwarden.tasks.runtime import current
from tests.api_server import serving
from tests.integration.api_helpers import make_token, tenant_name
from tests.integration.result_helpers import operation_with_result, pattern, run_store
from tests.s3_server import S3Server

TYPE = "tag:jobwarden.dev,2026:problem/"
SIZE = 300_000
DATA = pattern(SIZE)


class Lines(logging.Handler):
    """jobwarden.api's lines, as JSON (the route logs from Starlette's thread pool)."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(formatter("json"))
        self.seen: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append({**json.loads(self.format(record)), "levelno": record.levelno})

    def of(self, operation_id: uuid.UUID) -> list[dict[str, Any]]:
        return [line for line in self.seen if line.get("operation_id") == str(operation_id)]


@pytest.fixture
def lines() -> Iterator[Lines]:
    handler = Lines()
    logger = logging.getLogger("jobwarden.api")
    logger.addHandler(handler)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)


@pytest.fixture(scope="module")
def client(database_url: str) -> Iterator[httpx.Client]:
    with serving(create_app()) as url, httpx.Client(base_url=url, timeout=30) as http:
        yield http


def _reader(url: str, tenant: str) -> dict[str, str]:
    return make_token(url, tenant, "reader", ["read"])


def _integrity_problem(answer: httpx.Response) -> None:
    assert answer.status_code == 502, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    if answer.request.method != "HEAD":
        assert answer.json()["type"] == TYPE + "result_integrity_failed"
    assert "repr-digest" not in answer.headers


def _integrity_events(url: str, op: uuid.UUID) -> list[dict[str, Any]]:
    with transaction(url) as session:
        rows = session.execute(
            text(
                "SELECT excerpt FROM operation_events WHERE operation_id = :op "
                "AND kind = 'result_integrity_failed' ORDER BY seq"
            ),
            {"op": op},
        )
        return [dict(r[0]) for r in rows]


def _same_size_other_bytes(rs: ResultStore, location: str, data: bytes) -> None:
    """Overwrite the object with bytes of the same length, one of them changed."""
    changed = bytearray(data)
    changed[len(data) // 2] ^= 0xFF
    rs.put_stream(rs.url.key_of(location), [bytes(changed)], max_bytes=len(data))


def test_an_object_replaced_by_one_of_the_same_size_is_never_served(
    database_url: str, client: httpx.Client, lines: Lines
) -> None:
    tenant = tenant_name()
    op, location = operation_with_result(database_url, tenant, DATA)
    assert location is not None
    token = _reader(database_url, tenant)
    path = f"/v1/operations/{op}/result"
    # Served and verified once (the check is remembered), then replaced: the new object
    # has another store tag, so the remembered check does not cover it.
    assert client.get(path, headers=token).content == DATA
    _same_size_other_bytes(run_store(), location, DATA)
    _integrity_problem(client.get(path, headers=token))
    _integrity_problem(client.get(path, headers={**token, "Range": "bytes=0-99"}))
    _integrity_problem(client.head(path, headers=token))
    warnings = [line for line in lines.of(op) if line["event"] == "result_integrity_failed"]
    assert len(warnings) == 3 and all(w["levelno"] == logging.WARNING for w in warnings)
    assert not [line for line in lines.seen if line["event"] == "api_unexpected_error"]
    # One event, however many downloads fail alike: a retrying client cannot grow the chain.
    recorded = _integrity_events(database_url, op)
    assert len(recorded) == 1
    assert recorded[0]["location"] == location and "sha256" in recorded[0]["problem"]
    # The event joins the operation's hash chain like any other (DESIGN invariant 6). The
    # helper inserts the result row without a result_collected event: that one is expected.
    with transaction(database_url) as session:
        problems = [p.problem for p in store.verify(session, op)]
    assert problems == ["result bytes are stored, but no result_collected event records them"]


def test_a_range_read_after_the_object_changed_is_refused_not_sliced(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op, location = operation_with_result(database_url, tenant, DATA)
    assert location is not None
    token = {**_reader(database_url, tenant), "Range": "bytes=150000-150009"}
    path = f"/v1/operations/{op}/result"
    first = client.get(path, headers=token)
    assert first.status_code == 206 and first.content == DATA[150_000:150_010]
    _same_size_other_bytes(run_store(), location, DATA)
    _integrity_problem(client.get(path, headers=token))


def test_an_inline_result_edited_in_its_row_is_a_502_not_a_cut_stream(
    database_url: str, client: httpx.Client, lines: Lines
) -> None:
    tenant = tenant_name()
    small = b'{"id": 1}\n{"id": 2}\n'
    op, _ = operation_with_result(database_url, tenant, small, inline=True)
    token = _reader(database_url, tenant)
    path = f"/v1/operations/{op}/result"
    for edited in (b'{"id": 9}\n{"id": 2}\n', b'{"id": 1}\n{"id": 2}\n{"id": 3}\n'):
        with transaction(database_url) as session:
            session.execute(
                text("UPDATE operation_results SET content = :c WHERE operation_id = :op"),
                {"c": edited, "op": op},
            )
        _integrity_problem(client.get(path, headers=token))
        _integrity_problem(client.get(path, headers={**token, "Range": "bytes=-5"}))
    assert not [line for line in lines.seen if line["event"] == "api_unexpected_error"]
    assert len(_integrity_events(database_url, op)) == 1


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    server = S3Server.start(tmp_path_factory.mktemp("moto"))
    try:
        yield server
    finally:
        server.stop()


def _app_reading(store: ResultStore) -> FastAPI:
    app = create_app()
    app.state.runtime = lambda: dataclasses.replace(current(), result_store=store)
    return app


def test_an_s3_object_replaced_by_one_of_the_same_size_is_never_served(
    database_url: str, s3_server: S3Server
) -> None:
    bucket = f"jobwarden-test-{secrets.token_hex(4)}"
    s3_server.create_bucket(bucket)
    s3 = ResultStore.from_url(f"s3://{bucket}/results", environ=s3_server.environ())
    tenant = tenant_name()
    op, location = operation_with_result(database_url, tenant, DATA, store=s3)
    assert location is not None
    token = _reader(database_url, tenant)
    with serving(_app_reading(s3)) as url, httpx.Client(base_url=url, timeout=30) as http:
        path = f"/v1/operations/{op}/result"
        ranged = http.get(path, headers={**token, "Range": "bytes=0-9"})
        assert ranged.status_code == 206 and ranged.content == DATA[:10]
        _same_size_other_bytes(s3, location, DATA)
        _integrity_problem(http.get(path, headers={**token, "Range": "bytes=0-9"}))
        _integrity_problem(http.get(path, headers=token))
    assert len(_integrity_events(database_url, op)) == 1


def test_bytes_changed_during_a_whole_read_hold_back_the_last_chunk_and_raise(
    database_url: str,
) -> None:
    # The tag check cannot see an in-place edit that keeps it; the streamed digest can.
    tenant = tenant_name()
    op, _ = operation_with_result(database_url, tenant, DATA)
    with transaction(database_url) as session:
        result = result_of(session, op)
    assert result is not None
    changed = [DATA[:100_000], DATA[100_000:200_000], b"\0" * 100_000]
    passed: list[bytes] = []
    with pytest.raises(ResultIntegrityError):
        passed.extend(result_checks.held_back(current(), op, result, iter(changed)))
    assert passed == changed[:2]  # the last chunk never left
    whole = [DATA[:100_000], DATA[100_000:]]
    assert list(result_checks.held_back(current(), op, result, iter(whole))) == whole
    assert len(_integrity_events(database_url, op)) == 1


def test_the_whole_read_is_hashed_as_it_streams_with_the_recorded_digest(
    database_url: str, client: httpx.Client
) -> None:
    tenant = tenant_name()
    op, _ = operation_with_result(database_url, tenant, DATA)
    answer = client.get(f"/v1/operations/{op}/result", headers=_reader(database_url, tenant))
    assert answer.status_code == 200
    assert hashlib.sha256(answer.content).hexdigest() == hashlib.sha256(DATA).hexdigest()
