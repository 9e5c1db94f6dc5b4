"""Webhooks end to end: the sandbox sends them, the HTTP API receives them, workers poll.

The sandbox_hooks contracts back off 10-20 s after the first status read, so a
status read within a few seconds of a finished job can only be a webhook's doing;
the sandbox's request log says when every status read happened and its delivery
log what each webhook got back. Standard Webhooks 1.0 (webhook-id,
webhook-timestamp, webhook-signature) is the sandbox_hooks scheme; the hmac
scheme is sandbox_hooks_hmac's.
"""

from __future__ import annotations

import logging
import os
import secrets
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from redis import Redis

from jobwarden.api.app import create_app
from jobwarden.demo.harness import Stack, wait_for
from jobwarden.demo.sandbox.webhooks import signed_delivery
from jobwarden.models.persistence.db import transaction
from jobwarden.models.persistence.webhook_store import deliveries
from jobwarden.tasks.provider.webhooks import refused_count
from tests.acceptance.conftest import WEBHOOK_SECRET, Pipeline
from tests.api_server import serving

pytestmark = pytest.mark.usefixtures("stack")


@pytest.fixture(scope="module")
def api(stack: Stack) -> Iterator[str]:
    with serving(create_app()) as url:
        yield url


def _hook(api: str, provider: str, scheme: str, **options: bool) -> dict[str, Any]:
    return {"url": f"{api}/v1/webhooks/{provider}", "scheme": scheme, **options}


def _job_id(pipeline: Pipeline, op_id: str) -> str:
    def accepted() -> str:
        row = pipeline.row(op_id)
        return str(row.remote_job_id) if row is not None and row.remote_job_id else ""

    return wait_for(accepted, timeout=15, what=f"{op_id} accepted")


def _answered(pipeline: Pipeline, job_id: str, count: int = 1) -> list[dict[str, Any]]:
    """The job's first ``count`` webhook deliveries, once each has its answer."""

    def done() -> list[dict[str, Any]]:
        sent = pipeline.sandbox.webhook_deliveries(job_id)
        return sent if len(sent) >= count and all(d["answered"] for d in sent[:count]) else []

    return wait_for(done, timeout=20, what=f"{count} webhook deliveries for {job_id} answered")


def _status_reads(pipeline: Pipeline, op_id: str) -> list[dict[str, Any]]:
    return pipeline.job_requests(op_id, "status")


def _recorded(database_url: str, provider: str, event_id: str) -> list[Any]:
    with transaction(database_url) as session:
        return [(d.outcome, d.operation_id) for d in deliveries(session, provider, event_id)]


def test_a_standard_webhook_brings_exactly_one_status_read_forward_and_never_finishes_by_itself(
    pipeline: Pipeline, api: str, database_url: str
) -> None:
    op_id = pipeline.submit(
        {
            "seconds_to_finish": 2.0,
            "progress": False,
            "webhook": _hook(api, "sandbox_hooks", "standard"),
        },
        provider="sandbox_hooks",
    )
    job_id = _job_id(pipeline, op_id)
    (delivery,) = _answered(pipeline, job_id)
    assert (delivery["job_status"], delivery["http_status"]) == ("succeeded", 200)
    assert delivery["answer"]["outcome"] == "woke_poll"
    row = pipeline.wait_state(op_id, "succeeded", timeout=8)  # the backoff alone: 10 s or more
    reads = _status_reads(pipeline, op_id)
    before = [r for r in reads if r["monotonic"] < delivery["monotonic"]]
    after = [r for r in reads if r["monotonic"] > delivery["monotonic"]]
    assert [r["status"] for r in before] == [200]  # the first read found the job queued
    assert len(after) == 1  # exactly one status read followed the webhook
    kinds = pipeline.kinds(op_id)
    # The webhook is an observation; the status read after it is what moved the state.
    assert kinds.index("webhook_received") < kinds.index("result_collected")
    assert len(reads) == 2
    # Each read counted; a wake-up that waited past the sweeper's redispatch grace on a
    # loaded machine retires its reservation (counted, unused) and claims afresh.
    assert row.status_requests_used - len(reads) in (0, 1)
    assert _recorded(database_url, "sandbox_hooks", delivery["event_id"]) == [
        ("woke_poll", uuid.UUID(op_id))
    ]


def test_a_webhook_inside_a_retry_after_window_never_brings_the_status_read_before_its_end(
    pipeline: Pipeline, api: str
) -> None:
    op_id = pipeline.submit(
        {
            "seconds_to_finish": 1.0,
            "retry_after": 4,
            "progress": False,
            "webhook": _hook(api, "sandbox_hooks", "standard"),
        },
        provider="sandbox_hooks",
    )
    job_id = _job_id(pipeline, op_id)
    (delivery,) = _answered(pipeline, job_id)
    assert delivery["answer"]["outcome"] == "poll_already_due"
    pipeline.wait_state(op_id, "succeeded", timeout=15)
    reads = _status_reads(pipeline, op_id)
    assert reads[0]["retry_after"] == "4" and reads[0]["monotonic"] < delivery["monotonic"]
    after = [r for r in reads if r["monotonic"] > delivery["monotonic"]]
    assert len(after) == 1
    # RFC 9110 Retry-After: not before 4 s after the answer that said so.
    assert after[0]["monotonic"] >= reads[0]["monotonic"] + 4


def test_a_duplicate_hmac_delivery_is_recorded_once(
    pipeline: Pipeline, api: str, database_url: str
) -> None:
    op_id = pipeline.submit(
        {
            "seconds_to_finish": 1.0,
            "progress": False,
            "webhook": _hook(api, "sandbox_hooks_hmac", "hmac", duplicate=True),
        },
        provider="sandbox_hooks_hmac",
    )
    job_id = _job_id(pipeline, op_id)
    first, second = _answered(pipeline, job_id, 2)[:2]
    assert first["event_id"] == second["event_id"] and second["variant"] == "duplicate"
    assert (first["http_status"], second["http_status"]) == (200, 200)
    assert second["answer"]["outcome"] == "duplicate"
    pipeline.wait_state(op_id, "succeeded", timeout=10)
    assert len(_recorded(database_url, "sandbox_hooks_hmac", first["event_id"])) == 1
    assert pipeline.kinds(op_id).count("webhook_received") == 1
    # Two deliveries of one event bring one status read forward, not two.
    reads = _status_reads(pipeline, op_id)
    assert len([r for r in reads if r["monotonic"] > first["monotonic"]]) == 1


def test_an_out_of_order_delivery_after_the_end_is_recorded_and_changes_nothing(
    pipeline: Pipeline, api: str, database_url: str
) -> None:
    op_id = pipeline.submit(
        {
            "seconds_to_finish": 1.0,
            "progress": False,
            "webhook": _hook(api, "sandbox_hooks", "standard", out_of_order=True),
        },
        provider="sandbox_hooks",
    )
    job_id = _job_id(pipeline, op_id)
    finished, late = _answered(pipeline, job_id, 2)[:2]
    assert (finished["job_status"], late["job_status"], late["variant"]) == (
        "succeeded",
        "running",
        "out_of_order",
    )
    # Sent after the result download; received once the collect step let go of the lease.
    assert (late["http_status"], late["answer"]["outcome"]) == (200, "finished")
    row = pipeline.wait_state(op_id, "succeeded", timeout=5)
    assert row.next_poll_at is None
    assert not [r for r in _status_reads(pipeline, op_id) if r["monotonic"] > late["monotonic"]]
    assert pipeline.kinds(op_id)[-1] == "webhook_received"
    assert _recorded(database_url, "sandbox_hooks", late["event_id"]) == [
        ("finished", uuid.UUID(op_id))
    ]


@pytest.mark.parametrize(("variant", "status"), [("forged", 401), ("stale", 400)])
def test_forged_and_stale_deliveries_are_refused_and_leave_only_a_counter(
    pipeline: Pipeline,
    api: str,
    database_url: str,
    redis_client: Redis,
    variant: str,
    status: int,
) -> None:
    prefix = os.environ["JOBWARDEN_KEY_PREFIX"]
    counted = refused_count(redis_client, prefix, "sandbox_hooks", variant)
    op_id = pipeline.submit(
        {
            "seconds_to_finish": 1.0,
            "progress": False,
            "webhook": _hook(api, "sandbox_hooks", "standard", **{variant: True}),
        },
        provider="sandbox_hooks",
    )
    job_id = _job_id(pipeline, op_id)
    (delivery,) = _answered(pipeline, job_id)
    assert delivery["http_status"] == status
    assert delivery["answer"]["type"].endswith(f"webhook_{variant}")
    assert refused_count(redis_client, prefix, "sandbox_hooks", variant) == counted + 1
    assert _recorded(database_url, "sandbox_hooks", delivery["event_id"]) == []
    assert "webhook_received" not in pipeline.kinds(op_id)
    row = pipeline.row(op_id)
    assert row.state.value == "observing"  # still waiting out its backoff
    # Nothing brought forward: the next read is still the 10-20 s backoff's, and none
    # followed the refused delivery.
    assert row.next_poll_at is not None
    assert row.next_poll_at > datetime.now(UTC) + timedelta(seconds=5)
    reads = _status_reads(pipeline, op_id)
    assert [r for r in reads if r["monotonic"] > delivery["monotonic"]] == []


def test_a_delivery_for_an_unknown_job_is_acknowledged_and_logged_once(
    api: str, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    event_id = f"evt_{secrets.token_hex(8)}"
    headers, body = signed_delivery("standard", WEBHOOK_SECRET, event_id, "job_nobody", "running")
    with caplog.at_level(logging.INFO, logger="jobwarden.webhooks"):
        answer = httpx.post(f"{api}/v1/webhooks/sandbox_hooks", content=body, headers=headers)
    assert answer.status_code == 202, answer.text
    assert answer.json() == {"outcome": "unknown_job", "event_id": event_id}
    lines = [r.getMessage() for r in caplog.records if "webhook_unknown_job" in r.getMessage()]
    assert len(lines) == 1 and event_id in lines[0]
    assert _recorded(database_url, "sandbox_hooks", event_id) == [("unknown_job", None)]


def test_a_provider_without_a_webhook_table_has_no_receiver(api: str) -> None:
    headers, body = signed_delivery("standard", WEBHOOK_SECRET, "evt_x", "job_x", "running")
    answer = httpx.post(f"{api}/v1/webhooks/sandbox", content=body, headers=headers)
    assert answer.status_code == 404
    assert answer.headers["content-type"].startswith("application/problem+json")
