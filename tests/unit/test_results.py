"""Result validation: size, integrity, content type, record counts, per-item failures.

Each convention's own cases live in test_digests.py and test_item_outcomes.py."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from jobwarden.models.contracts.contract import DigestField, ResultSpec
from jobwarden.models.results.validation import ResultVerdict, validate_result

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

    from jobwarden.models.contracts.loader import load_contract
    from jobwarden.models.results.validation import origin_allowed

    base = load_contract(Path(__file__).resolve().parents[2] / "config/providers/sandbox.toml")
    assert origin_allowed(base, "http://127.0.0.1:8765", "http://127.0.0.1:8765/v1/jobs/x/result")
    assert not origin_allowed(base, "http://127.0.0.1:8765", "http://evil.test/x")
    assert not origin_allowed(base, "http://127.0.0.1:8765", "file:///etc/passwd")
    assert base.result is not None
    cdn = replace(base, result=replace(base.result, allowed_origins=("https://cdn.test",)))
    assert origin_allowed(cdn, "http://127.0.0.1:8765", "https://cdn.test/r.json")


# --- oversize: it says so, whatever else is wrong -------------------------------------------


@pytest.mark.parametrize(
    ("content", "body_problem"),
    [
        (b"{" * 11, None),  # longer than max_bytes: also not JSON, and its checksum is wrong
        (b"{}", "too_large"),  # the edge cut the body at the limit and said so
    ],
)
def test_an_oversize_result_says_it_exceeds_the_limit_never_a_checksum_or_json_error(
    content: bytes, body_problem: str | None
) -> None:
    spec = replace(SPEC, max_bytes=10)
    verdict = check(content, spec=spec, expected_sha256="0" * 64, body_problem=body_problem)
    assert (verdict.valid, verdict.problem) == (False, "result exceeds 10 bytes")


def test_a_body_the_edge_could_not_decode_is_refused_with_the_edges_word() -> None:
    verdict = check(b"", body_problem="undecodable")
    assert verdict.problem == "result body unreadable (undecodable)"


def test_a_result_without_digests_or_item_rules_is_judged_as_before() -> None:
    spec = ResultSpec(fetch="url", items_pointer="/items", failed_items_pointer="/failed_items")
    verdict = validate_result(spec, content=doc(3, 1), content_type="application/json")
    assert verdict.valid and verdict.digests == () and verdict.integrity_notes == ()
    assert (verdict.succeeded_items, verdict.failed_count, verdict.failed_refs) == (3, 1, ("f0",))


# --- the collect decision with digest fields ------------------------------------------------


def _collecting(ctx: Any) -> tuple[Any, Any]:
    from jobwarden.models.actions import Send
    from jobwarden.models.results.decisions import before_collect
    from jobwarden.models.states import OperationState
    from tests.unit.factories import NOW, claimed, operation, planned

    op = operation(
        OperationState.result_collecting,
        remote_job_id="job-1",
        result_reference="/v1/jobs/job-1/result",
        accepted_at=NOW,
        collect_deadline=NOW + timedelta(minutes=5),
        validation_summary={"expected": {}},
    )
    decided = before_collect(op, ctx, NOW)
    assert isinstance(decided.action, Send)
    return claimed(op, planned(op, decided)), decided.action


HELLO = b'{"hello": "world"}'
HELLO_SHA256 = "X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE="  # RFC 9530's example


def _repr_digest_context() -> Any:
    from tests.unit.factories import context

    base = context().contract.result
    assert base is not None
    spec = replace(
        base,
        digests=(DigestField.repr_digest, DigestField.content_digest),
        checksum_pointer=None,
        items_pointer=None,
        failed_items_pointer=None,
        record_count_pointer=None,
    )
    return context(result=spec)


def test_rfc9530_a_result_with_digest_fields_is_asked_for_without_content_coding() -> None:
    _, send = _collecting(_repr_digest_context())
    assert send.request.headers == {"accept-encoding": "identity"}
    from tests.unit.factories import context

    # No digest fields listed: any the answer carries are still checked, so identity too.
    assert _collecting(context())[1].request.headers == {"accept-encoding": "identity"}


def test_rfc9530_an_altered_body_with_correct_looking_digest_headers_ends_validation_failed() -> (
    None
):
    from jobwarden.models.actions import Finish
    from jobwarden.models.results.decisions import after_collect
    from jobwarden.models.states import OperationState
    from tests.unit.factories import NOW, planned, reply, walked

    ctx = _repr_digest_context()
    op, send = _collecting(ctx)
    headers = {"Repr-Digest": f"sha-256=:{HELLO_SHA256}:", "Content-Digest": "sha-512=:AA==:"}
    answer = reply(200, content=b'{"hello": "World"}', headers=headers)
    decided = after_collect(op, ctx, send.request, answer, NOW, 1.0)
    assert isinstance(decided.action, Finish)
    assert decided.action.state is OperationState.result_validation_failed
    assert decided.action.reason == "checksum mismatch"
    summary = decided.action.summary
    assert summary is not None
    assert [(d["source"], d["algorithm"], d["theirs"]) for d in summary["digests"]] == [
        ("Repr-Digest", "sha-256", f":{HELLO_SHA256}:")
    ]
    assert summary["digests"][0]["ours"] != summary["digests"][0]["theirs"]
    assert summary["integrity_notes"] == [
        "Content-Digest ignored: malformed (sha-512 is 1 octets, not 64)"
    ]
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == [OperationState.result_validation_failed]
    assert p.result is None  # the altered bytes are never stored

    intact = reply(200, content=HELLO, headers=headers)
    action = after_collect(op, ctx, send.request, intact, NOW, 1.0).action
    assert not isinstance(action, Finish), action


def test_a_result_nested_ten_thousand_deep_is_invalid_not_a_crash() -> None:
    deep = b"[" * 10_000 + b"]" * 10_000
    verdict = check(deep)
    assert not verdict.valid and "nested too deeply" in (verdict.problem or "")
