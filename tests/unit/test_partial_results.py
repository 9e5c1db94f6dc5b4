"""Partial output after a cancel or an expiry (issue 21): the OpenAI Batch guide says a
cancelled batch keeps the lines it completed and an expired batch's completed requests
"are made available via the batch's output file". That output is collected and recorded
as partial — kept, never a success, never hidden — and the operation still ends as the
job really ended (``[result] partial_after``)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from jobwarden.models.actions import Collect, Finish, ProviderRequest, RequestPurpose, Send
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.results.decisions import after_collect, before_collect
from jobwarden.models.results.validation import Collected, validate_result
from jobwarden.models.states import OperationState as S
from jobwarden.models.steps import after_poll
from tests.unit.factories import NOW, context, operation, planned, reply, walked

OPENAI = context("openai_batch")
STATUS = "https://api.openai.com/v1/batches/batch_1"


def _batch(status: str, output: str | None) -> dict[str, object]:
    return {
        "id": "batch_1",
        "object": "batch",
        "status": status,
        "output_file_id": output,
        "error_file_id": None,
        "request_counts": {"total": 10, "completed": 4, "failed": 0},
    }


def _polled(state: S) -> Operation:
    return operation(
        state,
        provider="openai_batch",
        remote_job_id="batch_1",
        status_url=STATUS,
        status_requests_used=3,
        reserved_request=None,
    )


def _poll(op: Operation, body: dict[str, object], ctx: StepContext = OPENAI) -> object:
    asked = ProviderRequest(purpose=RequestPurpose.status, method="GET", url=STATUS)
    return after_poll(op, ctx, asked, reply(200, body), NOW, 0.5).action


@pytest.mark.parametrize(("state", "end"), [(S.cancelling, "cancelled"), (S.observing, "expired")])
def test_a_batch_that_ended_with_completed_lines_goes_to_collect_them_first(
    state: S, end: str
) -> None:
    action = _poll(_polled(state), _batch(end, "file-partial"))
    assert isinstance(action, Collect)
    assert action.result_ref == "file-partial"
    assert action.expected["partial"] == end


def test_an_end_without_output_or_without_the_contract_saying_so_ends_at_once() -> None:
    action = _poll(_polled(S.cancelling), _batch("cancelled", None))
    assert isinstance(action, Finish) and action.state is S.cancelled
    assert action.event is EventKind.cancel_confirmed
    spec = OPENAI.contract.result
    assert spec is not None
    silent = replace(
        OPENAI, contract=replace(OPENAI.contract, result=replace(spec, partial_after=()))
    )
    action = _poll(_polled(S.cancelling), _batch("cancelled", "file-partial"), silent)
    assert isinstance(action, Finish) and action.state is S.cancelled


def _collecting(end: str) -> Operation:
    return operation(
        S.result_collecting,
        provider="openai_batch",
        remote_job_id="batch_1",
        status_url=STATUS,
        result_reference="file-partial",
        validation_summary={
            "expected": {
                "declared_counts": {"total": 10, "completed": 4, "failed": 0},
                "partial": end,
                "partial_reason": f"remote_{end}",
            }
        },
    )


def _lines(n: int) -> bytes:
    return b"\n".join(
        json.dumps({"custom_id": f"request-{i}", "response": {"status_code": 200}}).encode()
        for i in range(n)
    )


def test_partial_output_is_kept_and_labelled_and_the_operation_ends_cancelled() -> None:
    op = _collecting("cancelled")
    send = before_collect(op, OPENAI, NOW).action
    assert isinstance(send, Send)
    spec = OPENAI.contract.result
    assert spec is not None
    promised = dict((op.validation_summary or {})["expected"])
    verdict = validate_result(spec, content=_lines(4), content_type=None, promised=promised)
    location = "file:///results/t/op/result"
    answer = replace(
        reply(200), collected=Collected(verdict=verdict, location=location, inline=None)
    )
    decided = after_collect(op, OPENAI, send.request, answer, NOW, 0.5)
    action = decided.action
    assert isinstance(action, Finish)
    assert (action.state, action.event) == (S.cancelled, EventKind.cancel_confirmed)
    assert action.reason == "remote_cancelled; partial output collected"
    assert action.summary is not None and action.summary["partial"] is True
    assert action.summary["succeeded_items"] == 4
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == [S.cancelled]
    assert p.result is not None and p.result.location == location  # kept, never hidden
    assert p.changes["validation_summary"]["location"] == location  # type: ignore[index]


def test_partial_output_that_cannot_be_had_still_ends_as_the_job_ended_saying_so() -> None:
    op = _collecting("expired")
    send = before_collect(op, OPENAI, NOW).action
    assert isinstance(send, Send)
    decided = after_collect(op, OPENAI, send.request, reply(404), NOW, 0.5)
    assert isinstance(decided.action, Finish)
    assert decided.action.state is S.expired
    assert (
        decided.action.reason
        == "remote_expired; partial output unavailable: HTTP 404 fetching the result"
    )
    assert planned(op, decided, answer=reply(404)).result is None
