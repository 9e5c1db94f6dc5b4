"""A result is an artifact, not a column (issue 21; DESIGN invariant 14), with real workers
and the sandbox provider: a result past 64 KiB streams into the result store and the
row holds where it is and how to check it; a small one stays inline; `jobwarden verify`
reads the object back and names one that was deleted or replaced."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path
from urllib.parse import unquote, urlsplit

from jobwarden.demo.harness import Stack
from tests.acceptance.conftest import Pipeline
from tests.cli_runner import CliResult
from tests.integration.test_cli import _cli


def _row(pipeline: Pipeline, op: str) -> tuple[bytes | None, str | None, str, int]:
    from jobwarden.models.persistence import result_rows
    from jobwarden.models.persistence.db import transaction

    with transaction(pipeline.database_url) as session:
        found = result_rows.result_of(session, uuid.UUID(op))
    assert found is not None
    return found.content, found.location, found.sha256, found.size_bytes


def _verify(op: str) -> CliResult:
    return _cli("verify", op)


def test_a_large_result_streams_into_the_store_and_verify_reads_it_back(
    stack: Stack, pipeline: Pipeline
) -> None:
    op = pipeline.submit({"polls_to_finish": 1, "result_items": 4000})
    row = pipeline.wait_state(op)
    assert row.state == "succeeded", pipeline.kinds(op)
    content, location, sha256, size = _row(pipeline, op)
    assert content is None and location is not None and size > 64 * 1024
    assert row.validation_summary["location"] == location
    path = Path(unquote(urlsplit(location).path))
    stored = path.read_bytes()
    assert (hashlib.sha256(stored).hexdigest(), len(stored)) == (sha256, size)
    # The sandbox's own copy of what it sent: the stored bytes are exactly those.
    sent = pipeline.job_requests(op, "result")
    assert len(sent) == 1
    collected = next(e for e in pipeline.events(op) if e.draft.kind.value == "result_collected")
    assert collected.draft.excerpt["sha256"] == sha256
    assert _verify(op).returncode == 0

    # Replaced by bytes of the same size: the digest names it.
    path.write_bytes(stored.replace(b"item-1", b"item-9", 1))
    replaced = _verify(op)
    assert replaced.returncode == 1 and f"{location}: sha256" in replaced.stdout + replaced.stderr
    # Deleted: named as missing.
    path.unlink()
    missing = _verify(op)
    assert missing.returncode == 1 and f"{location}: missing" in missing.stdout + missing.stderr


def test_a_small_result_stays_inline_beside_its_facts(stack: Stack, pipeline: Pipeline) -> None:
    op = pipeline.submit({"polls_to_finish": 1, "result_items": 3})
    assert pipeline.wait_state(op).state == "succeeded"
    content, location, sha256, size = _row(pipeline, op)
    assert location is None and content is not None
    assert (hashlib.sha256(content).hexdigest(), len(content)) == (sha256, size)
    assert _verify(op).returncode == 0


def test_a_cancelled_jobs_partial_output_is_collected_labelled_and_the_operation_ends_cancelled(
    stack: Stack, pipeline: Pipeline
) -> None:
    # OpenAI Batch guide: a cancelled batch keeps the requests it completed in its output
    # file; the sandbox's partial_on_cancel names such output in the cancelled status.
    from jobwarden.tasks.humans.interventions import request_cancel

    op = pipeline.submit(
        {"polls_to_finish": 1000, "partial_on_cancel": True, "result_items": 7},
        provider="sandbox_partial",
    )
    pipeline.wait_state(op, "observing")
    request_cancel(op, "pytest", "the export is no longer needed")
    row = pipeline.wait_state(op)
    assert row.state == "cancelled", pipeline.kinds(op)
    summary = row.validation_summary
    assert summary["partial"] is True and summary["kept"] is True
    moves = [e.draft.to_state for e in pipeline.events(op) if e.draft.to_state]
    assert moves[-3:] == ["cancelling", "result_collecting", "cancelled"]
    ended = pipeline.events(op)[-1].draft
    assert (ended.kind.value, ended.cause) == (
        "cancel_confirmed",
        "remote_cancelled; partial output collected",
    )
    ((content, sha256, _),) = pipeline.stored_results(op)
    assert hashlib.sha256(content).hexdigest() == sha256 == summary["sha256"]
    assert "succeeded" not in moves  # kept, never a success
    assert _verify(op).returncode == 0
