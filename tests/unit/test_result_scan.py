"""A result judged as it streams in (issue 21): the verdict over chunks is the verdict over
the whole, whatever the chunk boundaries; JSON Lines are held one line at a time, and
failed items past MAX_FAILED_KEPT are counted, not held."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from jobwarden.models.contracts.contract import ResultSpec
from jobwarden.models.results.item_outcomes import MAX_FAILED_KEPT, MAX_FAILED_REFS
from jobwarden.models.results.validation import DOCUMENT_LIMIT, ResultScan, validate_result
from tests.unit.factories import context


def _openai() -> ResultSpec:
    spec = context("openai_batch").contract.result
    assert spec is not None
    return spec


OPENAI = _openai()
DOCUMENT = ResultSpec(
    fetch="url",
    content_type="application/json",
    items_pointer="/items",
    failed_items_pointer="/failed_items",
    record_count_pointer="/record_count",
)


def _line(n: int, code: int = 200) -> bytes:
    return json.dumps(
        {"custom_id": f"request-{n}", "response": {"status_code": code}, "error": None}
    ).encode()


def _scanned(spec: ResultSpec, content: bytes, cuts: list[int], ctype: str) -> object:
    scan = ResultScan(spec, content_type=ctype)
    start = 0
    for cut in sorted(c % (len(content) + 1) for c in cuts):
        scan.feed(content[start:cut])
        start = max(start, cut)
    scan.feed(content[start:])
    return scan.finish()


CONTENTS = [
    b"\n".join(_line(n, 500 if n % 7 == 0 else 200) for n in range(40)),
    b"\n".join(_line(n) for n in range(5)) + b"\n\n",  # trailing blank lines
    _line(1) + b"\n{not json\n" + _line(2),
    _line(1) + b"\n\xff\xfe\n",  # not UTF-8
    json.dumps({"items": [1, 2], "failed_items": [3], "record_count": 3}).encode(),
    json.dumps({"items": [1, 2], "failed_items": [], "record_count": 5}).encode(),
    b'{"items": [1,',
]


@settings(max_examples=200, deadline=None)
@given(
    content=st.sampled_from(CONTENTS),
    cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12),
)
def test_a_result_fed_in_any_chunks_gets_the_verdict_of_the_whole(
    content: bytes, cuts: list[int]
) -> None:
    for spec, ctype in ((OPENAI, "application/octet-stream"), (DOCUMENT, "application/json")):
        whole = validate_result(spec, content=content, content_type=ctype)
        assert _scanned(spec, content, cuts, ctype) == whole


def test_json_lines_are_held_one_line_at_a_time_and_failed_ones_past_the_kept_are_counted() -> None:
    spec = replace(OPENAI, max_failed_fraction=1.0)
    scan = ResultScan(spec, content_type="application/octet-stream")
    lines = 3 * MAX_FAILED_KEPT
    for n in range(lines):
        scan.feed(_line(n, 500 if n % 2 else 200) + b"\n")
        # Nothing but the unfinished line is held: memory does not grow with the result.
        assert len(scan._held) == 0
    verdict = scan.finish()
    assert verdict.valid, verdict.problem
    assert (verdict.succeeded_items, verdict.failed_count) == (lines // 2, lines // 2)
    assert len(verdict.failed_items) == MAX_FAILED_KEPT
    assert verdict.failed_more == lines // 2 - MAX_FAILED_KEPT
    assert len(verdict.failed_refs) == MAX_FAILED_REFS
    assert verdict.summary()["failed_item_refs_omitted"] == lines // 2 - MAX_FAILED_REFS


def test_a_line_longer_than_the_document_limit_is_refused_without_being_held() -> None:
    spec = replace(OPENAI, max_bytes=4 * DOCUMENT_LIMIT)
    scan = ResultScan(spec, content_type="application/octet-stream")
    chunk = b"x" * (1024 * 1024)
    for _ in range(DOCUMENT_LIMIT // len(chunk) + 1):
        scan.feed(chunk)
    assert len(scan._held) == 0
    verdict = scan.finish()
    assert verdict.problem == f"result line 1 is longer than {DOCUMENT_LIMIT} bytes"
    assert verdict.size_bytes == DOCUMENT_LIMIT + len(chunk)
    assert verdict.keepable  # the bytes are the provider's; a person may still look


def test_bytes_past_the_size_bound_are_hashed_but_never_held() -> None:
    spec = replace(OPENAI, max_bytes=100)
    scan = ResultScan(spec, content_type="application/octet-stream")
    scan.feed(b"a" * 60)
    scan.feed(b"b" * 60)
    assert len(scan._held) <= 100
    verdict = scan.finish()
    assert (verdict.problem, verdict.size_bytes, verdict.keepable) == (
        "result exceeds 100 bytes",
        120,
        False,
    )
