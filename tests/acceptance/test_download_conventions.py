"""Result download conventions end to end (issue 21): real workers and beat against the
sandbox, each test naming the public doc its sandbox behaviour models
(jobwarden/demo/sandbox/downloads.py, jobwarden/demo/sandbox/conventions.py).

- Amazon S3 User Guide, "Download and upload objects with presigned URLs": a presigned URL
  works until X-Amz-Date + X-Amz-Expires, then answers 403 AccessDenied "Request has
  expired"; the provider's next status read presigns a fresh one.
- One-time download links (no standard; the common pattern): the first GET consumes the
  link, a second answers 410 Gone, so a cut-off first download must never be retried.
- OpenAI Batch: the batch object's ``error_file_id``, read through the Files API
  (``GET /v1/files/{file_id}/content``), holds one line per failed request, counted by
  ``request_counts.failed``; the output file holds only the succeeded ones.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest

from tests.acceptance.conftest import Pipeline

pytestmark = pytest.mark.usefixtures("stack")

FINISHED = {"polls_to_finish": 1}


def _stored(pipeline: Pipeline, op: str) -> Any:
    from jobwarden.models.persistence import result_rows
    from jobwarden.models.persistence.db import transaction

    with transaction(pipeline.database_url) as session:
        return result_rows.result_of(session, uuid.UUID(op))


def _object_bytes(location: str) -> bytes:
    from jobwarden.tasks.runtime import current

    return b"".join(current().result_store.read(location))


def _sandbox_digest(pipeline: Pipeline, job: str) -> str:
    import httpx

    from tests.acceptance.conftest import TOKEN

    headers = {"Authorization": f"Bearer {TOKEN}"}
    status = httpx.get(f"{pipeline.sandbox.url}/v1/jobs/{job}", headers=headers, timeout=5)
    return str(status.json()["result"]["sha256"])


def _moves(pipeline: Pipeline, op: str) -> list[str]:
    return [e.draft.to_state for e in pipeline.events(op) if e.draft.to_state is not None]


# -------------------------------------------------- Amazon S3 presigned URLs (expiring)


def test_an_expired_presigned_url_is_read_again_fresh_and_the_result_collected(
    pipeline: Pipeline,
) -> None:
    # The first URL the status hands out was signed 30 s ago for 30 s: already expired.
    behaviour = {**FINISHED, "result_url_expires_in": 30, "result_url_expired_first": True}
    op = pipeline.submit(behaviour, provider="sandbox_presigned")

    row = pipeline.wait_state(op)
    assert row.state == "succeeded", (row.validation_summary, pipeline.kinds(op))
    moves = _moves(pipeline, op)
    # Collecting, back to observing for a fresh URL, collecting again, done.
    at = moves.index("result_collecting")
    assert moves[at:] == ["result_collecting", "observing", "result_collecting", "succeeded"]
    causes = [e.draft.cause or "" for e in pipeline.events(op)]
    assert any("expired" in c and "fresh" in c for c in causes), causes
    downloads = pipeline.job_requests(op, "result")
    # The stale URL is not asked for (its end had come) or answered 403 once at most.
    assert [d["status"] for d in downloads[:-1]] in ([], [403])
    assert downloads[-1]["status"] == 200
    assert "X-Amz-Signature=" in (downloads[-1]["query"] or "")
    (job,) = pipeline.remote_jobs(op)
    assert job["status_calls"] >= 2  # the fresh URL came from a second status read
    # The stored result's digest is the sandbox's (the one its status body names).
    (result,) = pipeline.stored_results(op)
    assert _stored(pipeline, op).sha256 == result[1] == hashlib.sha256(result[0]).hexdigest()
    assert result[1] == _sandbox_digest(pipeline, row.remote_job_id)


def test_without_refresh_an_expired_presigned_url_ends_result_unavailable_unrequested(
    pipeline: Pipeline,
) -> None:
    behaviour = {**FINISHED, "result_url_expires_in": 30, "result_url_expired_first": True}
    op = pipeline.submit(behaviour, provider="sandbox_presigned_once")

    row = pipeline.wait_state(op)
    assert row.state == "result_unavailable", pipeline.kinds(op)
    assert "the result URL expired at" in row.validation_summary["problem"]
    assert "before it was fetched" in row.validation_summary["problem"]
    assert pipeline.job_requests(op, "result") == []  # no GET of a URL past its end
    assert (
        "observing" not in _moves(pipeline, op)[_moves(pipeline, op).index("result_collecting") :]
    )
    assert pipeline.stored_results(op) == []


def test_a_presigned_url_within_its_time_is_collected_at_the_first_attempt(
    pipeline: Pipeline,
) -> None:
    op = pipeline.submit({**FINISHED, "result_url_expires_in": 60}, provider="sandbox_presigned")
    row = pipeline.wait_state(op)
    assert row.state == "succeeded", row.validation_summary
    (download,) = pipeline.job_requests(op, "result")
    assert download["status"] == 200
    assert _moves(pipeline, op).count("observing") == 1
    # Invariant 10: the presigned URL is its own authorization; the provider's bearer
    # token stays home (S3 refuses both at once: "Only one auth mechanism allowed").
    assert download["authorized"] is False
    assert all(r["authorized"] for r in pipeline.job_requests(op, "status"))


# ------------------------------------------------------------- one-time download links


def test_a_single_use_download_cut_off_mid_body_is_never_requested_again(
    pipeline: Pipeline,
) -> None:
    from jobwarden.tasks.humans.interventions import escalation_options

    behaviour = {**FINISHED, "result_single_use": True, "result_cut_after_bytes": 100}
    op = pipeline.submit(behaviour, provider="sandbox_single_use")

    row = pipeline.wait_state(op)
    assert row.state == "result_unavailable", pipeline.kinds(op)
    assert "single-use" in row.validation_summary["problem"]
    (download,) = pipeline.job_requests(op, "result")  # exactly one GET, never a second
    assert download["status"] == 200  # answered, then cut off after 100 bytes
    assert pipeline.stored_results(op) == []
    assert "resubmit" in [o.kind.value for o in escalation_options(op)]


def test_a_single_use_download_that_succeeds_is_stored_normally(pipeline: Pipeline) -> None:
    op = pipeline.submit({**FINISHED, "result_single_use": True}, provider="sandbox_single_use")
    row = pipeline.wait_state(op)
    assert row.state == "succeeded", row.validation_summary
    (download,) = pipeline.job_requests(op, "result")
    assert download["status"] == 200
    ((content, sha256, count),) = pipeline.stored_results(op)
    assert sha256 == hashlib.sha256(content).hexdigest()
    assert count == 10


# -------------------------------------------------------------- OpenAI Batch error file

TWO_OF_FIVE = {**FINISHED, "result_shape": "openai_jsonl", "result_items": 5}


def test_an_openai_batch_error_file_is_fetched_stored_and_counted_against_request_counts(
    pipeline: Pipeline,
) -> None:
    op = pipeline.submit({**TWO_OF_FIVE, "result_failed_items": 2}, provider="sandbox_openai_files")
    row = pipeline.wait_state(op)
    assert row.state == "succeeded", row.validation_summary
    summary = row.validation_summary
    assert summary["declared_counts"] == {"completed": 3, "failed": 2, "total": 5}
    assert (summary["succeeded_items"], summary["failed_item_count"]) == (3, 2)
    assert summary["failed_item_refs"] == ["item-4", "item-5"]
    job = row.remote_job_id
    assert summary["failed_items_file"] == f"file-err-{job}"

    # The error file first, then the output file; each once.
    (error_file,) = pipeline.job_requests(op, "error_file")
    (output,) = pipeline.job_requests(op, "result")
    assert error_file["path"] == f"/v1/files/file-err-{job}/content"
    assert error_file["seq"] < output["seq"]
    (collected,) = [
        e for e in pipeline.events(op) if e.draft.kind.value == "failed_items_collected"
    ]
    facts = collected.draft.excerpt
    assert (facts["lines"], facts["refs"]) == (2, ["item-4", "item-5"])
    # Stored in the result store with the digest recorded.
    assert summary["failed_items_location"] == facts["location"]
    stored = _object_bytes(facts["location"])
    assert hashlib.sha256(stored).hexdigest() == facts["sha256"]
    assert len(stored) == facts["size_bytes"]
    assert [b'"custom_id": "item-4"' in stored, b'"custom_id": "item-5"' in stored] == [True, True]


def test_an_openai_batch_whose_request_counts_lie_about_failures_fails_validation(
    pipeline: Pipeline,
) -> None:
    # request_counts says 3 + 1 = 4 (adding up); the error file holds 2 lines: only the
    # counted file gives the lie away (inferred from the counts, it would pass).
    behaviour = {**TWO_OF_FIVE, "result_failed_items": 2, "declared_failed_items": 1}
    op = pipeline.submit(behaviour, provider="sandbox_openai_files")
    row = pipeline.wait_state(op)
    assert row.state == "result_validation_failed", row.validation_summary
    summary = row.validation_summary
    assert summary["failed_item_count"] == 2
    assert summary["declared_counts"] == {"completed": 3, "failed": 1, "total": 4}
    assert "failed" in summary["problem"], summary
    assert len(pipeline.job_requests(op, "error_file")) == 1
