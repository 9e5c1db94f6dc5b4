"""Result validation: size, content type, checksum, record counts, per-item failures."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from typing import Any

import pytest

from jobwarden.models.contract import ResultSpec
from jobwarden.models.results import ResultVerdict, validate_result

SPEC = ResultSpec(
    fetch="url",
    content_type="application/json",
    checksum_pointer="/result/sha256",
    record_count_pointer="/record_count",
    items_pointer="/items",
    failed_items_pointer="/failed_items",
    max_failed_fraction=0.5,
)


def doc(ok: int, failed: int, count: int | None = None) -> bytes:
    return json.dumps(
        {
            "record_count": ok + failed if count is None else count,
            "items": [{"ref": f"i{i}"} for i in range(ok)],
            "failed_items": [{"ref": f"f{i}", "error": "x"} for i in range(failed)],
        }
    ).encode()


def check(content: bytes, **kw: Any) -> ResultVerdict:
    args: dict[str, Any] = {
        "content_type": "application/json",
        "expected_sha256": hashlib.sha256(content).hexdigest(),
        "declared_record_count": None,
    }
    args.update(kw)
    spec = args.pop("spec", SPEC)
    return validate_result(spec, content=content, **args)


def test_two_failed_items_of_500_is_valid_with_counts_and_references() -> None:
    verdict = check(doc(498, 2))
    assert verdict.valid
    summary = verdict.summary()
    assert (summary["record_count"], summary["succeeded_items"], summary["failed_item_count"]) == (
        500,
        498,
        2,
    )
    assert summary["failed_item_refs"] == ["f0", "f1"]


@pytest.mark.parametrize(
    ("content", "kw", "problem"),
    [
        (doc(5, 0), {"expected_sha256": "0" * 64}, "checksum mismatch"),
        (doc(5, 0), {"expected_sha256": None}, "no checksum"),
        (doc(5, 0), {"content_type": "text/html"}, "content type"),
        (doc(5, 0), {"content_type": None}, "no content type"),
        (b"{not json", {}, "not valid JSON"),
        (doc(5, 0, count=9), {}, "record count 9"),
        (doc(2, 3), {}, "3 of 5 items failed"),
        (json.dumps({"record_count": 0}).encode(), {}, "no item list"),
    ],
)
def test_invalid_results_are_refused_with_a_reason(
    content: bytes, kw: dict[str, object], problem: str
) -> None:
    verdict = check(content, **kw)
    assert not verdict.valid
    assert problem in (verdict.problem or "")


def test_a_result_larger_than_the_limit_is_refused() -> None:
    verdict = check(doc(50, 0), spec=replace(SPEC, max_bytes=10))
    assert not verdict.valid and "exceeds" in (verdict.problem or "")


def test_jsonl_results_count_lines_as_items() -> None:
    spec = ResultSpec(fetch="path", content_type=None, jsonl=True)
    content = b'{"custom_id": "a"}\n{"custom_id": "b"}\n'
    verdict = validate_result(
        spec, content=content, content_type=None, expected_sha256=None, declared_record_count=None
    )
    assert verdict.valid and verdict.succeeded_items == 2


def test_results_are_fetched_only_from_origins_the_contract_allows() -> None:
    from pathlib import Path

    from jobwarden.models.contract_loader import load_contract
    from jobwarden.models.results import origin_allowed

    base = load_contract(Path(__file__).resolve().parents[2] / "config/providers/sandbox.toml")
    assert origin_allowed(base, "http://127.0.0.1:8765", "http://127.0.0.1:8765/v1/jobs/x/result")
    assert not origin_allowed(base, "http://127.0.0.1:8765", "http://evil.test/x")
    assert not origin_allowed(base, "http://127.0.0.1:8765", "file:///etc/passwd")
    assert base.result is not None
    cdn = replace(base, result=replace(base.result, allowed_origins=("https://cdn.test",)))
    assert origin_allowed(cdn, "http://127.0.0.1:8765", "https://cdn.test/r.json")
