"""What hostile probes of the HTTP doors found (issue 24, item 7), each answered as a
stranger's mistake: a 4xx naming what was wrong, never a 500 or a traceback in the log.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.routing import APIRoute

from jobwarden.api import actions, intake, queries, results, webhooks
from jobwarden.console import routes as console_routes
from jobwarden.console.app import create_app
from tests.api_server import serving
from tests.integration.api_helpers import make_token, tenant_name

TYPE = "tag:jobwarden.dev,2026:problem/"


class _Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def app(database_url: str) -> Any:
    return create_app()


@pytest.fixture(scope="module")
def base_url(app: Any) -> Iterator[str]:
    with serving(app) as url:
        yield url


@pytest.fixture
def logged() -> Iterator[_Recorder]:
    """Every line the server's loggers (uvicorn's and jobwarden's) write during the test."""
    recorder = _Recorder()
    loggers = [logging.getLogger(n) for n in ("uvicorn.error", "uvicorn", "jobwarden.api", "")]
    api = logging.getLogger("jobwarden.api")
    level = api.level
    api.setLevel(logging.INFO)  # the hang-up's line is at info, under the root's default
    for logger in loggers:
        logger.addHandler(recorder)
    try:
        yield recorder
    finally:
        api.setLevel(level)
        for logger in loggers:
            logger.removeHandler(recorder)


def _csrf(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None, html
    return found.group(1)


def test_a_console_login_form_with_more_than_fifty_fields_is_a_400_page(
    base_url: str, logged: _Recorder
) -> None:
    with httpx.Client(base_url=base_url, timeout=30) as client:
        csrf = _csrf(client.get("/console/login").text)
        fields = {"csrf": csrf, "token": "x", **{f"f{i}": "1" for i in range(60)}}
        answer = client.post("/console/login", data=fields)
        assert answer.status_code == 400, answer.text
        assert "at most 50 fields" in answer.text
        # Fifty fields are still a form: the login answers as for any unknown token.
        fewer = {"csrf": csrf, "token": "x", **{f"f{i}": "1" for i in range(40)}}
        assert client.post("/console/login", data=fewer).status_code == 401
    assert not [r for r in logged.records if r.levelno >= logging.ERROR]


def test_a_console_decision_form_with_more_than_fifty_fields_is_a_400_page(
    database_url: str, base_url: str
) -> None:
    token = make_token(database_url, tenant_name(), "ops", ["read", "decide"])
    with httpx.Client(base_url=base_url, timeout=30) as client:
        form = client.get("/console/login")
        secret = token["Authorization"].split()[1]
        logged_in = client.post("/console/login", data={"csrf": _csrf(form.text), "token": secret})
        assert logged_in.status_code == 303
        fields = {f"f{i}": "1" for i in range(51)}
        answer = client.post("/console/bulk", data=fields)
    assert answer.status_code == 400 and "at most 50 fields" in answer.text


def test_a_client_hanging_up_mid_body_is_one_info_line_without_a_traceback(
    database_url: str, base_url: str, logged: _Recorder
) -> None:
    auth = make_token(database_url, tenant_name(), "svc", ["submit"])["Authorization"]
    port = int(base_url.rsplit(":", 1)[1])
    head = (
        "POST /v1/operations HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: {auth}\r\nIdempotency-Key: hangup\r\n"
        "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n"
    )
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode() + b'{"provider": "sand')
    deadline = time.monotonic() + 10
    while not any(r.getMessage().find("api_client_disconnected") >= 0 for r in logged.records):
        assert time.monotonic() < deadline, [r.getMessage() for r in logged.records]
        time.sleep(0.02)  # polling a condition (the log line), with a deadline
    assert not [r for r in logged.records if r.levelno >= logging.ERROR or r.exc_info]


@pytest.mark.parametrize("since", ["0.5", "1700000000", "2026-01-31", "2026-01-31T09:00:00"])
def test_since_that_is_not_an_rfc_3339_date_time_is_a_422_naming_since(
    database_url: str, base_url: str, since: str
) -> None:
    headers = make_token(database_url, tenant_name(), "reader", ["read"])
    answer = httpx.get(
        f"{base_url}/v1/operations", params={"since": since}, headers=headers, timeout=30
    )
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["type"] == TYPE + "invalid_request"
    assert body["errors"][0]["path"] == "query/since", body
    assert "RFC 3339" in body["errors"][0]["message"]


def test_since_as_an_rfc_3339_date_time_is_accepted(database_url: str, base_url: str) -> None:
    headers = make_token(database_url, tenant_name(), "reader", ["read"])
    for since in ("2026-01-31T09:00:00Z", "2026-01-31T09:00:00.25+02:00"):
        answer = httpx.get(
            f"{base_url}/v1/operations", params={"since": since}, headers=headers, timeout=30
        )
        assert answer.status_code == 200, answer.text


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "00000000-0000-4000-8000-000000000000", path)


def test_options_on_every_route_allows_exactly_the_methods_its_path_serves(base_url: str) -> None:
    served: dict[str, set[str]] = {"/healthz": {"GET"}, "/readyz": {"GET"}}
    for module in (intake, queries, results, actions, webhooks, console_routes):
        for route in module.router.routes:
            if isinstance(route, APIRoute):
                served.setdefault(route.path, set()).update(route.methods or ())
    assert served["/v1/operations"] == {"GET", "POST"}
    with httpx.Client(base_url=base_url, timeout=30) as client:
        for path, methods in served.items():
            answer = client.request("OPTIONS", _concrete(path))
            assert answer.status_code == 405, (path, answer.text)
            allowed = {m.strip() for m in answer.headers["allow"].split(",")}
            assert allowed == methods, (path, allowed, methods)


@pytest.mark.parametrize(
    ("body", "pointer"),
    [
        ('{"provider": "sand\\u0000box", "command": {}}', "/provider"),
        ('{"provider": "sandbox", "command": {"a": ["x", "\\ud800"]}}', "/command/a/1"),
    ],
)
def test_text_postgres_cannot_store_is_a_422_naming_its_field_not_malformed_json(
    database_url: str, base_url: str, body: str, pointer: str
) -> None:
    headers = make_token(database_url, tenant_name(), "svc", ["submit"])
    answer = httpx.post(
        f"{base_url}/v1/operations",
        content=body.encode(),
        headers={**headers, "Idempotency-Key": "nul", "Content-Type": "application/json"},
        timeout=30,
    )
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert problem["type"] == TYPE + "invalid_request"
    assert problem["errors"] == [
        {"path": pointer, "message": "must not contain NUL characters or unpaired surrogates"}
    ]
