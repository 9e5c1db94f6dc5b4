"""Per-item outcomes in the three shapes real providers use, and the status body's counts.

- Azure-style: one list whose items each carry ``status`` ("Succeeded"/"Failed", Document
  Translation's documents status) and an ``error`` when failed;
- Google-style JSON Lines: every line a response or, when it failed, an ``error`` (Gemini
  Batch API results file: ``{"key": ..., "response" | "error": ...}``);
- OpenAI Batch API: output lines ``{"custom_id", "response": {"status_code", ...}, "error"}``,
  the batch object's ``request_counts {total, completed, failed}`` and ``error_file_id``.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from jobwarden.models.contracts.contract import ResultSpec
from jobwarden.models.contracts.loader import load_contract
from jobwarden.models.errors import ContractError
from jobwarden.models.results.collection import expected_result
from jobwarden.models.results.validation import ResultVerdict, validate_result
from jobwarden.observability.story import event_line
from tests.unit.factories import context

FIXTURE = Path(__file__).parent / "contracts" / "valid" / "azure_item_status.toml"


def _result(spec: ResultSpec | None) -> ResultSpec:
    assert spec is not None
    return spec


AZURE = replace(_result(load_contract(FIXTURE).result), digests=())  # see test_digests
OPENAI = _result(context("openai_batch").contract.result)
GOOGLE = ResultSpec(
    fetch="path",
    path="/v1beta/{result_ref}:download",
    content_type=None,
    jsonl=True,
    item_error_pointer="/error",
    item_ref_pointer="/key",
)
FAILED_AT = (17, 342)  # 1-based positions of the two failed items among 500


def azure_documents(total: int = 500, failed: tuple[int, ...] = FAILED_AT, **odd: str) -> bytes:
    value = []
    for n in range(1, total + 1):
        item: dict[str, Any] = {"id": f"doc-{n}", "status": "Succeeded", "characterCharged": 9}
        if n in failed:
            item |= {"status": "Failed", "error": {"code": "InvalidRequest", "message": "x"}}
        if str(n) in odd:
            item["status"] = odd[str(n)]
        value.append(item)
    return json.dumps({"value": value, "@nextLink": None}).encode()


def jsonl(lines: list[dict[str, Any]]) -> bytes:
    return b"".join(json.dumps(line).encode() + b"\n" for line in lines)


def google_lines(total: int = 500, failed: tuple[int, ...] = FAILED_AT) -> bytes:
    lines: list[dict[str, Any]] = []
    for n in range(1, total + 1):
        if n in failed:
            lines.append({"key": f"req-{n}", "error": {"code": 3, "message": "INVALID_ARGUMENT"}})
        else:
            lines.append({"key": f"req-{n}", "response": {"candidates": []}})
    return jsonl(lines)


def openai_lines(total: int = 500, failed: tuple[int, ...] = FAILED_AT, **codes: int) -> bytes:
    lines: list[dict[str, Any]] = []
    for n in range(1, total + 1):
        line: dict[str, Any] = {
            "id": f"batch_req_{n}",
            "custom_id": f"request-{n}",
            "response": {"status_code": 200, "request_id": f"r{n}", "body": {}},
            "error": None,
        }
        if n in failed:
            line |= {"response": None, "error": {"code": "server_error", "message": "x"}}
        if str(n) in codes:
            line["response"] = {"status_code": codes[str(n)], "request_id": "r", "body": {}}
        lines.append(line)
    return jsonl(lines)


def check(
    spec: ResultSpec, content: bytes, promised: dict[str, Any] | None = None
) -> ResultVerdict:
    return validate_result(
        spec, content=content, content_type="application/json", promised=promised
    )


@pytest.mark.parametrize(
    ("name", "spec", "content", "refs"),
    [
        ("azure_item_status", AZURE, azure_documents(), ["doc-17", "doc-342"]),
        ("google_jsonl_error", GOOGLE, google_lines(), ["req-17", "req-342"]),
        ("openai_batch_error", OPENAI, openai_lines(), ["request-17", "request-342"]),
    ],
)
def test_500_items_with_2_failed_record_498_and_2_with_their_references(
    name: str, spec: ResultSpec, content: bytes, refs: list[str]
) -> None:
    verdict = check(spec, content)
    assert verdict.valid, verdict.problem
    summary = verdict.summary()
    assert (summary["succeeded_items"], summary["failed_item_count"]) == (498, 2)
    assert summary["failed_item_refs"] == refs
    assert len(verdict.failed_items) == 2  # the stored result keeps the failed items themselves


def test_openai_output_lines_with_an_http_status_of_400_or_more_failed() -> None:
    verdict = check(OPENAI, openai_lines(10, failed=(), **{"3": 429, "4": 500, "5": 399}))
    assert verdict.valid
    assert (verdict.succeeded_items, verdict.failed_refs) == (8, ("request-3", "request-4"))


@pytest.mark.parametrize(
    ("spec", "content", "problem"),
    [
        (AZURE, azure_documents(5, failed=(), **{"2": "Running"}), "item 2 has status 'Running'"),
        (AZURE, json.dumps({"value": [{"id": "a"}]}).encode(), "item 1 has no status at /status"),
        (AZURE, json.dumps({"value": {"id": "a"}}).encode(), "result has no item list at /value"),
        (GOOGLE, b'{"key": "a"}\n{"key": \n', "result line 2 is not valid JSON"),
        (GOOGLE, b"\xff\n", "not valid JSON (not UTF-8)"),
        (
            OPENAI,
            jsonl([{"custom_id": "a", "response": {"status_code": "200"}, "error": None}]),
            "line 1 has a status code that is not a number at /response/status_code",
        ),
        (replace(GOOGLE, jsonl=False), b'{"key": "a"}', "result is not a list of items"),
    ],
)
def test_items_no_rule_can_read_are_refused_rather_than_guessed(
    spec: ResultSpec, content: bytes, problem: str
) -> None:
    verdict = check(spec, content)
    assert not verdict.valid
    assert problem in (verdict.problem or "")


def test_an_unlisted_item_status_counts_as_succeeded_when_no_succeeded_values_are_named() -> None:
    spec = replace(AZURE, item_succeeded_values=())
    verdict = check(spec, azure_documents(5, failed=(1,), **{"2": "Running"}))
    assert verdict.valid and (verdict.succeeded_items, verdict.failed_count) == (4, 1)


def test_failed_item_references_are_bounded_and_the_rest_counted() -> None:
    verdict = check(GOOGLE, google_lines(300, failed=tuple(range(1, 151))))
    summary = verdict.summary()
    assert summary["failed_item_count"] == 150
    assert len(summary["failed_item_refs"]) == 100 and summary["failed_item_refs_omitted"] == 50


@pytest.mark.parametrize(
    ("item", "ref"),
    [
        ({"custom_id": "c", "error": {}}, "c"),
        ({"id": "i", "error": {}}, "i"),
        ({"error": {"code": 1}}, "line 1"),
    ],
)
def test_a_failed_item_without_the_contracts_reference_is_named_by_a_usual_key_or_its_line(
    item: dict[str, Any], ref: str
) -> None:
    spec = replace(GOOGLE, item_ref_pointer=None)
    assert check(spec, jsonl([item])).failed_refs == (ref,)
    assert check(GOOGLE, jsonl([item])).failed_refs == ("line 1",)


def test_a_separate_failed_list_adds_to_the_failures_found_by_status() -> None:
    spec = replace(AZURE, failed_items_pointer="/rejected")
    doc = json.loads(azure_documents(3, failed=(2,)))
    doc["rejected"] = [{"id": "late-1"}]
    verdict = check(spec, json.dumps(doc).encode())
    assert verdict.failed_refs == ("doc-2", "late-1")


# --- counts declared in the status body -----------------------------------------------------

OPENAI_CTX = context("openai_batch")


def batch(completed: int, failed: int, total: int, **more: Any) -> dict[str, Any]:
    return {
        "id": "batch_1",
        "status": "completed",
        "output_file_id": "file-out",
        "request_counts": {"total": total, "completed": completed, "failed": failed},
        **more,
    }


def test_openai_request_counts_and_error_file_are_carried_from_the_status_body() -> None:
    promised = expected_result(OPENAI_CTX, batch(498, 2, 500, error_file_id="file-err"))
    assert promised == {
        "declared_counts": {"completed": 498, "failed": 2, "total": 500},
        "error_file": "file-err",
    }
    odd = batch(1, 0, 1) | {"request_counts": {"completed": True, "failed": -1, "total": "1"}}
    assert expected_result(OPENAI_CTX, odd) == {}  # only whole numbers are counts


def test_openai_failed_requests_in_the_error_file_are_counted_from_request_counts() -> None:
    """The output file holds the 498 successes; the 2 failures are in error_file_id."""
    promised = expected_result(OPENAI_CTX, batch(498, 2, 500, error_file_id="file-err"))
    verdict = check(OPENAI, openai_lines(498, failed=()), promised)
    assert verdict.valid, verdict.problem
    summary = verdict.summary()
    assert (summary["succeeded_items"], summary["failed_item_count"]) == (498, 2)
    assert summary["failed_items_file"] == "file-err"
    assert summary["declared_counts"] == {"completed": 498, "failed": 2, "total": 500}
    assert summary["failed_item_refs"] == []  # in the file that was not fetched


def test_counts_that_agree_with_the_items_found_pass() -> None:
    promised = expected_result(OPENAI_CTX, batch(499, 1, 500))
    assert check(OPENAI, openai_lines(500, failed=(7,)), promised).valid


@pytest.mark.parametrize(
    ("counts", "problem"),
    [
        ((498, 2, 500), "the status body says 498 completed, the result has 499 succeeded items"),
        ((499, 2, 500), "counts disagree: 499 completed + 2 failed is not 500 in total"),
        ((499, 0, 499), "the status body says 0 failed, the result has 1 failed"),
    ],
)
def test_counts_that_disagree_with_the_items_found_fail_naming_both(
    counts: tuple[int, int, int], problem: str
) -> None:
    promised = expected_result(OPENAI_CTX, batch(*counts))
    verdict = check(OPENAI, openai_lines(500, failed=(7,)), promised)
    assert not verdict.valid
    assert problem in (verdict.problem or "")
    declared = dict(zip(("completed", "failed", "total"), counts, strict=True))
    assert verdict.summary()["declared_counts"] == declared


def test_a_total_alone_is_checked_against_every_item_found() -> None:
    promised = {"declared_counts": {"total": 501}}
    verdict = check(OPENAI, openai_lines(500, failed=(3,)), promised)
    assert verdict.problem == "the status body says 501 in total, the result has 500 items"


def test_failed_lines_found_beyond_the_declared_failed_count_disagree_even_with_an_error_file() -> (
    None
):
    promised = {"declared_counts": {"completed": 8, "failed": 1}, "error_file": "file-err"}
    verdict = check(OPENAI, openai_lines(10, failed=(1, 2)), promised)
    assert verdict.problem == "the status body says 1 failed, the result has 2 failed items"


def test_a_declared_total_record_count_is_still_checked_with_item_rules() -> None:
    spec = replace(AZURE, record_count_pointer="/count")
    doc = json.loads(azure_documents(3, failed=(1,)))
    doc["count"] = 4
    assert (
        check(spec, json.dumps(doc).encode()).problem == "record count 4 but 2 items and 1 failed"
    )


def test_the_history_line_shows_the_per_item_outcome() -> None:
    from datetime import UTC, datetime

    from jobwarden.models.history.chain import ChainedEvent, EventDraft, EventKind

    summary = check(AZURE, azure_documents()).summary()
    draft = EventDraft(
        kind=EventKind.result_collected,
        actor="worker",
        at=datetime(2024, 5, 1, 12, tzinfo=UTC),
        from_state="result_collecting",
        to_state="succeeded",
        excerpt=summary,
    )
    chained = ChainedEvent(operation_id="op", seq=9, draft=draft, prev_hash="0" * 64, hash="1" * 64)
    line = event_line(chained)
    assert "result collected, 498 items ok, 2 failed (doc-17, doc-342) -> succeeded" in line


# --- contract fields --------------------------------------------------------------------------

SANDBOX = Path(__file__).resolve().parents[2] / "config" / "providers" / "sandbox.toml"


def with_result(tmp_path: Path, result_table: str) -> Path:
    text = SANDBOX.read_text()
    start, end = text.index("[result]"), text.index("[poll]")
    path = tmp_path / "sandbox.toml"
    path.write_text(text[:start] + "[result]\n" + result_table + "\n\n" + text[end:])
    return path


def test_the_shipped_openai_contract_reads_lines_counts_and_the_error_file() -> None:
    assert OPENAI.jsonl and OPENAI.item_error_pointer == "/error"
    assert OPENAI.item_status_code_pointer == "/response/status_code"
    assert OPENAI.item_ref_pointer == "/custom_id"
    assert (
        OPENAI.completed_count_pointer,
        OPENAI.failed_count_pointer,
        OPENAI.total_count_pointer,
        OPENAI.error_file_pointer,
    ) == (
        "/request_counts/completed",
        "/request_counts/failed",
        "/request_counts/total",
        "/error_file_id",
    )


@pytest.mark.parametrize(
    ("table", "field", "problem"),
    [
        ('fetch = "url"\nitem_status_pointer = "/s"', "result.item_failed_values", "go together"),
        ('fetch = "url"\nitem_failed_values = ["F"]', "result.item_failed_values", "go together"),
        (
            'fetch = "url"\nitem_succeeded_values = ["S"]',
            "result.item_succeeded_values",
            "only allowed with result.item_status_pointer",
        ),
        (
            'fetch = "url"\nitem_status_pointer = "/s"\nitem_failed_values = ["F"]\n'
            'item_succeeded_values = ["F"]',
            "result.item_succeeded_values",
            "'F' is also an item_failed_values",
        ),
        (
            'fetch = "url"\nerror_file_pointer = "/error_file_id"',
            "result.error_file_pointer",
            "needs result.failed_count_pointer",
        ),
        (
            'fetch = "url"\njsonl = true\nitems_pointer = "/items"',
            "result.items_pointer",
            "every line is an item",
        ),
        (
            'fetch = "url"\nitem_error_pointer = "error"',
            "result.item_error_pointer",
            "JSON pointer",
        ),
    ],
)
def test_item_rules_a_contract_cannot_honour_are_refused_at_load(
    tmp_path: Path, table: str, field: str, problem: str
) -> None:
    with pytest.raises(ContractError) as caught:
        load_contract(with_result(tmp_path, table))
    assert caught.value.field == field
    assert problem in caught.value.problem
