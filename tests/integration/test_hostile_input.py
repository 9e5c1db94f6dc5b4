"""Issue 33, finding 5: input a stranger controls never causes a 500.

Each probe is answered as the caller's mistake, a 4xx naming the field, and leaves no
``api_unexpected_error`` (nor any traceback) in the server's log: the console's login
and forms (non-ASCII CSRF values, invalid UTF-8, NUL), a console approval, a lone
surrogate in a command's key, and schedule declarations whose interval, jitter, catch-up
or dates lie outside the documented bounds (docs/schedules.md, Bounds).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from jobwarden.console.app import create_app
from jobwarden.models.states import OperationState as S
from tests.api_server import serving
from tests.integration.api_helpers import insert_operation, load, make_token, tenant_name

TYPE = "tag:jobwarden.dev,2026:problem/"


class _Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def tracebacks(self) -> list[str]:
        return [
            r.getMessage()
            for r in self.records
            if r.levelno >= logging.ERROR or r.exc_info or "api_unexpected_error" in r.getMessage()
        ]


@pytest.fixture(scope="module")
def base_url(database_url: str) -> Iterator[str]:
    with serving(create_app()) as url:
        yield url


@pytest.fixture
def logged() -> Iterator[_Recorder]:
    """Every line the server's loggers write during the test."""
    recorder = _Recorder()
    loggers = [logging.getLogger(n) for n in ("uvicorn.error", "uvicorn", "jobwarden.api", "")]
    for logger in loggers:
        logger.addHandler(recorder)
    try:
        yield recorder
    finally:
        for logger in loggers:
            logger.removeHandler(recorder)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


def _login(client: httpx.Client, token: str) -> None:
    form = client.get("/console/login")
    answer = client.post("/console/login", data={"csrf": _csrf(form.text), "token": token})
    assert answer.status_code == 303, answer.text


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


@pytest.mark.parametrize(
    ("body", "status", "names"),
    [
        (b"csrf=%C3%A9&token=x", 403, "csrf"),
        (b"csrf=\xc3\xa9&token=x", 403, "csrf"),
        (b"csrf=x&token=%FF%FE", 400, "token"),
        (b"csrf=x&token=\xff", 400, "token"),
        (b"csrf=x&token=a%00b", 400, "token"),
        (b"csrf=%ED%B3%BF&token=x", 400, "csrf"),
    ],
)
def test_a_hostile_login_form_without_a_session_is_a_4xx_page_naming_the_field(
    base_url: str, logged: _Recorder, body: bytes, status: int, names: str
) -> None:
    with httpx.Client(base_url=base_url, timeout=30) as client:
        client.get("/console/login")  # the login cookie, as a browser would hold it
        answer = client.post("/console/login", content=body, headers=FORM)
    assert answer.status_code == status, answer.text
    assert names in answer.text
    assert logged.tracebacks() == []


def test_a_console_approval_with_a_hostile_form_is_a_4xx_page_and_approves_nothing(
    database_url: str, base_url: str, logged: _Recorder
) -> None:
    tenant = tenant_name()
    op = insert_operation(database_url, tenant, S.awaiting_approval, requested_by="token:bob")
    fingerprint = load(database_url, op).request_fingerprint
    token = make_token(database_url, tenant, "carol", ["read", "approve"])
    with httpx.Client(base_url=base_url, timeout=30) as client:
        _login(client, token["Authorization"].split()[1])
        csrf = _csrf(client.get(f"/console/operations/{op}").text)
        path = f"/console/operations/{op}/approvals"
        answers = [
            client.post(path, data={"csrf": "é" * 10, "fingerprint": fingerprint}),
            client.post(path, content=f"csrf={csrf}&fingerprint=".encode() + b"\xff", headers=FORM),
            client.post(path, data={"csrf": csrf, "fingerprint": "a\x00b"}),
            client.post(path, data={"csrf": csrf, "fingerprint": "é" * 64}),
        ]
    assert [a.status_code for a in answers] == [403, 400, 400, 409], [a.text for a in answers]
    assert "csrf" in answers[0].text and "fingerprint" in answers[2].text
    assert load(database_url, op).state is S.awaiting_approval
    assert logged.tracebacks() == []


def test_a_lone_surrogate_in_a_command_key_is_a_422_naming_the_key(
    database_url: str, base_url: str, logged: _Recorder
) -> None:
    headers = make_token(database_url, tenant_name(), "svc", ["submit"])
    answer = httpx.post(
        f"{base_url}/v1/operations",
        content=b'{"provider": "sandbox", "command": {"\\udcff": 1}}',
        headers={**headers, "Idempotency-Key": "surrogate", "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["type"] == TYPE + "invalid_request"
    assert problem["errors"][0]["path"] == "/command/\\udcff"
    assert logged.tracebacks() == []


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"interval_seconds": 10**15}, "interval_seconds"),
        ({"interval_seconds": 2**31}, "interval_seconds"),
        ({"interval_seconds": 60, "jitter_seconds": 2**31}, "jitter_seconds"),
        ({"interval_seconds": 60, "catchup_window_seconds": 2**31}, "catchup_window_seconds"),
        ({"interval_seconds": 60, "catchup_window_seconds": 2**63}, "catchup_window_seconds"),
        ({"interval_seconds": 60, "start": "0001-01-01T00:00:00+14:00"}, "start"),
        ({"interval_seconds": 60, "end": "9999-12-31T23:59:59-14:00"}, "end"),
    ],
)
def test_a_schedule_outside_the_bounds_is_a_422_naming_the_field(
    database_url: str, base_url: str, logged: _Recorder, fields: dict[str, Any], field: str
) -> None:
    headers = make_token(database_url, tenant_name(), "svc", ["submit", "read"])
    body = {"provider": "sandbox", "command": {"polls_to_finish": 1}, **fields}
    answer = httpx.put(f"{base_url}/v1/schedules/bounded", json=body, headers=headers, timeout=30)
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["type"] == TYPE + "invalid_request"
    assert field in problem["detail"], problem
    assert logged.tracebacks() == []


# Text Postgres cannot store (NUL, a lone surrogate) and values past the bounds, in the
# other JSON bodies a token's holder can send: each a 4xx, whatever the route. A guard
# (these answered 4xx before issue 33 too): the fixes above must keep every route so.
BODIES = [
    ("PUT", "/v1/schedules/p1", '{"\\udcff": 1}'),
    (
        "PUT",
        "/v1/schedules/p2",
        '{"cron": "\\u0000 * * * *", "provider": "sandbox", "command": {}}',
    ),
    ("PUT", "/v1/schedules/p3", '{"cron": "* * * * *", "timezone": "\\ud800", "command": {}}'),
    ("PUT", "/v1/schedules/p4", '{"cron": "* * * * *", "provider": "sand\\u0000", "command": {}}'),
    (
        "PUT",
        "/v1/schedules/p5",
        '{"cron": "* * * * *", "provider": "sandbox", "command": {"\\udcff": 1}}',
    ),
    (
        "PUT",
        "/v1/schedules/p6",
        '{"cron": "* * * * *", "provider": "sandbox", "command": {"a": "\\u0000"}}',
    ),
    ("PUT", "/v1/schedules/p7", '{"cron": "\\ud800", "provider": "sandbox", "command": {}}'),
    (
        "PUT",
        "/v1/schedules/p8",
        '{"interval_seconds": 1e400, "provider": "sandbox", "command": {}}',
    ),
    ("POST", "/v1/schedules/p1/backfill", '{"from": "\\ud800", "to": "x"}'),
    (
        "POST",
        "/v1/schedules/p1/backfill",
        '{"from": "0001-01-01T00:00:00+14:00", "to": "0001-01-02T00:00:00+14:00"}',
    ),
    ("POST", "/v1/operations/OP/decisions", '{"option": "resubmit", "note": "\\u0000"}'),
    ("POST", "/v1/operations/OP/decisions", '{"option": "\\udcff", "note": "x"}'),
    ("POST", "/v1/operations/OP/cancel", '{"reason": "\\udcff"}'),
    ("POST", "/v1/operations/OP/approvals", '{"fingerprint": "\\udcff"}'),
    ("POST", "/v1/operations/OP/extensions", '{"\\udcff": 1}'),
]


@pytest.mark.parametrize(("method", "path", "body"), BODIES)
def test_unstorable_text_in_any_api_body_is_a_4xx_without_a_traceback(
    database_url: str, base_url: str, logged: _Recorder, method: str, path: str, body: str
) -> None:
    tenant = tenant_name()
    scopes = ["submit", "read", "decide", "approve", "cancel"]
    headers = make_token(database_url, tenant, "svc", scopes)
    op = insert_operation(database_url, tenant, S.failed)
    answer = httpx.request(
        method,
        base_url + path.replace("OP", str(op)),
        content=body.encode(),
        headers={**headers, "Content-Type": "application/json"},
        timeout=30,
    )
    assert 400 <= answer.status_code < 500, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert logged.tracebacks() == []
