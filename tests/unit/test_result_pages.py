"""A paged final result ([ARM-PAGING]: ``{"value": [...], "nextLink": ...}``, Microsoft's
``LroPaging_postPagingLro``) is collected page by page into one artifact: each page a
counted fetch from an allowed origin, bounded in pages and bytes, its items counted."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from jobwarden.models.actions import (
    Decided,
    Escalate,
    Finish,
    Record,
    RequestPurpose,
    Send,
    Succeed,
)
from jobwarden.models.operation import Operation
from jobwarden.models.result_decisions import after_collect, before_collect
from jobwarden.models.result_pages import MAX_PAGES
from jobwarden.models.states import OperationState as S
from tests.unit.factories import NOW, context, operation, reply

ARM = context("azure_arm")
LOC = f"{ARM.base_url}/subscriptions/s/providers/p/locations/eastus/operations/paged"
NEXT = LOC + "/nextPage?api-version=1"


def _collecting(first: object, **more: Any) -> Operation:
    expected = {"final": "body", "final_rule": "the final answer's body", "inline": first}
    return operation(
        S.result_collecting,
        provider="azure_arm",
        status_url=LOC,
        validation_summary={"expected": expected, **more},
        collect_deadline=NOW + timedelta(hours=1),
    )


def _answer(op: Operation, send: Send, code: int, body: object) -> Decided:
    raw = reply(code, body, content=json.dumps(body).encode())
    return after_collect(op, ARM, send.request, raw, NOW, 0.5)


def _held(op: Operation, decided: Decided) -> Operation:
    return op.with_changes(
        {
            "validation_summary": decided.changes["validation_summary"],
            "result_fetch_attempts": op.result_fetch_attempts + 1,
        }
    )


def test_a_paged_final_result_is_collected_page_by_page_into_one_artifact() -> None:
    op = _collecting({"value": [{"n": 1}, {"n": 2}], "nextLink": "nextPage?api-version=1"})
    send = before_collect(op, ARM, NOW).action
    # The relative nextLink resolves against the Location whose answer named it (RFC 3986 5).
    assert isinstance(send, Send) and send.request.url == LOC.rsplit("/", 1)[0] + (
        "/nextPage?api-version=1"
    )
    assert send.request.purpose is RequestPurpose.result_page
    assert send.counters == {"result_fetch_attempts": 1}
    page = _answer(op, send, 200, {"value": [{"n": 3}], "nextLink": NEXT})
    assert isinstance(page.action, Record) and page.action.excerpt["items"] == 3
    op = _held(op, page)
    send = before_collect(op, ARM, NOW).action
    assert isinstance(send, Send) and send.request.url == NEXT
    last = _answer(op, send, 200, {"value": [{"n": 4}]})
    op = _held(op, last)
    done = before_collect(op, ARM, NOW).action
    assert isinstance(done, Succeed) and done.content is not None
    assert json.loads(done.content) == {"value": [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}]}
    assert done.verdict is not None and done.verdict.record_count == 4


def test_a_next_page_on_a_foreign_origin_is_never_requested() -> None:
    op = _collecting({"value": [], "nextLink": "https://evil.example/page2"})
    action = before_collect(op, ARM, NOW).action
    assert isinstance(action, Escalate) and action.reason.value == "contract_violation"
    assert "page 2" in action.detail and "https://evil.example/page2" in action.detail


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"items": []}, "is not a list page"),
        ("text", "is not a list page"),
    ],
)
def test_a_page_that_is_not_a_list_page_makes_the_result_unavailable(
    body: object, words: str
) -> None:
    op = _collecting({"value": [1], "nextLink": NEXT})
    send = before_collect(op, ARM, NOW).action
    assert isinstance(send, Send)
    ended = _answer(op, send, 200, body).action
    assert isinstance(ended, Finish) and ended.state is S.result_unavailable
    assert words in ended.reason


def test_a_paged_result_stops_at_its_page_bound() -> None:
    paging = {"items": [], "pages": MAX_PAGES - 1, "bytes": 10, "next": NEXT}
    op = _collecting({"value": [], "nextLink": NEXT})
    summary = dict(op.validation_summary or {})
    summary["expected"] = {**summary["expected"], "paging": paging}
    op = op.with_changes({"validation_summary": summary})
    send = before_collect(op, ARM, NOW).action
    assert isinstance(send, Send)
    ended = _answer(op, send, 200, {"value": [], "nextLink": NEXT}).action
    assert isinstance(ended, Finish) and f"more than {MAX_PAGES} pages" in ended.reason


def test_a_final_list_without_a_next_link_is_the_result_as_it_is() -> None:
    body = {"value": [{"n": 1}]}
    done = before_collect(_collecting(body), ARM, NOW).action
    assert isinstance(done, Succeed) and done.content is not None
    assert json.loads(done.content) == body
