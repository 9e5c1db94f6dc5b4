"""The sandbox's download conventions over real HTTP (port 0, httpx, no patching), each
named after the public doc it models (jobwarden/demo/sandbox/downloads.py)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from jobwarden.demo.harness import wait_for
from jobwarden.demo.sandbox.server import SandboxServer


@pytest.fixture
def sandbox() -> Iterator[SandboxServer]:
    with SandboxServer() as server:
        yield server


@pytest.fixture
def client(sandbox: SandboxServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sandbox.url, timeout=5.0) as c:
        yield c


def finished(client: httpx.Client, behaviour: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A job created with ``behaviour`` and its first (finished) status body."""
    created = client.post(
        "/v1/jobs",
        json={"behaviour": {"polls_to_finish": 1, **behaviour}},
        headers={"Idempotency-Key": hashlib.sha256(json.dumps(behaviour).encode()).hexdigest()},
    )
    assert created.status_code == 202, created.text
    job = str(created.json()["id"])
    status = client.get(f"/v1/jobs/{job}").json()
    assert status["status"] == "succeeded", status
    return job, status


# ------------------------------------------- Amazon S3 presigned URLs (expiring results)


def test_a_presigned_result_url_is_absolute_signed_and_says_when_it_expires(
    sandbox: SandboxServer, client: httpx.Client
) -> None:
    job, status = finished(client, {"result_url_expires_in": 60})
    url = urlsplit(status["result"]["url"])
    assert f"{url.scheme}://{url.netloc}" == sandbox.url
    assert url.path == f"/v1/jobs/{job}/result"
    query = {name: values[0] for name, values in parse_qs(url.query).items()}
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Expires"] == "60"
    assert len(query["X-Amz-Signature"]) == 64
    signed = datetime.strptime(query["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    expires_at = datetime.fromisoformat(status["result"]["expires_at"])
    assert expires_at == signed + timedelta(seconds=60)
    assert expires_at > datetime.now(UTC)

    download = client.get(status["result"]["url"])
    assert download.status_code == 200
    assert hashlib.sha256(download.content).hexdigest() == status["result"]["sha256"]
    # "You can use the presigned URL multiple times, up to the expiration date and time."
    assert client.get(status["result"]["url"]).status_code == 200


def test_an_expired_presigned_url_answers_403_request_has_expired_and_a_read_gives_a_fresh_one(
    client: httpx.Client,
) -> None:
    job, status = finished(client, {"result_url_expires_in": 30, "result_url_expired_first": True})
    stale = status["result"]["url"]
    assert datetime.fromisoformat(status["result"]["expires_at"]) <= datetime.now(UTC)
    refused = client.get(stale)
    assert refused.status_code == 403
    assert refused.headers["content-type"] == "application/xml"
    assert b"<Code>AccessDenied</Code><Message>Request has expired</Message>" in refused.content
    assert b"<Expires>" in refused.content and b"<ServerTime>" in refused.content

    again = client.get(f"/v1/jobs/{job}").json()["result"]
    assert again["url"] != stale  # a new X-Amz-Date, so a new signature
    assert datetime.fromisoformat(again["expires_at"]) > datetime.now(UTC)
    assert client.get(again["url"]).status_code == 200


def test_a_presigned_url_stops_working_once_its_time_is_up(client: httpx.Client) -> None:
    _, status = finished(client, {"result_url_expires_in": 1})
    url = status["result"]["url"]
    ends = datetime.fromisoformat(status["result"]["expires_at"])
    # Waits on the answer itself (bounded): X-Amz-Date has whole seconds, so at most ~2 s.

    def refused() -> httpx.Response | None:
        answer = client.get(url)
        return answer if answer.status_code == 403 else None

    answer = wait_for(refused, timeout=5, what="the presigned URL to expire")
    assert answer is not None
    assert datetime.now(UTC) >= ends
    assert b"Request has expired" in answer.content


def test_a_tampered_or_unsigned_result_url_is_refused_with_s3s_403(client: httpx.Client) -> None:
    job, status = finished(client, {"result_url_expires_in": 60})
    url = status["result"]["url"]
    forged = client.get(url.replace("X-Amz-Expires=60", "X-Amz-Expires=600"))
    assert forged.status_code == 403
    assert b"<Code>SignatureDoesNotMatch</Code>" in forged.content
    bare = client.get(f"/v1/jobs/{job}/result")
    assert bare.status_code == 403
    assert b"<Code>AccessDenied</Code>" in bare.content


# ------------------------------------------------------------- one-time download links


def test_a_one_time_link_serves_its_first_get_and_answers_410_gone_after(
    sandbox: SandboxServer, client: httpx.Client
) -> None:
    job, status = finished(client, {"result_single_use": True})
    first = client.get(status["result"]["url"])
    assert first.status_code == 200
    assert hashlib.sha256(first.content).hexdigest() == status["result"]["sha256"]
    second = client.get(status["result"]["url"])
    assert second.status_code == 410
    assert second.json()["error"] == "link_used"
    results = [r["status"] for r in sandbox.requests(job_id=job) if r["kind"] == "result"]
    assert results == [200, 410]


def test_a_download_cut_after_n_bytes_closes_the_connection_and_still_uses_the_link(
    client: httpx.Client,
) -> None:
    _, status = finished(client, {"result_single_use": True, "result_cut_after_bytes": 20})
    with client.stream("GET", status["result"]["url"]) as response:
        assert response.status_code == 200
        length = int(response.headers["content-length"])
        assert length > 20
        received = bytearray()
        with pytest.raises(httpx.RemoteProtocolError):
            for chunk in response.iter_raw():
                received += chunk
    assert len(received) == 20
    assert client.get(status["result"]["url"]).status_code == 410


def test_presigned_and_one_time_knobs_are_validated(client: httpx.Client) -> None:
    for behaviour, field in (
        ({"result_url_expired_first": True}, "result_url_expires_in"),
        ({"result_url_expires_in": 0}, "result_url_expires_in"),
        ({"result_cut_after_bytes": -1}, "result_cut_after_bytes"),
        ({"declared_failed_items": 1}, "openai_jsonl"),
    ):
        answer = client.post(
            "/v1/jobs", json={"behaviour": behaviour}, headers={"Idempotency-Key": field}
        )
        assert answer.status_code == 400, behaviour
        assert field in answer.json()["message"]


# -------------------------------------------------------------- OpenAI Batch error file

OPENAI_TWO_OF_FIVE = {"result_shape": "openai_jsonl", "result_items": 5, "result_failed_items": 2}


def test_an_openai_batch_with_failed_requests_serves_their_lines_as_its_error_file(
    sandbox: SandboxServer, client: httpx.Client
) -> None:
    job, status = finished(client, OPENAI_TWO_OF_FIVE)
    assert status["request_counts"] == {"total": 5, "completed": 3, "failed": 2}
    assert status["error_file_id"] == f"file-err-{job}"
    output = [json.loads(line) for line in client.get(status["result"]["url"]).content.splitlines()]
    assert [line["custom_id"] for line in output] == ["item-1", "item-2", "item-3"]

    errors = client.get(f"/v1/files/{status['error_file_id']}/content")
    assert errors.status_code == 200
    lines = [json.loads(line) for line in errors.content.splitlines()]
    assert [line["custom_id"] for line in lines] == ["item-4", "item-5"]
    for line in lines:
        assert set(line) == {"id", "custom_id", "response", "error"}
        assert line["response"]["status_code"] == 400
        assert line["response"]["body"]["error"]["type"] == "invalid_request_error"
    (fetch,) = [r for r in sandbox.requests(job_id=job) if r["kind"] == "error_file"]
    assert fetch["status"] == 200


def test_the_files_api_answers_404_for_a_file_it_does_not_hold(client: httpx.Client) -> None:
    job, status = finished(client, {"result_shape": "openai_jsonl", "result_items": 3})
    assert status["error_file_id"] is None
    for file_id in (f"file-err-{job}", "file-err-job_000000000000", "file-abc"):
        missing = client.get(f"/v1/files/{file_id}/content")
        assert missing.status_code == 404
        assert missing.json()["error"]["message"] == "No such File object"


def test_a_lying_batch_declares_a_failed_count_its_error_file_does_not_hold(
    client: httpx.Client,
) -> None:
    _, status = finished(client, {**OPENAI_TWO_OF_FIVE, "declared_failed_items": 1})
    # A lie that adds up: only the error file's two lines can give it away.
    assert status["request_counts"] == {"total": 4, "completed": 3, "failed": 1}
    errors = client.get(f"/v1/files/{status['error_file_id']}/content")
    assert len(errors.content.splitlines()) == 2
