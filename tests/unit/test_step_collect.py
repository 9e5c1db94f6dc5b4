"""The collect step's decisions: inline and downloaded results, origins, deadlines and
budgets, and what each download answer leads to.

Pure, table by table, the way step_helpers says.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from jobwarden.models.actions import (
    Decided,
    Escalate,
    EscalationReason,
    Finish,
    ProviderRequest,
    RequestPurpose,
    Send,
    Succeed,
    Wait,
)
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.provider.signals import RawResponse
from jobwarden.models.results.decisions import after_collect, before_collect
from jobwarden.models.results.digests import DigestCheck
from jobwarden.models.results.validation import ResultVerdict
from jobwarden.models.states import OperationState
from jobwarden.models.steps import unsent
from tests.unit.factories import BASE, NOW, claimed, context, operation, planned, reply, walked
from tests.unit.step_helpers import (
    AZURE,
    GOOGLE,
    OPENAI,
    RESULT,
    SANDBOX,
    SHA,
    TRANSPORT_FAILURES,
    backoff_wait,
)

S = OperationState
R = EscalationReason
SANDBOX_RESULT = SANDBOX.contract.result
assert SANDBOX_RESULT is not None
COLLECT_DEADLINE = NOW + timedelta(minutes=15)


def collecting(**overrides: Any) -> Operation:
    values: dict[str, Any] = {
        "remote_job_id": "job-1",
        "status_url": f"{BASE}/v1/jobs/job-1",
        "accepted_at": NOW - timedelta(minutes=1),
        "result_reference": "/v1/jobs/job-1/result",
        "validation_summary": {"expected": {"expected_sha256": SHA}},
        "next_poll_at": NOW,
        "collect_deadline": COLLECT_DEADLINE,
        "result_fetch_attempts": 1,
    }
    return operation(S.result_collecting, **(values | overrides))


def test_a_contract_without_a_result_succeeds_without_a_download() -> None:
    op = collecting()
    decided = before_collect(op, context(result=None), NOW)
    assert decided.action == Succeed(
        verdict=None,
        content=None,
        content_type=None,
        note="contract declares no result; nothing to fetch",
    )
    p = planned(op, decided)
    assert walked(op.state, p) == [S.succeeded]
    assert p.result is None


@pytest.mark.parametrize(
    "summary", [None, {}, {"expected": {}}, {"expected": {"inline": None}}, {"expected": None}]
)
def test_a_missing_inline_result_is_unavailable(summary: dict[str, Any] | None) -> None:
    op = collecting(remote_job_id="operations/abc", validation_summary=summary)
    decided = before_collect(op, GOOGLE, NOW)
    assert decided.action == Finish(
        state=S.result_unavailable,
        reason="inline result missing",
        event=EventKind.result_rejected,
        summary={"valid": False, "problem": "inline result missing"},
    )
    assert walked(op.state, planned(op, decided)) == [S.result_unavailable]


def test_an_inline_result_is_validated_and_stored_without_a_request() -> None:
    inline = {"rows": 3, "url": "gs://bucket/out"}
    op = collecting(validation_summary={"expected": {"inline": inline}})
    decided = before_collect(op, GOOGLE, NOW)
    content = json.dumps(inline, separators=(",", ":")).encode()
    assert isinstance(decided.action, Succeed)
    assert (decided.action.content, decided.action.content_type) == (content, "application/json")
    assert decided.action.verdict is not None
    assert decided.action.verdict.valid
    assert decided.action.verdict.sha256 == hashlib.sha256(content).hexdigest()
    assert planned(op, decided).result is not None


@pytest.mark.parametrize(
    ("ctx", "overrides", "url", "credential"),
    [
        (SANDBOX, {}, f"{BASE}/v1/jobs/job-1/result", True),
        # An Azure SAS-style signature: the URL is its own credential (invariant 10).
        (SANDBOX, {"result_reference": f"{BASE}/v1/jobs/job-1/result?sig=x"}, None, False),
        (
            OPENAI,
            {"remote_job_id": "batch_1", "result_reference": "file-1"},
            "https://api.openai.com/v1/files/file-1/content",
            True,
        ),
        (
            AZURE,
            {"result_reference": "https://example.cognitiveservices.azure.com/reports/1"},
            "https://example.cognitiveservices.azure.com/reports/1",
            True,
        ),
        # A storage host the contract allows is read from without the provider's secret.
        (
            context(result=replace(SANDBOX_RESULT, allowed_origins=("https://files.example.com",))),
            {"result_reference": "https://files.example.com/r/1"},
            "https://files.example.com/r/1",
            False,
        ),
    ],
)
def test_a_result_on_an_allowed_origin_is_fetched(
    ctx: StepContext, overrides: dict[str, Any], url: str | None, credential: bool
) -> None:
    op = collecting(**overrides)
    expected = url or op.result_reference
    decided = before_collect(op, ctx, NOW)
    assert decided.action == Send(
        request=ProviderRequest(
            purpose=RequestPurpose.result,
            method="GET",
            url=str(expected),
            headers={"accept-encoding": "identity"},  # any digest field is checked
            with_credential=credential,
        ),
        event=EventKind.result_fetch_sent,
        counters={"result_fetch_attempts": 2},
        excerpt={"url": str(expected).split("?")[0]},
        deadline=COLLECT_DEADLINE,
    )
    p = planned(op, decided)
    assert walked(op.state, p) == []
    assert p.changes == {"result_fetch_attempts": 2}  # counted before the download leaves


@pytest.mark.parametrize(
    "ref",
    [
        "https://evil.example/r",
        "http://127.0.0.1:9999/r",  # another port is another origin
        "https://127.0.0.1:8765/r",  # and so is another scheme
    ],
)
def test_a_result_on_a_foreign_origin_is_a_contract_violation_and_never_requested(
    ref: str,
) -> None:
    op = collecting(result_reference=ref)
    decided = before_collect(op, SANDBOX, NOW)
    assert not isinstance(decided.action, Send)
    assert isinstance(decided.action, Escalate)
    assert (decided.action.reason, decided.action.state) == (R.contract_violation, S.escalated)
    assert decided.action.detail.startswith("result URL on an origin the contract does not allow")
    assert walked(op.state, planned(op, decided)) == [S.escalated]


@pytest.mark.parametrize("ref", ["//evil.example/r", "ftp://evil.example/r", "file:///etc/passwd"])
def test_a_reference_that_is_not_an_absolute_http_url_stays_on_the_providers_base(
    ref: str,
) -> None:
    action = before_collect(collecting(result_reference=ref), SANDBOX, NOW).action
    assert isinstance(action, Send)
    assert action.request.url.startswith(BASE + "/")


@pytest.mark.parametrize(
    ("overrides", "now", "reason", "detail"),
    [
        ({}, COLLECT_DEADLINE, R.deadline_exceeded, "result fetch deadline passed"),
        (
            {"result_fetch_attempts": 5},  # the contract's default max_result_fetches
            NOW,
            R.provider_failure,
            "result fetched 5 times without a usable answer",
        ),
    ],
)
def test_a_result_download_past_its_deadline_or_fetch_budget_is_never_sent(
    overrides: dict[str, Any], now: datetime, reason: R, detail: str
) -> None:
    op = collecting(**overrides)
    decided = before_collect(op, SANDBOX, now)
    assert decided.action == Escalate(reason=reason, detail=detail, state=S.escalated)
    assert walked(op.state, planned(op, decided, now=now)) == [S.escalated]


def test_a_result_download_whose_deadline_passed_after_the_claim_is_not_sent() -> None:
    op, send = sent_collect()
    assert op.result_fetch_attempts == 2
    assert unsent(op, send, COLLECT_DEADLINE - timedelta(microseconds=1)) is None
    late = unsent(op, send, COLLECT_DEADLINE)
    assert late == Decided(
        action=Escalate(
            reason=R.deadline_exceeded,
            detail="result fetch deadline passed; reserved download not sent",
            state=S.escalated,
        )
    )


def test_a_result_without_a_reference_is_unavailable() -> None:
    decided = before_collect(collecting(result_reference=None), SANDBOX, NOW)
    assert decided.action == Finish(
        state=S.result_unavailable,
        reason="no result reference",
        event=EventKind.result_rejected,
        summary={"valid": False, "problem": "no result reference"},
    )


def sent_collect(**overrides: Any) -> tuple[Operation, Send]:
    op = collecting(**overrides)
    decided = before_collect(op, SANDBOX, NOW)
    assert isinstance(decided.action, Send)
    return claimed(op, planned(op, decided)), decided.action


@pytest.mark.parametrize("code", [200, 202, 203])
def test_a_valid_result_succeeds_with_its_verdict_and_bytes(code: int) -> None:
    op, send = sent_collect()
    answer = reply(code, content=RESULT, content_type="application/json; charset=utf-8")
    decided = after_collect(op, SANDBOX, send.request, answer, NOW, 1.0)
    assert decided.action == Succeed(
        verdict=ResultVerdict(
            valid=True,
            problem=None,
            sha256=SHA,
            size_bytes=len(RESULT),
            record_count=2,
            succeeded_items=2,
            failed_items=[],
            # The sandbox's status body promises a sha256 of the bytes: checked and recorded.
            digests=(
                DigestCheck(
                    source="status body /result/sha256",
                    algorithm="sha256",
                    ours=SHA,
                    theirs=SHA,
                    matches=True,
                ),
            ),
        ),
        content=RESULT,
        content_type="application/json; charset=utf-8",
    )
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == [S.succeeded]
    assert p.result is not None
    assert p.result.content == RESULT


def _bytes(doc: object) -> bytes:
    return json.dumps(doc).encode()


# What the digest check refuses (models/results/digests.py): the bytes may not be what was sent.
INTEGRITY_PROBLEMS = ("checksum mismatch", "the provider gave no checksum")


@pytest.mark.parametrize(
    ("content", "content_type", "sha", "problem"),
    [
        (RESULT, "application/json", "0" * 64, "checksum mismatch"),
        (RESULT, "text/csv", SHA, "content type 'text/csv', expected 'application/json'"),
        (RESULT, None, SHA, "no content type; expected 'application/json'"),
        (RESULT, "application/json", None, "the provider gave no checksum"),
        (b"not json", "application/json", None, "the provider gave no checksum"),
        (
            b"not json",
            "application/json",
            hashlib.sha256(b"not json").hexdigest(),
            "result is not valid JSON",
        ),
        (
            _bytes({"items": [1], "failed_items": [], "record_count": 5}),
            "application/json",
            hashlib.sha256(
                _bytes({"items": [1], "failed_items": [], "record_count": 5})
            ).hexdigest(),
            "record count 5 but 1 items and 0 failed",
        ),
        (
            _bytes({"items": [1], "failed_items": [2, 3]}),
            "application/json",
            hashlib.sha256(_bytes({"items": [1], "failed_items": [2, 3]})).hexdigest(),
            "2 of 3 items failed",
        ),
        (
            _bytes({"rows": []}),
            "application/json",
            hashlib.sha256(_bytes({"rows": []})).hexdigest(),
            "result has no item list at /items",
        ),
    ],
)
def test_an_invalid_result_ends_in_result_validation_failed_with_its_summary(
    content: bytes, content_type: str | None, sha: str | None, problem: str
) -> None:
    op, send = sent_collect(validation_summary={"expected": {"expected_sha256": sha}})
    answer = reply(200, content=content, content_type=content_type)
    decided = after_collect(op, SANDBOX, send.request, answer, NOW, 1.0)
    assert isinstance(decided.action, Finish)
    assert (decided.action.state, decided.action.reason, decided.action.event) == (
        S.result_validation_failed,
        problem,
        EventKind.result_rejected,
    )
    assert decided.action.summary is not None
    assert (decided.action.summary["valid"], decided.action.summary["problem"]) == (False, problem)
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == [S.result_validation_failed]
    assert p.changes["validation_summary"] == decided.action.summary
    if problem in INTEGRITY_PROBLEMS:
        # Bytes that may not be the provider's are never kept: nobody can accept them.
        assert "kept" not in decided.action.summary and p.result is None
        return
    # The bytes are the provider's, read whole: kept for a person to look at and perhaps
    # accept (issue 20), with the verdict that refused them, never as a success.
    assert decided.action.summary["kept"] is True
    assert p.result is not None and p.result.content == content
    assert not p.result.verdict.valid and p.result.verdict.problem == problem


def test_a_result_cut_at_its_size_bound_is_never_kept() -> None:
    op, send = sent_collect()
    big = b"x" * (SANDBOX.contract.result.max_bytes + 1)  # type: ignore[union-attr]
    decided = after_collect(op, SANDBOX, send.request, reply(200, content=big), NOW, 1.0)
    assert isinstance(decided.action, Finish)
    assert decided.action.state is S.result_validation_failed
    assert decided.action.summary is not None and "kept" not in decided.action.summary
    assert planned(op, decided, answer=reply(200, content=big)).result is None


@pytest.mark.parametrize("code", [401, 403])
def test_a_denied_result_download_escalates_authorization_denied(code: int) -> None:
    op, send = sent_collect()
    decided = after_collect(op, SANDBOX, send.request, reply(code), NOW, 1.0)
    assert decided.action == Escalate(
        reason=R.authorization_denied,
        detail=f"HTTP {code} fetching the result",
        state=S.escalated,
    )
    assert walked(op.state, planned(op, decided, answer=reply(code))) == [S.escalated]


@pytest.mark.parametrize("code", [404, 410])
def test_a_result_that_is_gone_is_unavailable(code: int) -> None:
    op, send = sent_collect()
    decided = after_collect(op, SANDBOX, send.request, reply(code), NOW, 1.0)
    problem = f"HTTP {code} fetching the result"
    assert decided.action == Finish(
        state=S.result_unavailable,
        reason=problem,
        event=EventKind.result_rejected,
        summary={"valid": False, "problem": problem},
    )


COLLECT_FAILURES = [
    reply(500),
    reply(502),
    reply(503),
    reply(400),
    reply(409),
    reply(422),
    reply(429),
    reply(302, headers={"location": "https://evil.example/r"}),
] + [reply(None, failure=f) for f in TRANSPORT_FAILURES]


@pytest.mark.parametrize("answer", COLLECT_FAILURES)
@pytest.mark.parametrize(("used", "delay"), [(0, 0.4), (1, 0.8), (2, 1.6)])
def test_a_failed_result_download_spends_the_transport_budget_and_backs_off(
    answer: RawResponse, used: int, delay: float
) -> None:
    op, send = sent_collect(transport_failures_used=used)
    decided = after_collect(op, SANDBOX, send.request, answer, NOW, 1.0)
    assert decided.action == backoff_wait(delay, cause="result fetch failed; retry")
    assert decided.changes == {"transport_failures_used": used + 1}
    p = planned(op, decided, answer=answer)
    assert walked(op.state, p) == []
    assert p.changes["transport_failures_used"] == used + 1


@pytest.mark.parametrize("answer", COLLECT_FAILURES)
def test_a_failed_result_download_past_the_budget_escalates_provider_failure(
    answer: RawResponse,
) -> None:
    op, send = sent_collect(transport_failures_used=3)  # the factory's budget is 3
    decided = after_collect(op, SANDBOX, send.request, answer, NOW, 1.0)
    assert decided.action == Escalate(
        reason=R.provider_failure,
        detail="transport failure budget spent fetching the result",
        state=S.escalated,
    )
    assert decided.changes == {"transport_failures_used": 4}


def test_a_rate_limited_result_download_waits_for_retry_after() -> None:
    op, send = sent_collect()
    answer = reply(429, headers={"retry-after": "120"})
    action = after_collect(op, SANDBOX, send.request, answer, NOW, 1.0).action
    assert isinstance(action, Wait)
    assert action.until >= NOW + timedelta(seconds=120)
