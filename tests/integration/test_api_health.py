"""/healthz answers without I/O; /readyz asks Postgres and Redis and says which is down."""

from __future__ import annotations

import socket

import httpx

from jobwarden.api.app import create_app
from jobwarden.config.settings import Settings
from tests.api_server import serving


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # closed again when the block ends


def test_readyz_answers_when_postgres_and_redis_answer(database_url: str) -> None:
    with serving(create_app()) as api:
        ready = httpx.get(f"{api}/readyz", timeout=10)
    assert ready.status_code == 200
    body = ready.json()
    assert {k: body[k] for k in ("status", "postgres", "redis")} == {
        "status": "ready",
        "postgres": "ok",
        "redis": "ok",
    }
    # Whether a worker consumes the queue is reported, never failed on (see
    # test_no_worker_warning.py, which runs a worker on a queue of its own).
    assert body["workers"] in ("ok", "none")


def test_readyz_is_a_503_problem_naming_each_service_that_does_not_answer() -> None:
    port = _closed_port()
    settings = Settings(
        database_url=f"postgresql+psycopg://postgres@127.0.0.1:{port}/nothing",
        redis_url=f"redis://127.0.0.1:{port}/0",
    )
    with serving(create_app(settings)) as api:
        health = httpx.get(f"{api}/healthz", timeout=10)
        ready = httpx.get(f"{api}/readyz", timeout=10)
    assert health.status_code == 200 and health.json() == {"status": "ok"}
    assert ready.status_code == 503
    assert ready.headers["content-type"] == "application/problem+json"
    assert ready.json()["type"] == "tag:jobwarden.dev,2026:problem/not_ready"
    assert ready.json()["down"] == ["postgres", "redis"]
