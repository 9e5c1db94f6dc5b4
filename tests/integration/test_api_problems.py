"""Every error the app answers is RFC 9457 application/problem+json, the framework's too."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from jobwarden.api.app import create_app
from tests.api_server import serving

PREFIX = "tag:jobwarden.dev,2026:problem/"


@pytest.fixture(scope="module")
def api(database_url: str) -> Iterator[str]:
    app = create_app()

    def boom() -> None:
        raise RuntimeError("secret internals /etc/passwd")

    def typed(number: int) -> dict[str, int]:
        return {"number": number}

    # Routes of the test's own: an unexpected exception, and FastAPI's own validation.
    app.add_api_route("/test/boom", boom, methods=["GET"])
    app.add_api_route("/test/typed/{number}", typed, methods=["GET"])
    with serving(app) as url:
        yield url


def test_an_unexpected_exception_is_a_500_problem_without_a_stack_trace(api: str) -> None:
    answer = httpx.get(f"{api}/test/boom", timeout=10)
    assert answer.status_code == 500
    assert answer.headers["content-type"] == "application/problem+json"
    assert answer.json()["type"] == PREFIX + "internal_error"
    assert "secret internals" not in answer.text and "Traceback" not in answer.text


def test_fastapis_request_validation_is_a_422_problem_naming_the_path(api: str) -> None:
    answer = httpx.get(f"{api}/test/typed/abc", timeout=10)
    assert answer.status_code == 422
    assert answer.headers["content-type"] == "application/problem+json"
    body = answer.json()
    assert body["type"] == PREFIX + "invalid_request"
    assert body["errors"][0]["path"] == "path/number"
    # Paths and messages only: FastAPI's error list would echo the caller's input back.
    assert all(set(e) == {"path", "message"} for e in body["errors"])


def test_a_405_names_the_allowed_methods(api: str) -> None:
    answer = httpx.put(f"{api}/healthz", timeout=10)
    assert answer.status_code == 405 and answer.headers["allow"] == "GET"
    assert answer.json()["type"] == PREFIX + "method_not_allowed"
