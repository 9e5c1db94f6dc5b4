"""The API's access line (jobwarden.api.access_log): one structured ``http_request`` line
per request, with method, path, status, duration, trace id and the authenticated tenant."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from jobwarden.api.app import create_app
from jobwarden.api.auth import Scope, create_token
from jobwarden.observability.logs import formatter
from tests.api_server import serving, serving_thread

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


class AccessLines(logging.Handler):
    """Each access line with the thread that wrote it: a server's lines are its thread's.

    Another test's server, still answering in a thread of this process, writes to the same
    logger; with the suite on several processes, which tests ran before this one varies.
    """

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(formatter("json"))
        self.seen: list[tuple[str, dict[str, Any]]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append((record.threadName or "", json.loads(self.format(record))))

    def of(self, url: str) -> list[dict[str, Any]]:
        return [line for thread, line in self.seen if thread == serving_thread(url)]


@pytest.fixture
def lines() -> Iterator[AccessLines]:
    handler = AccessLines()
    access = logging.getLogger("jobwarden.access")
    level = access.level
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    yield handler
    access.removeHandler(handler)
    access.setLevel(level)


def test_every_request_is_one_structured_line_with_status_duration_trace_and_tenant(
    database_url: str, lines: AccessLines
) -> None:
    tenant = f"t-{secrets.token_hex(4)}"
    bearer = create_token(
        database_url, tenant=tenant, name=f"n-{secrets.token_hex(4)}", scopes=(Scope.read,)
    ).token
    parent = f"00-{TRACE}-00f067aa0ba902b7-01"
    with serving(create_app()) as url:
        httpx.get(f"{url}/healthz", headers={"traceparent": parent}, timeout=10)
        httpx.get(f"{url}/v1/operations", timeout=10)
        listed = httpx.get(
            f"{url}/v1/operations", headers={"Authorization": f"Bearer {bearer}"}, timeout=10
        )
    assert listed.status_code == 200
    health, refused, read = (r for r in lines.of(url) if r["event"] == "http_request")
    assert (health["method"], health["path"], health["status"]) == ("GET", "/healthz", 200)
    # The caller's trace id, from its traceparent; nobody authenticated: no tenant.
    assert (health["trace_id"], health["tenant"]) == (TRACE, None)
    assert (refused["status"], refused["tenant"]) == (401, None)
    assert (read["path"], read["status"], read["tenant"]) == ("/v1/operations", 200, tenant)
    assert all(r["level"] == "info" and r["duration_ms"] > 0 for r in (health, refused, read))
