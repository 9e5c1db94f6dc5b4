"""A paged final result ([ARM-PAGING]: ``{"value": [...], "nextLink": ...}``, Microsoft's
``LroPaging_postPagingLro``) is collected page by page into one artifact: each page a
counted fetch from an allowed origin, bounded in pages and bytes, its items counted."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.actions import (
    Decided,
    Escalate,
    Finish,
    Record,
    RequestPurpose,
    Send,
    Succeed,
)
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.errors import ContractError
from jobwarden.models.operation import Operation
from jobwarden.models.provider.pointers import resolve_pointer
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.results.decisions import after_collect, before_collect
from jobwarden.models.results.pages import MAX_PAGES, PageShape, paged_artifact
from jobwarden.models.results.validation import Collected, validate_result
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


# --- a fetched final result that is the first page (fetch = "url") ----------------------

TARGET = f"{ARM.base_url}/subscriptions/s/providers/p/exports/e1?api-version=1"


def _fetching(ctx: StepContext, ref: str | None, expected: dict[str, Any]) -> Operation:
    return operation(
        S.result_collecting,
        provider=ctx.contract.name,
        result_reference=ref,
        validation_summary={"expected": expected},
        collect_deadline=NOW + timedelta(hours=1),
    )


def _fetched(ctx: StepContext, op: Operation, send: Send, body: object, stream: bool) -> Decided:
    """A result download's answer: as the edge streams it (``Collected``) or as bytes."""
    content = json.dumps(body).encode()
    raw = reply(200, None, content=content)
    if stream and ctx.contract.result is not None:
        spec = ctx.contract.result
        verdict = validate_result(spec, content=content, content_type="application/json")
        collected = Collected(verdict=verdict, location="file:///r", inline=None, page=content)
        raw = replace(raw, collected=collected)
    return after_collect(op, ctx, send.request, raw, NOW, 0.5)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "in bytes"])
def test_a_fetched_final_result_with_a_next_link_is_collected_page_by_page(stream: bool) -> None:
    # [ARM-PAGING] a resourceLocation whose answer is the first page of a list.
    op = _fetching(ARM, TARGET, {"final": "url", "final_rule": "the monitor's resourceLocation"})
    send = before_collect(op, ARM, NOW).action
    assert isinstance(send, Send) and send.request.purpose is RequestPurpose.result
    page = _fetched(ARM, op, send, {"value": [{"n": 1}], "nextLink": "e1/page2"}, stream)
    assert isinstance(page.action, Record), page.action
    assert page.action.excerpt["page"] == 1 and page.action.excerpt["items"] == 1
    op = _held(op, page)
    send = before_collect(op, ARM, NOW).action
    # Resolved against the URL that answered the first page (RFC 3986 section 5).
    assert isinstance(send, Send) and send.request.purpose is RequestPurpose.result_page
    assert send.request.url == f"{ARM.base_url}/subscriptions/s/providers/p/exports/e1/page2"
    assert send.counters == {"result_fetch_attempts": 2}
    op = _held(op, _answer(op, send, 200, {"value": [{"n": 2}, {"n": 3}]}))
    done = before_collect(op, ARM, NOW).action
    assert isinstance(done, Succeed) and done.content is not None
    assert json.loads(done.content) == {"value": [{"n": 1}, {"n": 2}, {"n": 3}]}
    assert done.verdict is not None and done.verdict.record_count == 3


def test_a_fetched_first_page_whose_next_link_is_foreign_is_never_followed() -> None:
    op = _fetching(ARM, TARGET, {"final": "url"})
    send = before_collect(op, ARM, NOW).action
    assert isinstance(send, Send)
    page = _fetched(ARM, op, send, {"value": [], "nextLink": "https://evil.example/p2"}, True)
    op = _held(op, page)
    action = before_collect(op, ARM, NOW).action
    assert isinstance(action, Escalate) and action.reason.value == "contract_violation"
    assert "https://evil.example/p2" in action.detail


def test_a_fetched_result_without_a_next_link_is_the_result_as_it_is() -> None:
    op = _fetching(ARM, TARGET, {"final": "url"})
    send = before_collect(op, ARM, NOW).action
    assert isinstance(send, Send)
    done = _fetched(ARM, op, send, {"id": "/x", "properties": {}}, True).action
    assert isinstance(done, Succeed) and done.location == "file:///r"


# --- a contract's own next-link pointer ---------------------------------------------------

PAGED_FILE = Path(__file__).parent / "contracts" / "valid" / "paged_export.toml"
PAGED_TEXT = PAGED_FILE.read_text()
PAGED = load_contract(PAGED_FILE)
PLAIN = StepContext(contract=PAGED, base_url=PAGED.base_url)


def test_a_contracts_own_next_link_pointer_pages_its_result_under_no_convention() -> None:
    assert PAGED.result is not None and PAGED.result.next_link_pointer == "/links/next"
    op = _fetching(PLAIN, "/v1/files/1", {})
    send = before_collect(op, PLAIN, NOW).action
    assert isinstance(send, Send) and send.request.url == f"{PAGED.base_url}/v1/files/1"
    first = {"items": [{"id": 1, "state": "ok"}], "links": {"next": "1?page=2"}}
    op = _held(op, _fetched(PLAIN, op, send, first, True))
    send = before_collect(op, PLAIN, NOW).action
    assert isinstance(send, Send) and send.request.url == f"{PAGED.base_url}/v1/files/1?page=2"
    last: dict[str, Any] = {"items": [{"id": 2, "state": "failed"}], "links": {}}
    raw = reply(200, last, content=json.dumps(last).encode())
    op = _held(op, after_collect(op, PLAIN, send.request, raw, NOW, 0.5))
    done = before_collect(op, PLAIN, NOW).action
    # The artifact holds the items where the contract's items_pointer finds them.
    assert isinstance(done, Succeed) and done.content is not None
    assert json.loads(done.content) == {"items": [{"id": 1, "state": "ok"}, last["items"][0]]}
    assert done.verdict is not None and done.verdict.failed_count == 1


def test_without_a_next_link_pointer_a_plain_result_is_never_paged() -> None:
    assert PAGED.result is not None
    ctx = StepContext(
        contract=replace(PAGED, result=replace(PAGED.result, next_link_pointer=None)),
        base_url=PAGED.base_url,
    )
    op = _fetching(ctx, "/v1/files/1", {})
    send = before_collect(op, ctx, NOW).action
    assert isinstance(send, Send)
    body = {"items": [{"id": 1, "state": "ok"}], "links": {"next": "1?page=2"}}
    assert isinstance(_fetched(ctx, op, send, body, True).action, Succeed)


BLOCK = 'items_pointer = "/items"\nnext_link_pointer = "/links/next"'
ITEM_RULES = 'item_status_pointer = "/state"\nitem_failed_values = ["failed"]\n'


@pytest.mark.parametrize(
    ("block", "field", "words"),
    [
        ('next_link_pointer = ""', "result.next_link_pointer", "must point inside a page"),
        ('next_link_pointer = "next"', "result.next_link_pointer", "must be a JSON pointer"),
        (
            'items_pointer = "/items"\nnext_link_pointer = "/items/0"',
            "result.next_link_pointer",
            "must not overlap the items at '/items'",
        ),
        ('items_pointer = ""\nnext_link_pointer = "/n"', "result.items_pointer", "inside a page"),
        ('jsonl = true\nnext_link_pointer = "/n"', "result.next_link_pointer", "jsonl = true"),
    ],
)
def test_a_next_link_pointer_that_cannot_work_is_refused_at_start_up(
    tmp_path: Path, block: str, field: str, words: str
) -> None:
    text = PAGED_TEXT.replace(BLOCK, block)
    if "jsonl" in block:
        text = text.replace(ITEM_RULES, "")  # item rules read a document's items
    path = tmp_path / "paged_export.toml"
    path.write_text(text)
    with pytest.raises(ContractError) as caught:
        load_contract(path)
    assert caught.value.field == field
    assert words in caught.value.problem


def test_an_inline_first_page_pages_under_a_contracts_own_pointer() -> None:
    # fetch = "inline": the status body is the first page; it goes on at its next link.
    assert PAGED.result is not None
    ctx = StepContext(
        contract=replace(PAGED, result=replace(PAGED.result, fetch="inline")),
        base_url=PAGED.base_url,
    )
    first = {"items": [{"id": 1, "state": "ok"}], "links": {"next": "/v1/files/1?page=2"}}
    send = before_collect(_fetching(ctx, None, {"inline": first}), ctx, NOW).action
    assert isinstance(send, Send) and send.request.purpose is RequestPurpose.result_page
    assert send.request.url == f"{PAGED.base_url}/v1/files/1?page=2"


POINTER_TOKEN = st.text(alphabet="ab/~0", min_size=1, max_size=4)


@given(
    tokens=st.lists(POINTER_TOKEN, min_size=1, max_size=3),
    items=st.lists(st.integers() | st.text(max_size=3), max_size=5),
)
def test_the_artifact_holds_every_item_where_the_items_pointer_finds_them(
    tokens: list[str], items: list[object]
) -> None:
    # RFC 6901: "~" is written "~0" and "/" is written "~1" inside a token.
    pointer = "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)
    shape = PageShape(items=pointer, next="/next")
    content, count = paged_artifact(shape, {"items": items, "pages": 2, "bytes": 0})
    assert resolve_pointer(json.loads(content), pointer) == items and count == len(items)
