"""The HTTP door's Redis trips per submission (issue 37): the revocation epoch its token
cache needs and the heartbeats its no-worker advice needs are read in ONE trip, so the
HTTP door makes no more trips than the Python door, which reads no epoch.

Counted on the app's own Redis client (a real server; the client only counts what it
sends), for a new key and a replay, with the token cache on (the default) and off.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from redis import ConnectionPool, Redis
from redis.client import Pipeline

from jobwarden.api.app import create_app
from jobwarden.api.auth import Scope, create_token
from jobwarden.config.settings import Settings, get_settings
from jobwarden.models.intake.submission import SubmissionRequest
from jobwarden.tasks.heartbeat import heartbeat_key
from jobwarden.tasks.intake import submit_request
from jobwarden.tasks.runtime import Runtime
from tests.api_server import serving
from tests.integration.api_helpers import tenant_name

COMMAND = {"kind": "export", "behaviour": {"polls_to_finish": 1}}


class CountingRedis(Redis):
    """A Redis client that counts its round trips: a command alone, or a pipeline."""

    trips = 0

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.trips += 1
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Pipeline:
        outer = self

        class Counted(Pipeline):
            def execute(self, raise_on_error: bool = True) -> list[Any]:
                outer.trips += 1
                return super().execute(raise_on_error)

        return Counted(self.connection_pool, self.response_callbacks, transaction, shard_hint)


def _counting(rt: Runtime, settings: Settings) -> CountingRedis:
    client = CountingRedis(connection_pool=ConnectionPool.from_url(settings.redis_url))
    rt.redis.close()
    rt.redis = client
    return client


@pytest.fixture(params=[True, False], ids=["token_cache", "no_token_cache"])
def app_settings(request: pytest.FixtureRequest) -> Settings:
    base = get_settings()
    ttl = base.api_token_cache_seconds if request.param else 0.0
    assert (ttl > 0) is request.param
    return base.model_copy(update={"api_token_cache_seconds": ttl})


@pytest.fixture
def served(app_settings: Settings) -> Iterator[tuple[str, CountingRedis, Runtime]]:
    app = create_app(app_settings)
    rt = app.state.runtime()
    client = _counting(rt, app_settings)
    # A worker's heartbeat on the queue, so the advice is read and found quiet.
    now = float(client.time()[0])
    client.zadd(heartbeat_key(app_settings.key_prefix, app_settings.queue), {"w": now + 600})
    with serving(app) as url:
        yield url, client, rt
    client.delete(heartbeat_key(app_settings.key_prefix, app_settings.queue))


def _trips(client: CountingRedis, submit: Any, key: str) -> int:
    before = client.trips
    submit(key)
    return client.trips - before


def test_the_http_door_reads_epoch_and_heartbeat_in_one_trip(
    served: tuple[str, CountingRedis, Runtime], database_url: str
) -> None:
    url, client, rt = served
    tenant = tenant_name()
    token = create_token(
        database_url, tenant=tenant, name="trips", scopes=(Scope.submit, Scope.read)
    ).token
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    body = json.dumps({"provider": "sandbox", "command": COMMAND}).encode()

    def http(key: str) -> None:
        sent = httpx.post(
            f"{url}/v1/operations",
            content=body,
            headers={**headers, "Idempotency-Key": key},
            timeout=30,
        )
        assert sent.status_code in (200, 201), sent.text
        assert not sent.json().get("warnings"), sent.text  # the heartbeat was read: quiet

    def python(key: str) -> None:
        wanted = SubmissionRequest(
            tenant=tenant,
            requested_by="trips",
            idempotency_key=key,
            provider="sandbox",
            command=COMMAND,
        )
        result = submit_request(wanted, door="python", runtime=rt)
        assert not result.warnings

    http(f"warm-{secrets.token_hex(4)}")  # the token cache holds the token from here on
    for kind in ("new", "replay"):
        keys = [f"{kind}-{door}-{secrets.token_hex(4)}" for door in ("http", "python")]
        if kind == "replay":
            http(keys[0])
            python(keys[1])
        over_http = _trips(client, http, keys[0])
        in_python = _trips(client, python, keys[1])
        assert over_http == in_python, (kind, over_http, in_python)


def test_a_heartbeat_stamp_that_is_no_time_is_no_500(
    served: tuple[str, CountingRedis, Runtime], database_url: str, app_settings: Settings
) -> None:
    # Only our workers write stamps; one that is no time (a year past 9999) is left
    # unread, as when Redis does not answer: the submission is answered, without advice.
    url, client, _ = served
    client.zadd(heartbeat_key(app_settings.key_prefix, app_settings.queue), {"w": 1e12})
    tenant = tenant_name()
    token = create_token(database_url, tenant=tenant, name="stamp", scopes=(Scope.submit,)).token
    sent = httpx.post(
        f"{url}/v1/operations",
        json={"provider": "sandbox", "command": COMMAND},
        headers={"Authorization": f"Bearer {token}", "Idempotency-Key": "stamp"},
        timeout=30,
    )
    assert sent.status_code == 201, sent.text
    assert not sent.json()["warnings"]
