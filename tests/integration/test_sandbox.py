"""The sandbox provider over real HTTP (port 0, httpx, no patching)."""

from __future__ import annotations

import hashlib
import http.client
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from typing import Any

import httpx
import pytest

from jobwarden.demo.sandbox.server import SandboxServer

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@pytest.fixture
def sandbox() -> Iterator[SandboxServer]:
    with SandboxServer() as server:
        yield server


@pytest.fixture
def client(sandbox: SandboxServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=sandbox.url, timeout=5.0) as c:
        yield c


def create(
    client: httpx.Client, key: str, behaviour: dict[str, Any] | None = None, **command: Any
) -> httpx.Response:
    body: dict[str, Any] = {"report": "sales", **command}
    if behaviour is not None:
        body["behaviour"] = behaviour
    return client.post("/v1/jobs", json=body, headers={"Idempotency-Key": key})


def new_job(client: httpx.Client, key: str, behaviour: dict[str, Any] | None = None) -> str:
    response = create(client, key, behaviour)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def poll(client: httpx.Client, job_id: str) -> httpx.Response:
    return client.get(f"/v1/jobs/{job_id}")


# --------------------------------------------------------------------------- create


def test_create_answers_202_with_id_and_location(
    sandbox: SandboxServer, client: httpx.Client
) -> None:
    response = create(client, "k1")
    assert response.status_code == 202
    body = response.json()
    assert body["status"] == "queued"
    assert body["id"].startswith("job_") and len(body["id"]) == len("job_") + 12
    int(body["id"][4:], 16)
    assert datetime.fromisoformat(body["created_at"]).tzinfo is not None
    assert response.headers["Location"] == f"/v1/jobs/{body['id']}"
    assert "Idempotent-Replayed" not in response.headers
    jobs = sandbox.jobs_for_key("k1")
    assert [j["id"] for j in jobs] == [body["id"]]
    assert jobs[0]["command"] == {"report": "sales"}


def test_replay_returns_same_answer_and_creates_no_job(
    sandbox: SandboxServer, client: httpx.Client
) -> None:
    first = client.post("/v1/jobs", json={"a": 1, "b": 2}, headers={"Idempotency-Key": "k"})
    # Same canonical body, different key order and whitespace.
    again = client.post(
        "/v1/jobs",
        content=b'{ "b": 2,  "a": 1 }',
        headers={"Idempotency-Key": "k", "Content-Type": "application/json"},
    )
    assert again.status_code == first.status_code == 202
    assert again.content == first.content
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.headers["Location"] == first.headers["Location"]
    assert len(sandbox.jobs_for_key("k")) == 1
    assert sandbox.jobs_for_key("k")[0]["create_requests"] == 2
    creates = sandbox.requests(key="k")
    assert [e["replayed"] for e in creates] == [False, True]
    assert {e["job_id"] for e in creates} == {first.json()["id"]}


def test_same_key_different_body_is_422_and_leaves_job_alone(
    sandbox: SandboxServer, client: httpx.Client
) -> None:
    job_id = new_job(client, "k")
    conflict = create(client, "k", report="other")
    assert conflict.status_code == 422
    assert conflict.json()["error"] == "idempotency_key_reused"
    assert [j["id"] for j in sandbox.jobs_for_key("k")] == [job_id]
    assert sandbox.requests(key="k")[-1]["status"] == 422


@pytest.mark.parametrize(
    ("headers", "content", "error"),
    [
        ({}, b'{"a": 1}', "idempotency_key_required"),
        ({"Idempotency-Key": "k"}, b"[1, 2]", "invalid_json"),
        ({"Idempotency-Key": "k"}, b"not json", "invalid_json"),
        ({"Idempotency-Key": "k"}, b'{"behaviour": {"polls_to_finsh": 2}}', "invalid_behaviour"),
        ({"Idempotency-Key": "k"}, b'{"behaviour": {"outcome": "maybe"}}', "invalid_behaviour"),
    ],
)
def test_bad_creates_are_400(
    sandbox: SandboxServer,
    client: httpx.Client,
    headers: dict[str, str],
    content: bytes,
    error: str,
) -> None:
    response = client.post("/v1/jobs", content=content, headers=headers)
    assert response.status_code == 400
    assert response.json()["error"] == error
    assert sandbox.jobs_for_key("k") == []


def test_dropped_create_still_creates_exactly_one_job(
    sandbox: SandboxServer, client: httpx.Client
) -> None:
    with pytest.raises(httpx.TransportError):
        create(client, "kd", {"create_response": "drop"})
    jobs = sandbox.jobs_for_key("kd")
    assert len(jobs) == 1
    [entry] = sandbox.requests(key="kd")
    assert entry["status"] is None and entry["job_id"] == jobs[0]["id"]
    # The retry with the same token replays normally: still one job.
    replay = create(client, "kd", {"create_response": "drop"})
    assert replay.status_code == 202
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert replay.json()["id"] == jobs[0]["id"]
    assert len(sandbox.jobs_for_key("kd")) == 1


def test_held_create_times_out_client_but_job_exists(
    sandbox: SandboxServer, client: httpx.Client
) -> None:
    behaviour = {"create_response": "hold", "hold_seconds": 3}
    with (
        httpx.Client(base_url=sandbox.url, timeout=0.2) as impatient,
        pytest.raises(httpx.ReadTimeout),
    ):
        create(impatient, "kh", behaviour)
    assert len(sandbox.jobs_for_key("kh")) == 1
    started = time.monotonic()
    replay = create(client, "kh", behaviour)
    assert time.monotonic() - started < 2  # replays are not held
    assert replay.status_code == 202
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert len(sandbox.jobs_for_key("kh")) == 1


def test_held_create_answers_after_the_hold(client: httpx.Client) -> None:
    started = time.monotonic()
    response = create(client, "kh", {"create_response": "hold", "hold_seconds": 0.3})
    assert time.monotonic() - started >= 0.3
    assert response.status_code == 202


def test_concurrent_creates_with_one_key_make_one_job(sandbox: SandboxServer) -> None:
    def send(_: int) -> httpx.Response:
        with httpx.Client(base_url=sandbox.url, timeout=5.0) as c:
            return create(c, "race")

    with ThreadPoolExecutor(max_workers=8) as pool:
        responses = list(pool.map(send, range(16)))
    assert {r.status_code for r in responses} == {202}
    assert len({r.json()["id"] for r in responses}) == 1
    assert len(sandbox.jobs_for_key("race")) == 1
    replayed = [r.headers.get("Idempotent-Replayed") for r in responses]
    assert replayed.count(None) == 1


# --------------------------------------------------------------------------- status


def test_polls_to_finish_progression_and_result_checksum(client: httpx.Client) -> None:
    created = create(client, "kp", {"polls_to_finish": 4, "result_items": 3}).json()
    job_id = created["id"]
    assert client.get(f"/v1/jobs/{job_id}/result").status_code == 404
    bodies = [poll(client, job_id).json() for _ in range(4)]
    assert [b["status"] for b in bodies] == ["queued", "running", "running", "succeeded"]
    progress = [b["progress"] for b in bodies]
    assert progress == sorted(progress) and all(p < 100 for p in progress[:3])
    assert progress[3] == 100
    assert all(b["result"] is None and b["error"] is None for b in bodies[:3])
    final = bodies[3]
    assert set(final) == {"id", "status", "progress", "started_at", "expires_at", "result", "error"}
    # Queued, the job has not started; from then on it started when it was created.
    assert bodies[0]["started_at"] is None
    assert [b["started_at"] for b in bodies[1:]] == [created["created_at"]] * 3
    assert final["result"]["url"] == f"/v1/jobs/{job_id}/result"
    assert final["result"]["record_count"] == 3
    result = client.get(final["result"]["url"])
    assert result.status_code == 200
    assert result.headers["Content-Type"] == "application/json"
    assert hashlib.sha256(result.content).hexdigest() == final["result"]["sha256"]
    document = result.json()
    assert document["record_count"] == 3
    assert [i["ref"] for i in document["items"]] == ["item-1", "item-2", "item-3"]
    assert document["failed_items"] == []
    # Terminal stays terminal.
    assert poll(client, job_id).json()["status"] == "succeeded"


def test_seconds_to_finish(client: httpx.Client) -> None:
    done = new_job(client, "k-now", {"seconds_to_finish": 0})
    assert poll(client, done).json()["status"] == "succeeded"
    later = new_job(client, "k-later", {"seconds_to_finish": 3600})
    statuses = [poll(client, later).json()["status"] for _ in range(5)]
    assert statuses == ["queued"] + ["running"] * 4


@pytest.mark.parametrize("flag", ["never_finish", "run_past_expiry"])
def test_never_finishing_jobs_keep_running(client: httpx.Client, flag: str) -> None:
    job_id = new_job(client, "kn", {flag: True, "expires_in_seconds": 0})
    bodies = [poll(client, job_id).json() for _ in range(6)]
    assert all(b["status"] in ("queued", "running") for b in bodies)
    assert all(b["progress"] < 100 for b in bodies)
    expires = datetime.fromisoformat(bodies[-1]["expires_at"])
    assert expires <= datetime.now(UTC)  # running after its own expiry


def test_expires_at_follows_expires_in_seconds(client: httpx.Client) -> None:
    before = datetime.now(UTC)
    job_id = new_job(client, "ke", {"expires_in_seconds": 60})
    expires = datetime.fromisoformat(poll(client, job_id).json()["expires_at"])
    assert before + timedelta(seconds=59) < expires < before + timedelta(seconds=62)
    other = new_job(client, "ke2")
    assert poll(client, other).json()["expires_at"] is None


def test_failed_and_expired_outcomes(client: httpx.Client) -> None:
    failed = new_job(client, "kf", {"outcome": "failed", "polls_to_finish": 1})
    body = poll(client, failed).json()
    assert body["status"] == "failed" and body["result"] is None
    assert body["error"]["code"] == "job_failed" and body["error"]["message"]
    assert client.get(f"/v1/jobs/{failed}/result").status_code == 404
    expired = new_job(client, "kx", {"outcome": "expired", "polls_to_finish": 1})
    assert poll(client, expired).json()["status"] == "expired"


def test_progress_can_be_absent(client: httpx.Client) -> None:
    job_id = new_job(client, "kq", {"progress": False, "polls_to_finish": 3})
    assert [poll(client, job_id).json()["progress"] for _ in range(3)] == [None, None, None]


def test_retry_after_seconds_on_non_final_only(
    sandbox: SandboxServer, client: httpx.Client
) -> None:
    job_id = new_job(client, "kr", {"retry_after": 3, "polls_to_finish": 3})
    responses = [poll(client, job_id) for _ in range(3)]
    assert [r.headers.get("Retry-After") for r in responses] == ["3", "3", None]
    log = sandbox.requests(job_id=job_id)
    assert [e["retry_after"] for e in log if e["kind"] == "status"] == ["3", "3", None]


def test_retry_after_http_date_is_never_early(client: httpx.Client) -> None:
    job_id = new_job(client, "krd", {"retry_after_date": 5})
    before = datetime.now(UTC)
    response = poll(client, job_id)
    value = response.headers["Retry-After"]
    assert value.endswith(" GMT")
    moment = parsedate_to_datetime(value)
    assert moment >= before + timedelta(seconds=5) - timedelta(seconds=1)
    assert moment >= before.replace(microsecond=0) + timedelta(seconds=5)
    assert moment <= datetime.now(UTC) + timedelta(seconds=7)


def test_poll_hint_in_non_final_bodies(client: httpx.Client) -> None:
    job_id = new_job(client, "kh", {"poll_hint": {"seconds": 2.5}})
    first, final = poll(client, job_id).json(), poll(client, job_id).json()
    assert first["poll_after_seconds"] == {"seconds": 2.5}
    assert final["status"] == "succeeded" and "poll_after_seconds" not in final


def test_status_errors_503_then_normal(sandbox: SandboxServer, client: httpx.Client) -> None:
    job_id = new_job(client, "k5", {"status_errors": {"code": 503, "count": 2, "retry_after": 7}})
    responses = [poll(client, job_id) for _ in range(4)]
    assert [r.status_code for r in responses] == [503, 503, 200, 200]
    assert [r.headers.get("Retry-After") for r in responses[:2]] == ["7", "7"]
    # Error calls do not advance the job: polls_to_finish=2 counts from call 3.
    assert [r.json()["status"] for r in responses[2:]] == ["queued", "succeeded"]
    statuses = [e["status"] for e in sandbox.requests(job_id=job_id) if e["kind"] == "status"]
    assert statuses == [503, 503, 200, 200]


def test_status_errors_429_with_http_date(client: httpx.Client) -> None:
    job_id = new_job(client, "k4", {"status_errors": {"code": 429, "retry_after_date": 2}})
    before = datetime.now(UTC)
    limited = poll(client, job_id)
    assert limited.status_code == 429
    assert parsedate_to_datetime(limited.headers["Retry-After"]) >= before + timedelta(seconds=1)
    assert poll(client, job_id).status_code == 200


def test_status_errors_drop_and_hold(sandbox: SandboxServer, client: httpx.Client) -> None:
    job_id = new_job(
        client,
        "kdh",
        {
            "status_errors": [
                {"code": "drop", "count": 1},
                {"code": "hold", "count": 1, "hold_seconds": 0.2},
            ]
        },
    )
    with pytest.raises(httpx.TransportError):
        poll(client, job_id)
    started = time.monotonic()
    held = poll(client, job_id)
    assert time.monotonic() - started >= 0.2
    assert held.status_code == 200 and held.json()["status"] == "queued"
    assert poll(client, job_id).json()["status"] == "succeeded"
    statuses = [e["status"] for e in sandbox.requests(job_id=job_id) if e["kind"] == "status"]
    assert statuses == [None, 200, 200]


def test_unauthorized_from(client: httpx.Client) -> None:
    job_id = new_job(client, "ku", {"unauthorized_from": 2, "never_finish": True})
    assert [poll(client, job_id).status_code for _ in range(4)] == [200, 401, 401, 401]


def test_unknown_state_at(client: httpx.Client) -> None:
    job_id = new_job(client, "km", {"unknown_state_at": 2, "polls_to_finish": 5})
    statuses = [poll(client, job_id).json()["status"] for _ in range(3)]
    assert statuses == ["queued", "mystery", "mystery"]


def test_unknown_job_is_404(client: httpx.Client) -> None:
    assert poll(client, "job_000000000000").status_code == 404
    assert client.post("/v1/jobs/job_000000000000/cancel").status_code == 404
    assert client.get("/v1/jobs/job_000000000000/result").status_code == 404
    assert client.get("/v2/nothing").status_code == 404


# --------------------------------------------------------------------------- cancel


def test_cancel_honour(client: httpx.Client) -> None:
    job_id = new_job(client, "kc", {"polls_to_finish": 5})
    assert poll(client, job_id).json()["status"] == "queued"
    cancel = client.post(f"/v1/jobs/{job_id}/cancel")
    assert cancel.status_code == 202
    assert cancel.json() == {"id": job_id, "status": "cancelling"}
    body = poll(client, job_id).json()
    assert body["status"] == "cancelled" and body["result"] is None
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 409


def test_cancel_race_ends_succeeded_with_result(client: httpx.Client) -> None:
    job_id = new_job(client, "kcr", {"cancel": "race", "polls_to_finish": 5})
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    body = poll(client, job_id).json()
    assert body["status"] == "succeeded"
    result = client.get(body["result"]["url"])
    assert hashlib.sha256(result.content).hexdigest() == body["result"]["sha256"]


def test_cancel_never_stays_cancelling(client: httpx.Client) -> None:
    job_id = new_job(client, "kcn", {"cancel": "never"})
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    assert [poll(client, job_id).json()["status"] for _ in range(4)] == ["cancelling"] * 4
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202  # still not terminal


def test_cancel_after_finish_is_409(client: httpx.Client) -> None:
    job_id = new_job(client, "kcf", {"polls_to_finish": 1})
    assert poll(client, job_id).json()["status"] == "succeeded"
    conflict = client.post(f"/v1/jobs/{job_id}/cancel")
    assert conflict.status_code == 409
    assert conflict.json()["status"] == "succeeded"
    timed = new_job(client, "kct", {"seconds_to_finish": 0})
    assert client.post(f"/v1/jobs/{timed}/cancel").status_code == 409


# --------------------------------------------------------------------------- results


def test_bad_checksum(client: httpx.Client) -> None:
    job_id = new_job(client, "kb", {"result_bad_checksum": True, "polls_to_finish": 1})
    reference = poll(client, job_id).json()["result"]
    result = client.get(reference["url"])
    assert result.status_code == 200
    assert hashlib.sha256(result.content).hexdigest() != reference["sha256"]


def test_failed_items_are_counted_within_the_record_count(client: httpx.Client) -> None:
    job_id = new_job(
        client, "kfi", {"result_items": 5, "result_failed_items": 2, "polls_to_finish": 1}
    )
    reference = poll(client, job_id).json()["result"]
    document = client.get(reference["url"]).json()
    assert document["record_count"] == reference["record_count"] == 5
    assert [i["ref"] for i in document["items"]] == ["item-1", "item-2", "item-3"]
    assert [f["ref"] for f in document["failed_items"]] == ["item-4", "item-5"]
    assert all(f["error"] for f in document["failed_items"])


def _download(client: httpx.Client, url: str) -> tuple[bytes, httpx.Headers]:
    with client.stream("GET", url) as response:
        assert response.status_code == 200
        return b"".join(response.iter_raw()), response.headers


def test_result_lines_stream_the_same_bytes_twice_with_the_advertised_digest_and_length(
    client: httpx.Client,
) -> None:
    # 300 lines of 256 bytes: 75 KiB, more than one of the generator's chunks.
    behaviour = {"result_lines": 300, "result_line_bytes": 256, "polls_to_finish": 1}
    job_id = new_job(client, "klines", behaviour)
    status = poll(client, job_id).json()
    assert status["status"] == "succeeded"
    reference = status["result"]
    assert reference["record_count"] == 300
    assert status["request_counts"] == {"total": 300, "completed": 300, "failed": 0}
    first, headers = _download(client, reference["url"])
    again, _ = _download(client, reference["url"])
    assert first == again
    assert int(headers["Content-Length"]) == len(first) == 300 * 256
    assert hashlib.sha256(first).hexdigest() == reference["sha256"]
    assert headers["Content-Type"] == "application/jsonl"
    lines = first.split(b"\n")
    assert lines.pop() == b""  # every line ends with its newline
    assert {len(line) + 1 for line in lines} == {256}
    parsed = [json.loads(line) for line in lines]
    assert [p["custom_id"] for p in parsed] == [f"item-{n}" for n in range(1, 301)]
    assert all(p["response"]["status_code"] == 200 and p["error"] is None for p in parsed)
    assert parsed[0]["id"] == "batch_req_1" and parsed[0]["response"]["body"]["id"] == "item-1"


@pytest.mark.parametrize(
    ("behaviour", "message"),
    [
        ({"result_lines": 1000, "result_line_bytes": 100}, "at least 170"),
        ({"result_line_bytes": 512}, "needs behaviour.result_lines"),
        ({"result_lines": 5, "result_failed_items": 1}, "result_failed_items"),
        ({"result_lines": 5, "result_items": 5}, "result_items"),
        ({"result_lines": 5, "result_digest": "content-md5"}, "result_digest"),
        ({"result_lines": 5, "result_shape": "google_jsonl"}, "openai_jsonl"),
        ({"result_lines": 0}, "result_lines must be an integer >= 1"),
    ],
)
def test_result_lines_refuse_what_a_generated_result_cannot_be(
    client: httpx.Client, behaviour: dict[str, Any], message: str
) -> None:
    response = create(client, "kbadlines", behaviour)
    assert response.status_code == 400
    assert response.json()["error"] == "invalid_behaviour"
    assert message in response.json()["message"]


def test_succeed_without_result(client: httpx.Client) -> None:
    job_id = new_job(client, "kw", {"succeed_without_result": True, "polls_to_finish": 1})
    body = poll(client, job_id).json()
    assert body["status"] == "succeeded" and body["result"] is None
    assert client.get(f"/v1/jobs/{job_id}/result").status_code == 404


def test_lookup_by_reference(client: httpx.Client) -> None:
    created = create(client, "klook").json()
    assert client.get("/v1/jobs", params={"reference": "klook"}).json() == {
        "data": [{"id": created["id"], "status": "queued", "created_at": created["created_at"]}]
    }
    assert client.get("/v1/jobs", params={"reference": "nope"}).json() == {"data": []}
    assert client.get("/v1/jobs").status_code == 400


# --------------------------------------------------------------------------- auth


def test_bearer_token_enforced() -> None:
    with SandboxServer(token="s3cret") as server, httpx.Client(base_url=server.url) as c:
        assert create(c, "kt").status_code == 401
        c.headers["Authorization"] = "Bearer wrong"
        assert create(c, "kt").status_code == 401
        assert server.jobs_for_key("kt") == []
        c.headers["Authorization"] = "Bearer s3cret"
        job_id = new_job(c, "kt")
        assert poll(c, job_id).status_code == 200
        del c.headers["Authorization"]
        assert poll(c, job_id).status_code == 401
        # The control endpoints are not part of the provider API.
        assert c.get("/_sandbox/jobs", params={"key": "kt"}).status_code == 200
        assert [e["status"] for e in server.requests(key="kt")] == [401, 401, 202]


# --------------------------------------------------------------------------- request log


def test_request_log_fields_and_filters(sandbox: SandboxServer, client: httpx.Client) -> None:
    before = time.monotonic()
    response = client.post(
        "/v1/jobs",
        json={"x": 1},
        headers={"Idempotency-Key": "klog", "traceparent": TRACEPARENT},
    )
    job_id = response.json()["id"]
    poll(client, job_id)
    client.post(f"/v1/jobs/{job_id}/cancel")
    client.get(f"/v1/jobs/{job_id}/result")
    client.get("/v1/jobs", params={"reference": "klog"})
    client.put("/v1/jobs/whatever/cancel")
    new_job(client, "other")

    log = sandbox.requests()
    assert [e["seq"] for e in log] == sorted(e["seq"] for e in log)
    assert len({e["seq"] for e in log}) == len(log) == 7
    assert [e["kind"] for e in log] == [
        "create",
        "status",
        "cancel",
        "result",
        "lookup",
        "other",
        "create",
    ]
    first = log[0]
    assert set(first) >= {
        "seq",
        "time",
        "monotonic",
        "method",
        "path",
        "kind",
        "idempotency_key",
        "job_id",
        "status",
        "retry_after",
        "traceparent",
        "replayed",
    }
    assert first["method"] == "POST" and first["path"] == "/v1/jobs"
    assert first["idempotency_key"] == "klog" and first["job_id"] == job_id
    assert first["status"] == 202 and first["retry_after"] is None
    assert first["traceparent"] == TRACEPARENT and first["replayed"] is False
    stamp = datetime.fromisoformat(first["time"])
    assert stamp.utcoffset() == timedelta(0)
    assert len(first["time"].split(".")[1].rstrip("Z")) == 6  # microseconds
    assert before <= first["monotonic"] <= time.monotonic()
    assert log[1]["traceparent"] is None and log[1]["idempotency_key"] is None
    assert [e["status"] for e in log] == [202, 200, 202, 404, 200, 405, 202]
    json.dumps(log)  # JSON-serialisable

    assert [e["seq"] for e in sandbox.requests(key="klog")] == [first["seq"]]
    by_job = sandbox.requests(job_id=job_id)
    assert [e["kind"] for e in by_job] == ["create", "status", "cancel", "result"]
    assert sandbox.requests(key="klog", job_id="job_nope") == []


def test_control_endpoints_over_http(sandbox: SandboxServer, client: httpx.Client) -> None:
    job_id = new_job(client, "kctl")
    poll(client, job_id)
    new_job(client, "kctl2")

    by_key = client.get("/_sandbox/requests", params={"key": "kctl"}).json()
    assert [e["kind"] for e in by_key] == ["create"]
    by_job = client.get("/_sandbox/requests", params={"job": job_id}).json()
    assert [e["kind"] for e in by_job] == ["create", "status"]
    assert len(client.get("/_sandbox/requests").json()) == 3
    jobs = client.get("/_sandbox/jobs", params={"key": "kctl"}).json()
    assert [j["id"] for j in jobs] == [job_id]
    assert jobs == sandbox.jobs_for_key("kctl")
    assert len(client.get("/_sandbox/jobs").json()) == 2

    assert client.post("/_sandbox/reset").status_code == 200
    assert client.get("/_sandbox/requests").json() == []
    assert client.get("/_sandbox/jobs").json() == []
    assert poll(client, job_id).status_code == 404
    # Seq keeps increasing across resets.
    assert sandbox.requests()[0]["seq"] > by_job[-1]["seq"]


# --------------------------------------------------------------------------- transport


def test_keep_alive_serves_many_requests_on_one_connection(sandbox: SandboxServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", int(sandbox.url.rsplit(":", 1)[1]), timeout=5)
    try:
        conn.request("POST", "/v1/jobs", body=b"{}", headers={"Idempotency-Key": "ka"})
        created = conn.getresponse()
        job_id = json.loads(created.read())["id"]
        assert created.status == 202 and not created.will_close
        for _ in range(3):
            conn.request("GET", f"/v1/jobs/{job_id}")
            answer = conn.getresponse()
            assert answer.status == 200 and not answer.will_close
            json.loads(answer.read())
        assert conn.sock is not None  # never reconnected
    finally:
        conn.close()


def test_stop_does_not_wait_for_idle_keep_alive_connections() -> None:
    server = SandboxServer()
    server.start()
    with httpx.Client(base_url=server.url, timeout=5) as idle:
        new_job(idle, "kidle")  # leaves a keep-alive connection open
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 2
        with pytest.raises(httpx.TransportError):
            new_job(idle, "kidle2")
    server.stop()  # idempotent
