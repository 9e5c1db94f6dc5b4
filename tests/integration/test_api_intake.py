"""POST /v1/operations over real HTTP (uvicorn on a free port), Postgres and Redis.

Conventions checked: draft-ietf-httpapi-idempotency-key-header (400 missing, 422
reused with another payload, 409 in progress), RFC 9457 problem details, RFC 6750
bearer challenges, W3C Trace Context traceparent.
"""

from __future__ import annotations

import json
import secrets
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import psycopg
import pytest
from redis import Redis
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from jobwarden.api.app import create_app
from jobwarden.api.auth import Scope, create_token
from jobwarden.config.settings import get_settings
from jobwarden.models.persistence import api_store
from jobwarden.models.persistence.db import transaction
from jobwarden.tasks.humans import revocations
from tests.api_server import serving

COMMAND = {"kind": "export", "behaviour": {"polls_to_finish": 1}}
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture(scope="module")
def api(database_url: str) -> Iterator[str]:
    with serving(create_app()) as url:
        yield url


def token(database_url: str, *scopes: Scope, tenant: str | None = None) -> str:
    return create_token(
        database_url,
        tenant=tenant or f"t-{secrets.token_hex(4)}",
        name=f"n-{secrets.token_hex(4)}",
        scopes=scopes or (Scope.submit, Scope.read),
    ).token


def post(
    api: str,
    bearer: str | None,
    body: object = None,
    *,
    key: str | None = None,
    headers: dict[str, str] | None = None,
    content: bytes | None = None,
) -> httpx.Response:
    sent = dict(headers or {})
    if bearer is not None:
        sent["Authorization"] = f"Bearer {bearer}"
    if key is not None:
        sent["Idempotency-Key"] = key
    if content is None:
        content = json.dumps(
            {"provider": "sandbox", "command": COMMAND} if body is None else body
        ).encode()
        sent.setdefault("Content-Type", "application/json")
    return httpx.post(f"{api}/v1/operations", content=content, headers=sent, timeout=30)


def assert_problem(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body: dict[str, Any] = response.json()
    assert body["type"] == f"tag:jobwarden.dev,2026:problem/{kind}"
    assert body["status"] == status and body["title"] and body["detail"]
    assert "Traceback" not in response.text
    return body


def row_text(database_url: str, operation_id: str) -> str:
    with transaction(database_url) as session:
        value = session.scalar(
            text("SELECT to_jsonb(o)::text FROM operations o WHERE operation_id = :id"),
            {"id": operation_id},
        )
    assert value is not None
    return str(value)


def intake_rows(database_url: str, tenant_key: tuple[str, str]) -> list[api_store.IntakeEntry]:
    with transaction(database_url) as session:
        return api_store.intake_for_key(session, *tenant_key)


def tenant_of(database_url: str, bearer: str) -> str:
    from jobwarden.api.auth import secret_hash

    with transaction(database_url) as session:
        record = api_store.token_by_hash(session, secret_hash(bearer))
    assert record is not None
    return record.tenant


# -- the Idempotency-Key draft --------------------------------------------------------


def test_a_post_without_an_idempotency_key_is_a_400_problem(api: str, database_url: str) -> None:
    assert_problem(post(api, token(database_url)), 400, "missing_idempotency_key")


def test_a_new_submission_is_201_with_location_links_and_its_trace_id(
    api: str, database_url: str
) -> None:
    answer = post(api, token(database_url), key=secrets.token_hex(8))
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert body["outcome"] == "created" and body["state"] == "create_pending"
    assert answer.headers["location"] == f"/v1/operations/{body['operation_id']}"
    assert body["links"]["self"] == answer.headers["location"]
    assert len(body["fingerprint"]) == 64 and len(body["trace_id"]) == 32
    assert answer.headers["traceparent"].split("-")[1] == body["trace_id"]
    assert "idempotent-replayed" not in answer.headers


def test_a_replay_returns_the_original_status_and_body_marked_in_a_header(
    api: str, database_url: str
) -> None:
    bearer, key = token(database_url), secrets.token_hex(8)
    first = post(api, bearer, key=key)
    # A quoted sf-string key (the draft's syntax) names the same key as the bare one.
    again = post(api, bearer, key=f'"{key}"')
    assert again.status_code == first.status_code == 201
    assert again.content == first.content
    assert again.headers["location"] == first.headers["location"]
    assert again.headers["idempotent-replayed"] == "true"


def test_a_changed_body_under_the_same_key_is_422_and_the_stored_row_is_unchanged(
    api: str, database_url: str
) -> None:
    bearer, key = token(database_url), secrets.token_hex(8)
    first = post(api, bearer, key=key).json()
    before = row_text(database_url, first["operation_id"])
    changed = post(api, bearer, {"provider": "sandbox", "command": {"kind": "other"}}, key=key)
    problem = assert_problem(changed, 422, "idempotency_key_reused")
    assert problem["operation_id"] == first["operation_id"]
    assert problem["fingerprint"] != first["fingerprint"]
    assert row_text(database_url, first["operation_id"]) == before


def test_twenty_concurrent_posts_with_one_key_make_one_operation(
    api: str, database_url: str
) -> None:
    bearer, key = token(database_url), secrets.token_hex(8)
    barrier = threading.Barrier(20)
    answers: list[httpx.Response] = []
    lock = threading.Lock()

    def one() -> None:
        barrier.wait(timeout=30)
        response = post(api, bearer, key=key)
        with lock:
            answers.append(response)

    threads = [threading.Thread(target=one) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(answers) == 20
    created = [
        a for a in answers if a.status_code == 201 and "idempotent-replayed" not in a.headers
    ]
    replays = [a for a in answers if a.headers.get("idempotent-replayed") == "true"]
    busy = [a for a in answers if a.status_code == 409]
    assert len(created) == 1 and len(created) + len(replays) + len(busy) == 20
    assert all(a.status_code == 201 for a in replays)  # the original answer's status code
    assert {a.content for a in replays} <= {created[0].content}
    tenant = tenant_of(database_url, bearer)
    with transaction(database_url) as session:
        count = session.scalar(
            text("SELECT count(*) FROM operations WHERE tenant = :t AND idempotency_key = :k"),
            {"t": tenant, "k": key},
        )
    assert count == 1
    assert len(intake_rows(database_url, (tenant, key))) == 20


def test_another_key_for_the_same_source_event_answers_200_with_the_existing_operation(
    api: str, database_url: str
) -> None:
    bearer, event = token(database_url), secrets.token_hex(6)
    body = {"provider": "sandbox", "command": COMMAND, "source_event_id": event}
    first = post(api, bearer, body, key=secrets.token_hex(8)).json()
    second = post(api, bearer, body, key=secrets.token_hex(8))
    assert second.status_code == 200, second.text
    assert second.json()["outcome"] == "duplicate_event"
    assert second.json()["operation_id"] == first["operation_id"]
    assert "location" not in second.headers


# -- tenants and tokens ---------------------------------------------------------------


def test_a_tenant_in_the_body_is_refused_because_the_token_names_it(
    api: str, database_url: str
) -> None:
    body = {"provider": "sandbox", "command": COMMAND, "tenant": "someone-else"}
    problem = assert_problem(
        post(api, token(database_url), body, key=secrets.token_hex(8)), 422, "invalid_request"
    )
    assert problem["errors"][0]["path"] == "/tenant"


def test_two_tenants_using_the_same_key_get_two_operations(api: str, database_url: str) -> None:
    key = secrets.token_hex(8)
    one = post(api, token(database_url, tenant="tenant-a-" + key), key=key)
    two = post(api, token(database_url, tenant="tenant-b-" + key), key=key)
    assert one.status_code == two.status_code == 201
    assert one.json()["operation_id"] != two.json()["operation_id"]
    # The tenant is part of the fingerprint, so the same body differs across tenants.
    assert one.json()["fingerprint"] != two.json()["fingerprint"]


def test_a_read_only_token_cannot_submit(api: str, database_url: str) -> None:
    problem = assert_problem(
        post(api, token(database_url, Scope.read), key=secrets.token_hex(8)),
        403,
        "insufficient_scope",
    )
    assert problem["required_scope"] == "submit"


@pytest.mark.parametrize(
    ("headers", "content"),
    [
        ({}, b'{"provider": "sandbox", "command": {}}'),  # no Idempotency-Key: 400 otherwise
        ({"Content-Type": "text/plain"}, b"{}"),  # 415 otherwise
        ({"Content-Type": "application/json"}, b"{not json"),  # 400 otherwise
    ],
    ids=["no-key", "media-type", "malformed"],
)
def test_the_token_is_judged_before_the_headers_and_the_body(
    api: str, database_url: str, headers: dict[str, str], content: bytes
) -> None:
    # The route reads headers and body before its one trip to a worker thread, where the
    # token is checked: a refusal of them must still wait for the token's answer.
    key = None if not headers else secrets.token_hex(8)
    for bearer, status, kind in (
        (None, 401, "unauthenticated"),
        ("jw_unknown-token", 401, "unauthenticated"),
        (token(database_url, Scope.read), 403, "insufficient_scope"),
    ):
        answer = post(api, bearer, key=key, headers=headers, content=content)
        assert_problem(answer, status, kind)


@pytest.mark.parametrize(
    "bearer", [None, "jw_unknown-token", "not-a-jobwarden-token"], ids=["none", "unknown", "alien"]
)
def test_a_missing_or_unknown_token_is_401_with_a_bearer_challenge(
    api: str, bearer: str | None
) -> None:
    response = post(api, bearer, key=secrets.token_hex(8))
    assert_problem(response, 401, "unauthenticated")
    assert response.headers["www-authenticate"] == "Bearer"


def test_a_revoked_token_is_401(api: str, database_url: str) -> None:
    bearer = token(database_url)
    assert post(api, bearer, key=secrets.token_hex(8)).status_code == 201
    from jobwarden.api.auth import secret_hash

    with transaction(database_url) as session:
        record = api_store.token_by_hash(session, secret_hash(bearer))
        assert record is not None
    # As `jobwarden tokens revoke` does: committed, then announced to every API process's
    # token cache (tests/integration/test_api_token_cache.py).
    settings = get_settings()
    redis = Redis.from_url(settings.redis_url)
    try:
        assert revocations.revoke(database_url, redis, settings.key_prefix, record.token_id)
    finally:
        redis.close()
    assert_problem(post(api, bearer, key=secrets.token_hex(8)), 401, "unauthenticated")


def test_a_token_records_its_last_use_at_most_once_a_minute(database_url: str) -> None:

    # Without the token cache: every request looks its token up, and only the minute
    # holds a second write back (with it, a lookup is rarer still).
    uncached = create_app(get_settings().model_copy(update={"api_token_cache_seconds": 0}))
    with serving(uncached) as api:
        _records_its_last_use_at_most_once_a_minute(api, database_url)


def _records_its_last_use_at_most_once_a_minute(api: str, database_url: str) -> None:
    from jobwarden.api.auth import secret_hash

    bearer = token(database_url)
    digest = secret_hash(bearer)

    def last_used() -> Any:
        with transaction(database_url) as session:
            return session.scalar(
                text("SELECT last_used_at FROM api_tokens WHERE secret_hash = :h"), {"h": digest}
            )

    assert last_used() is None
    post(api, bearer, key=secrets.token_hex(8))
    first = last_used()
    assert first is not None
    post(api, bearer, key=secrets.token_hex(8))
    assert last_used() == first  # within the minute: no second write
    with transaction(database_url) as session:
        session.execute(
            text(
                "UPDATE api_tokens SET last_used_at = last_used_at - interval '61 seconds' "
                "WHERE secret_hash = :h"
            ),
            {"h": digest},
        )
    aged = last_used()
    post(api, bearer, key=secrets.token_hex(8))
    assert last_used() > aged


# -- bounded input, problem details ---------------------------------------------------


def test_a_body_over_the_size_limit_is_413_before_it_is_read(api: str, database_url: str) -> None:
    bearer = token(database_url)
    big = b'{"provider": "sandbox", "command": {"blob": "' + b"x" * (1024 * 1024) + b'"}}'
    problem = assert_problem(post(api, bearer, key="k", content=big), 413, "body_too_large")
    assert problem["limit"] == 1024 * 1024

    def chunks() -> Iterator[bytes]:  # no Content-Length: counted while read
        for _ in range(20):
            yield b"x" * 65536

    chunked = httpx.post(
        f"{api}/v1/operations",
        content=chunks(),
        headers={"Authorization": f"Bearer {bearer}", "Idempotency-Key": "k"},
        timeout=30,
    )
    assert_problem(chunked, 413, "body_too_large")


def test_json_nested_too_deep_is_refused_by_the_scan_before_the_parser_recurses(
    api: str, database_url: str
) -> None:
    deep = b'{"provider": "sandbox", "command": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}"
    problem = assert_problem(
        post(
            api,
            token(database_url),
            key="k",
            content=deep,
            headers={"Content-Type": "application/json"},
        ),
        422,
        "json_too_deep",
    )
    assert problem["limit"] == 64


@pytest.mark.parametrize(
    ("method", "path", "status", "kind"),
    [
        ("GET", "/no/such/route", 404, "not_found"),
        ("DELETE", "/healthz", 405, "method_not_allowed"),
    ],
)
def test_framework_errors_answer_problem_json(
    api: str, method: str, path: str, status: int, kind: str
) -> None:
    assert_problem(httpx.request(method, f"{api}{path}", timeout=10), status, kind)


def test_every_refusal_of_a_submission_is_problem_json_with_a_type(
    api: str, database_url: str
) -> None:
    bearer = token(database_url)
    cases = [
        (
            post(
                api,
                bearer,
                key="k",
                content=b"{not json",
                headers={"Content-Type": "application/json"},
            ),
            400,
            "malformed_json",
        ),
        (
            post(api, bearer, key="k", content=b"a=b", headers={"Content-Type": "text/plain"}),
            415,
            "unsupported_media_type",
        ),
        (post(api, bearer, {"provider": "sandbox"}, key="k"), 422, "invalid_request"),
        (
            post(api, bearer, {"provider": "sandbox", "command": [1]}, key="k"),
            422,
            "invalid_request",
        ),
        (
            post(api, bearer, {"provider": "nope", "command": {}}, key="k"),
            422,
            "invalid_submission",
        ),
        (
            post(api, bearer, headers={"Idempotency-Key": '"unterminated'}),
            400,
            "bad_request",
        ),
    ]
    for response, status, kind in cases:
        assert_problem(response, status, kind)


# -- the intake log -------------------------------------------------------------------


def test_the_intake_log_holds_one_row_per_attempt_with_its_answer(
    api: str, database_url: str
) -> None:
    bearer, key = token(database_url), secrets.token_hex(8)
    tenant = tenant_of(database_url, bearer)
    created = post(api, bearer, key=key).json()
    post(api, bearer, key=key)
    post(api, bearer, {"provider": "sandbox", "command": {"kind": "other"}}, key=key)
    post(api, bearer, {"provider": "nope", "command": {}}, key=key)
    rows = intake_rows(database_url, (tenant, key))
    assert [(r.outcome, r.http_status, r.door) for r in rows] == [
        ("created", 201, "http"),
        ("replayed", 201, "http"),
        ("conflict", 422, "http"),
        ("invalid", 422, "http"),
    ]
    assert {r.actor for r in rows} == {rows[0].actor} and rows[0].actor.startswith("token:")
    assert rows[0].operation_id == uuid.UUID(created["operation_id"])
    assert rows[0].fingerprint == rows[1].fingerprint != rows[2].fingerprint
    assert rows[3].fingerprint is None and "unknown provider" in (rows[3].detail or "")
    assert rows[0].trace_id == created["trace_id"]


@pytest.mark.parametrize(
    "statement", ["UPDATE intake_log SET outcome = 'created'", "DELETE FROM intake_log"]
)
def test_the_database_refuses_to_change_the_intake_log(
    api: str, database_url: str, statement: str
) -> None:
    post(api, token(database_url), key=secrets.token_hex(8))
    engine = create_engine(database_url)
    try:
        with pytest.raises(DBAPIError) as caught, engine.begin() as conn:
            conn.execute(text(statement))
        assert isinstance(caught.value.orig, psycopg.errors.RestrictViolation)
    finally:
        engine.dispose()


# -- W3C Trace Context ----------------------------------------------------------------


def test_a_valid_traceparent_gives_the_operation_its_trace_id(api: str, database_url: str) -> None:
    header = f"00-{TRACE}-00f067aa0ba902b7-01"
    answer = post(
        api, token(database_url), key=secrets.token_hex(8), headers={"traceparent": header}
    )
    body = answer.json()
    assert body["trace_id"] == TRACE
    version, trace, parent, flags = answer.headers["traceparent"].split("-")
    assert (version, trace, len(parent), flags) == ("00", TRACE, 16, "01")
    with transaction(database_url) as session:
        stored = session.scalar(
            text("SELECT trace_id FROM operations WHERE operation_id = :id"),
            {"id": body["operation_id"]},
        )
    assert stored == TRACE


@pytest.mark.parametrize(
    "header",
    [
        "garbage",
        f"00-{'0' * 32}-00f067aa0ba902b7-01",
        f"00-{TRACE}-{'0' * 16}-01",
        f"ff-{TRACE}-00f067aa0ba902b7-01",
        f"00-{TRACE.upper()}-00f067aa0ba902b7-01",
    ],
)
def test_an_invalid_traceparent_is_ignored_and_a_new_trace_id_generated(
    api: str, database_url: str, header: str
) -> None:
    answer = post(
        api, token(database_url), key=secrets.token_hex(8), headers={"traceparent": header}
    )
    assert answer.status_code == 201
    assert answer.json()["trace_id"] not in {TRACE, "0" * 32}


def test_a_key_whose_first_request_is_still_being_recorded_is_409_and_logged(
    api: str, database_url: str
) -> None:
    bearer, key = token(database_url), secrets.token_hex(8)
    tenant = tenant_of(database_url, bearer)
    seed = post(api, bearer, key=secrets.token_hex(8)).json()
    engine = create_engine(database_url)
    try:
        # An uncommitted row holding (tenant, key): the claim waits on it past its lock
        # timeout, as it would behind a first request that is slow to commit.
        with engine.begin() as held:
            held.execute(
                text(
                    "INSERT INTO operations SELECT (jsonb_populate_record(NULL::operations, "
                    "to_jsonb(o) || jsonb_build_object('operation_id', gen_random_uuid(), "
                    "'idempotency_key', CAST(:k AS text), 'provider_token', CAST(:p AS text)))).* "
                    "FROM operations o WHERE operation_id = :id"
                ),
                {"k": key, "p": secrets.token_hex(16), "id": seed["operation_id"]},
            )
            busy = post(api, bearer, key=key)
            held.rollback()
    finally:
        engine.dispose()
    problem = assert_problem(busy, 409, "idempotency_key_in_progress")
    # RFC 9110 section 10.2.3: Retry-After in delay-seconds, the same as the body member.
    assert busy.headers["retry-after"] == "1" == str(problem["retry_after_seconds"])
    assert [
        (r.outcome, r.http_status, r.operation_id) for r in intake_rows(database_url, (tenant, key))
    ] == [("in_progress", 409, None)]
