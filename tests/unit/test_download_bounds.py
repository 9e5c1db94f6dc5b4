"""Single-use and expiring result downloads (issue 21), decided by the pure core.

- A one-time link (``[result] single_use``) is requested at most once: an attempt that was
  claimed and then cut off, refused or lost to the result store is not repeated, and the
  operation ends ``result_unavailable`` saying why.
- A signed URL (``url_expiry_pointer``; Amazon S3 User Guide, "Sharing objects with
  presigned URLs": after ``X-Amz-Expires`` the URL answers 403 "Request has expired") is
  never requested after its end; past it the status is read again for a fresh URL where
  the contract says so (``refresh_expired_url``), else the operation ends saying why.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from jobwarden.models.actions import Finish, Move, Send, Wait
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.provider.signals import TransportFailure
from jobwarden.models.results.collection import expected_result
from jobwarden.models.results.decisions import after_collect, before_collect
from jobwarden.models.states import OperationState as S
from jobwarden.models.states import is_allowed
from tests.unit.factories import NOW, context, operation, reply

SIGNED = context("signed_url_export")
URL = "https://bucket.s3.example.com/exports/job-1.jsonl?X-Amz-Expires=300&X-Amz-Signature=ab"


def _ctx(
    *, single_use: bool = True, expiry: bool = True, refresh_expired_url: bool = True
) -> StepContext:
    spec = SIGNED.contract.result
    assert spec is not None
    changed = replace(
        spec,
        single_use=single_use,
        url_expiry_pointer=spec.url_expiry_pointer if expiry else None,
        refresh_expired_url=refresh_expired_url,
    )
    return replace(SIGNED, contract=replace(SIGNED.contract, result=changed))


def _collecting(ctx: StepContext, expires_in: float | None, attempts: int = 0):  # type: ignore[no-untyped-def]
    body = {"status": "done", "result": {"url": URL}}
    if expires_in is not None:
        body["result"]["expires_at"] = (NOW + timedelta(seconds=expires_in)).isoformat()  # type: ignore[index]
    return operation(
        S.result_collecting,
        provider="signed_url_export",
        remote_job_id="job-1",
        status_url="https://exports.example.com/v1/exports/job-1",
        result_reference=URL,
        result_fetch_attempts=attempts,
        collect_deadline=NOW + timedelta(hours=1),
        validation_summary={"expected": expected_result(ctx, body)},
    )


def test_the_status_bodys_url_expiry_is_carried_to_collection() -> None:
    ctx = _ctx()
    body = {"result": {"url": URL, "expires_at": 1_714_565_100}}
    assert expected_result(ctx, body)["url_expires_at"] == "2024-05-01T12:05:00+00:00"
    assert expected_result(ctx, {"result": {"url": URL, "expires_at": "soon"}}) == {
        "url_expires_at": None
    }


def test_a_download_of_a_signed_url_never_outlives_the_urls_expiry() -> None:
    ctx = _ctx()
    decided = before_collect(_collecting(ctx, expires_in=60), ctx, NOW)
    assert isinstance(decided.action, Send)
    assert decided.action.deadline == NOW + timedelta(seconds=60)  # not the hour's deadline


@pytest.mark.parametrize(("refresh", "to"), [(True, S.observing), (False, S.result_unavailable)])
def test_an_expired_url_is_read_again_fresh_or_ends_the_operation_saying_why(
    refresh: bool, to: S
) -> None:
    ctx = _ctx(refresh_expired_url=refresh)
    op = _collecting(ctx, expires_in=-1)
    decided = before_collect(op, ctx, NOW)
    assert isinstance(decided.action, Move | Finish)
    target = decided.action.to if isinstance(decided.action, Move) else decided.action.state
    assert target is to and is_allowed(op.state, to)
    text = decided.action.cause if isinstance(decided.action, Move) else decided.action.reason
    assert "expired at 2024-05-01T11:59:59+00:00" in text


def test_a_403_after_the_urls_end_is_its_expiry_not_a_refused_credential() -> None:
    ctx = _ctx()
    op = _collecting(ctx, expires_in=30)
    send = before_collect(op, ctx, NOW).action
    assert isinstance(send, Send)
    # S3 answers an expired presigned URL with 403 AccessDenied "Request has expired".
    late = after_collect(op, ctx, send.request, reply(403), NOW + timedelta(seconds=31), 0.5)
    assert isinstance(late.action, Move) and late.action.to is S.observing
    early = after_collect(op, ctx, send.request, reply(403), NOW + timedelta(seconds=29), 0.5)
    assert early.action.state is S.escalated  # type: ignore[union-attr]
    assert early.action.reason.value == "authorization_denied"  # type: ignore[union-attr]


def test_a_single_use_download_is_never_requested_a_second_time() -> None:
    ctx = _ctx(expiry=False, refresh_expired_url=False)
    decided = before_collect(_collecting(ctx, None, attempts=1), ctx, NOW)
    assert isinstance(decided.action, Finish)
    assert decided.action.state is S.result_unavailable
    assert "single-use" in decided.action.reason


@pytest.mark.parametrize(
    "answer",
    [
        reply(None, failure=TransportFailure.connection_reset),  # cut off mid-way
        reply(None, failure=TransportFailure.result_store),  # the store went away
        reply(503),
        reply(429),
    ],
)
def test_a_failed_single_use_download_ends_the_operation_instead_of_retrying(
    answer: object,
) -> None:
    ctx = _ctx(expiry=False, refresh_expired_url=False)
    op = _collecting(ctx, None)
    send = before_collect(op, ctx, NOW).action
    assert isinstance(send, Send)
    decided = after_collect(op, ctx, send.request, answer, NOW, 0.5)  # type: ignore[arg-type]
    assert isinstance(decided.action, Finish)
    assert decided.action.state is S.result_unavailable
    assert "not requested again" in decided.action.reason


def test_a_download_that_is_not_single_use_is_retried_under_the_transport_budget() -> None:
    ctx = _ctx(single_use=False, expiry=False, refresh_expired_url=False)
    op = _collecting(ctx, None)
    send = before_collect(op, ctx, NOW).action
    assert isinstance(send, Send)
    cut = reply(None, failure=TransportFailure.connection_reset)
    decided = after_collect(op, ctx, send.request, cut, NOW, 0.5)
    assert isinstance(decided.action, Wait)
    assert decided.changes == {"transport_failures_used": op.transport_failures_used + 1}


@pytest.mark.parametrize(
    ("url", "credential"),
    [
        ("https://exports.example.com/v1/exports/job-1/result", True),
        # A presigned URL on the provider's own host authorizes itself (S3 SigV4).
        ("https://exports.example.com/r/1?X-Amz-Signature=ab&X-Amz-Expires=300", False),
        ("https://exports.example.com/r/1?X-Goog-Signature=ab", False),  # GCS V4 signed
        ("https://exports.example.com/r/1?sv=2024&sig=ab", False),  # Azure SAS
        # An allowed storage host may be read from; it never receives the provider's secret.
        ("https://bucket.s3.example.com/exports/job-1.jsonl", False),
    ],
)
def test_the_providers_credential_goes_only_to_its_own_origin_and_never_with_a_signed_url(
    url: str, credential: bool
) -> None:
    ctx = _ctx(single_use=False, expiry=False, refresh_expired_url=False)
    op = replace(_collecting(ctx, None), result_reference=url)
    send = before_collect(op, ctx, NOW).action
    assert isinstance(send, Send)
    assert send.request.url == url and send.request.with_credential is credential
