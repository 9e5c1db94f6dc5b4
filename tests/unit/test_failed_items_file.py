"""The failed-items file (issue 21): OpenAI Batch keeps failed requests in a second file
(the batch object's ``error_file_id``; Files API ``GET /v1/files/{file_id}/content``, one
JSON line per failed request with its ``custom_id``). It is fetched before the output,
stored, and its lines counted against ``request_counts.failed`` with their references
recorded, instead of the count being inferred from the status body."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from jobwarden.models.actions import Record, RequestPurpose, Send
from jobwarden.models.contracts.contract import ResultSpec
from jobwarden.models.effects import plan
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.provider.signals import RawResponse
from jobwarden.models.results.decisions import after_collect, before_collect
from jobwarden.models.results.validation import Collected, failed_lines_spec, validate_result
from jobwarden.models.states import OperationState as S
from tests.unit.factories import NOW, context, operation, reply

OPENAI = context("openai_batch")


def _spec(ctx: StepContext = OPENAI) -> ResultSpec:
    assert ctx.contract.result is not None
    return ctx.contract.result


def _error_line(n: int) -> bytes:
    return json.dumps(
        {
            "id": f"batch_req_{n}",
            "custom_id": f"request-{n}",
            "response": {"status_code": 400, "body": {"error": {"message": "bad"}}},
            "error": None,
        }
    ).encode()


def _output_line(n: int) -> bytes:
    return json.dumps(
        {"custom_id": f"request-{n}", "response": {"status_code": 200}, "error": None}
    ).encode()


def _collecting(failed: int, **expected: Any) -> Operation:
    promised = {
        "declared_counts": {"completed": 3, "failed": failed, "total": 3 + failed},
        "error_file": "file-err1",
        **expected,
    }
    return operation(
        S.result_collecting,
        provider="openai_batch",
        remote_job_id="batch_1",
        status_url="https://api.openai.com/v1/batches/batch_1",
        result_reference="file-out1",
        validation_summary={"expected": promised},
    )


def _stored(spec: ResultSpec, content: bytes, location: str) -> RawResponse:
    verdict = validate_result(spec, content=content, content_type=None)
    answer = reply(200, content=b"", content_type="application/octet-stream")
    return replace(answer, collected=Collected(verdict=verdict, location=location, inline=None))


def test_the_failed_items_file_is_fetched_first_then_the_output() -> None:
    op = _collecting(2)
    first = before_collect(op, OPENAI, NOW).action
    assert isinstance(first, Send)
    assert first.request.purpose is RequestPurpose.failed_items
    assert first.request.url == "https://api.openai.com/v1/files/file-err1/content"
    assert first.counters == {"result_fetch_attempts": 1}

    lines = b"\n".join(_error_line(n) for n in (4, 5)) + b"\n"
    location = "file:///results/t/op/failed_items"
    answer = _stored(failed_lines_spec(_spec()), lines, location)
    recorded = after_collect(op, OPENAI, first.request, answer, NOW, 0.5)
    assert isinstance(recorded.action, Record)
    assert recorded.action.event is EventKind.failed_items_collected
    summary = recorded.changes["validation_summary"]
    assert summary is not None
    facts = summary["expected"]["failed_file"]
    assert facts["location"] == location and facts["lines"] == 2
    assert facts["refs"] == ["request-4", "request-5"]
    written = plan(op, recorded, actor="worker:w", now=NOW, answer=answer, max_countdown=3.0)
    assert written.next_at == NOW  # the output is fetched next, at once

    after = op.with_changes(written.changes | {"result_fetch_attempts": 1})
    second = before_collect(after, OPENAI, NOW).action
    assert isinstance(second, Send) and second.request.purpose is RequestPurpose.result
    assert second.request.url == "https://api.openai.com/v1/files/file-out1/content"


def _judged(op: Operation, output: bytes) -> Any:
    promised = (op.validation_summary or {})["expected"]
    return validate_result(_spec(), content=output, content_type=None, promised=promised)


def test_the_files_lines_are_counted_against_the_declared_failures_with_their_references() -> None:
    facts = {"location": "file:///f", "lines": 2, "refs": ["request-4", "request-5"]}
    output = b"\n".join(_output_line(n) for n in (1, 2, 3))
    verdict = _judged(_collecting(2, failed_file=facts), output)
    assert verdict.valid, verdict.problem
    assert (verdict.succeeded_items, verdict.failed_count) == (3, 2)
    assert verdict.failed_refs == ("request-4", "request-5")
    assert verdict.summary()["failed_items_location"] == "file:///f"
    # The status body says 3 failed, the file holds 2: a disagreement, never papered over.
    short = _judged(_collecting(3, failed_file=facts), output)
    assert short.problem == "the status body says 3 failed, the result has 2 failed items"


def test_a_missing_failed_items_file_is_recorded_and_its_count_inferred_as_before() -> None:
    op = _collecting(2)
    first = before_collect(op, OPENAI, NOW).action
    assert isinstance(first, Send)
    gone = after_collect(op, OPENAI, first.request, reply(404), NOW, 0.5)
    assert isinstance(gone.action, Record)
    summary = gone.changes["validation_summary"]
    assert summary is not None
    facts = summary["expected"]["failed_file"]
    assert facts == {"problem": "HTTP 404", "fetches": 0}
    verdict = _judged(_collecting(2, failed_file=facts), _output_line(1) + b"\n")
    assert verdict.failed_count == 2 and verdict.failed_elsewhere == 1 + 1  # inferred


def test_without_a_failed_items_path_only_the_output_is_fetched() -> None:
    spec = replace(_spec(), error_file_path=None)
    ctx = replace(OPENAI, contract=replace(OPENAI.contract, result=spec))
    send = before_collect(_collecting(2), ctx, NOW).action
    assert isinstance(send, Send) and send.request.purpose is RequestPurpose.result
