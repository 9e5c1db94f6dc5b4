"""An approval binds the create as it will leave (DESIGN invariant 13, issue 33 finding 3).

``outgoing.request_digest`` digests the rendering an approver is shown; the approval
records it; the create step renders the request it is about to send and
``request_binding.decide_binding`` refuses to send on any difference (``approval_stale``).
Header names compare case-insensitively and regardless of order (RFC 9110 section 5.1 and
5.3: names are case-insensitive, and only the order of one name's field lines matters).
"""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jobwarden.models.actions import Escalate, EscalationReason, Record
from jobwarden.models.contracts.contract import AuthSpec
from jobwarden.models.errors import RequestDigestMismatchError
from jobwarden.models.history.chain import ChainedEvent, EventDraft, EventKind
from jobwarden.models.humans.approvals import (
    DIGEST_MISMATCH,
    GivenApproval,
    decide_approval,
    given_approvals,
    standing,
)
from jobwarden.models.operation import Operation
from jobwarden.models.provider.binding import APPROVAL_STALE, decide_binding
from jobwarden.models.provider.outgoing import ShownRequest, request_digest, shown_create
from jobwarden.models.provider.requests import StepContext, create_request
from jobwarden.models.states import OperationState
from tests.unit.factories import NOW, context, operation, planned, walked

S = OperationState
UA = "jobwarden (httpx/test)"
SECRET = "sk-live-0123456789abcdefghij"
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
OTHER_URL = "http://127.0.0.1:40773"


def _digest(ctx: StepContext, op: Operation, secrets: tuple[str, ...] = (SECRET,)) -> str:
    return shown_create(ctx, op, user_agent=UA, secrets=secrets).digest


def _moved(ctx: StepContext) -> StepContext:
    return replace(ctx, base_url=OTHER_URL)


def _with_auth(ctx: StepContext, auth: AuthSpec) -> StepContext:
    return replace(ctx, contract=replace(ctx.contract, auth=auth))


def _with_headers(ctx: StepContext, headers: dict[str, str]) -> StepContext:
    return replace(ctx, contract=replace(ctx.contract, extra_headers=headers))


# --- the digest -------------------------------------------------------------------------


def test_the_same_create_digests_alike_and_the_digest_is_the_renderings_own() -> None:
    ctx, op = context(), operation()
    shown = shown_create(ctx, op, user_agent=UA)
    assert shown.digest == request_digest(shown) == _digest(ctx, op, ())
    assert len(shown.digest) == 64 and int(shown.digest, 16) >= 0


@pytest.mark.parametrize(
    ("what", "change"),
    [
        ("the base URL (base_url_env)", lambda ctx, op: (_moved(ctx), op)),
        ("the body", lambda ctx, op: (ctx, replace(op, command={"report": "weekly"}))),
        ("the fingerprint", lambda ctx, op: (ctx, replace(op, request_fingerprint="e" * 64))),
        ("the idempotency token", lambda ctx, op: (ctx, replace(op, provider_token="jw-x"))),
        ("a contract header", lambda ctx, op: (_with_headers(ctx, {"X-Tenant": "b"}), op)),
        (
            "the credential's reference",
            lambda ctx, op: (
                _with_auth(ctx, AuthSpec(scheme="bearer", secret_env="OTHER_TOKEN")),
                op,
            ),
        ),
        (
            "the credential's header",
            lambda ctx, op: (
                _with_auth(ctx, AuthSpec(scheme="header", header="X-Api-Key", secret_env="T")),
                op,
            ),
        ),
    ],
)
def test_anything_that_changes_the_effect_of_the_create_changes_its_digest(
    what: str, change: object
) -> None:
    ctx, op = context(), operation()
    assert callable(change)
    other_ctx, other_op = change(ctx, op)
    assert _digest(other_ctx, other_op) != _digest(ctx, op), what


def test_the_secret_itself_is_never_digested_only_its_reference() -> None:
    ctx, op = context(), operation()
    shown = shown_create(ctx, op, user_agent=UA, secrets=(SECRET,))
    assert SECRET not in repr(shown)
    assert shown.credential_from is not None and shown.credential_from.startswith("env:")
    # A rotated credential (same reference) leaves the approval standing.
    assert _digest(ctx, op, ("another-secret-value-entirely",)) == shown.digest


def test_what_no_approval_can_know_never_makes_it_stale() -> None:
    """The first send's time (Repeatability-First-Sent, OASIS Repeatable Requests 1.0) and
    traceparent's parent id (W3C Trace Context section 3.2.2.3) are digested as
    placeholders: the create sent (and resent) digests as the one approved."""
    base = context()
    spec = replace(base.contract.create, first_sent_header="Repeatability-First-Sent")
    ctx = replace(base, contract=replace(base.contract, create=spec))
    op = operation(S.create_pending)
    approved = _digest(ctx, op)
    first = create_request(ctx, op, NOW)
    sent = shown_create(ctx, op, user_agent=UA, secrets=(SECRET,), request=first)
    assert (
        dict(sent.headers)["Repeatability-First-Sent"]
        != dict(shown_create(ctx, op, user_agent=UA).headers)["Repeatability-First-Sent"]
    )
    assert sent.digest == approved
    # A retry after the first send reads the time from the row: still the same digest.
    again = replace(op, first_sent_at=NOW, create_attempts=1)
    retry = shown_create(ctx, again, user_agent=UA, request=create_request(ctx, again))
    assert retry.digest == approved


_HEADER = st.tuples(
    st.sampled_from(["Accept", "X-A", "x-b", "Content-Type", "Idempotency-Key"]),
    st.text(alphabet="abc/;= 0123", max_size=8),
)


@given(st.lists(_HEADER, max_size=6, unique_by=lambda h: h[0].lower()), st.randoms())
def test_header_order_and_name_case_never_change_the_digest(
    headers: list[tuple[str, str]], rnd: random.Random
) -> None:
    shuffled = list(headers)
    rnd.shuffle(shuffled)
    cased = [(name.swapcase(), value) for name, value in shuffled]

    def shown(hs: list[tuple[str, str]]) -> ShownRequest:
        return ShownRequest(
            method="POST", url="https://p/v1/jobs", headers=tuple(hs), body="{}", fingerprint="f"
        )

    assert request_digest(shown(headers)) == request_digest(shown(cased))


@given(st.text(max_size=20), st.text(max_size=20))
def test_a_header_value_is_part_of_the_digest(a: str, b: str) -> None:
    def shown(value: str) -> ShownRequest:
        return ShownRequest(
            method="POST", url="https://p/", headers=(("X-A", value),), body=None, fingerprint="f"
        )

    assert (request_digest(shown(a)) == request_digest(shown(b))) == (a == b)


# --- the send --------------------------------------------------------------------------


def _approved(digest: str, state: S = S.create_pending, **overrides: object) -> Operation:
    values: dict[str, object] = {
        "approved_request_digest": digest,
        "approval_expires_at": NOW + HOUR,
        "authorized_by": "token:bob",
        "requested_by": "alice",
    }
    return operation(state, **{**values, **overrides})


def test_the_create_that_was_approved_may_leave() -> None:
    ctx = context()
    op = _approved(_digest(ctx, operation()))
    now_digest = _digest(ctx, op)
    assert (
        decide_binding(op, request_digest=now_digest, request_line="x", now=NOW, window=DAY) is None
    )
    # Nothing bound (no approval needed, or approved before requests were bound): it leaves.
    unbound = operation(S.create_pending)
    assert (
        decide_binding(unbound, request_digest="a" * 64, request_line="x", now=NOW, window=DAY)
        is None
    )


def test_a_create_whose_url_moved_after_the_approval_goes_back_for_a_new_approval() -> None:
    ctx = context()
    op = _approved(_digest(ctx, operation()), business_deadline=NOW + 2 * HOUR)
    moved = shown_create(_moved(ctx), op, user_agent=UA)
    decided = decide_binding(
        op,
        request_digest=moved.digest,
        request_line=f"{moved.method} {moved.url}",
        now=NOW,
        window=DAY,
    )
    assert decided is not None and isinstance(decided.action, Record)
    record = decided.action
    assert record.event is EventKind.approval_stale and record.to is S.awaiting_approval
    assert dict(record.excerpt) == {
        "reason": APPROVAL_STALE,
        "approved_request_digest": op.approved_request_digest,
        "request_digest": moved.digest,
        "request": f"POST {OTHER_URL}/v1/jobs",
    }
    assert record.cause is not None and moved.digest in record.cause
    assert op.approved_request_digest is not None and op.approved_request_digest in record.cause
    # A fresh approval window, never past the business deadline.
    assert record.wake_at == NOW + 2 * HOUR
    assert decided.changes == {
        "approved_request_digest": None,
        "approval_expires_at": None,
        "authorized_by": None,
    }
    p = planned(op, decided)
    assert walked(S.create_pending, p) == [S.awaiting_approval]
    assert p.changes["next_poll_at"] == NOW + 2 * HOUR
    (event,) = p.events
    assert event.kind is EventKind.approval_stale


def test_a_reconciliation_resend_to_another_request_stops_for_a_person() -> None:
    """In create_unknown a create may already have reached the approved target: sending
    the same token elsewhere could make a second job, so nothing is sent."""
    op = _approved("a" * 64, S.create_unknown, create_attempts=1)
    decided = decide_binding(op, request_digest="b" * 64, request_line="x", now=NOW, window=DAY)
    assert decided is not None and isinstance(decided.action, Escalate)
    assert decided.action.reason is EscalationReason.approval_stale
    assert "a" * 64 in decided.action.detail and "b" * 64 in decided.action.detail
    p = planned(op, decided)
    assert walked(S.create_unknown, p) == [S.reconciling, S.escalated]


# --- the approval ------------------------------------------------------------------------


def _waiting() -> Operation:
    return operation(
        S.awaiting_approval,
        authorized_by=None,
        requested_by="alice",
        created_at=NOW,
        next_poll_at=NOW + DAY,
    )


def _approve(op: Operation, approver: str = "token:bob", **named: Any) -> Record:
    """The approval's write (a Record), its row changes folded into ``excerpt["changes"]``."""
    decided = decide_approval(
        op,
        fingerprint=op.request_fingerprint,
        approver=approver,
        now=NOW + timedelta(minutes=1),
        valid_for=HOUR,
        waiting_since=NOW,
        window=DAY,
        **named,
    )
    assert isinstance(decided.action, Record)
    return replace(decided.action, excerpt={**decided.action.excerpt, "changes": decided.changes})


def test_an_approval_records_and_binds_the_digest_of_the_request_shown() -> None:
    op = _waiting()
    excerpt = _approve(op, request_digest="c" * 64, request_line="POST http://a/v1/jobs").excerpt
    assert excerpt["changes"]["approved_request_digest"] == "c" * 64
    assert excerpt["request_digest"] == "c" * 64 and excerpt["request"] == "POST http://a/v1/jobs"


def test_an_approver_who_was_shown_another_request_is_refused_naming_request_digest() -> None:
    with pytest.raises(RequestDigestMismatchError) as refused:
        _approve(_waiting(), request_digest="c" * 64, named_request_digest="d" * 64)
    assert refused.value.reason == DIGEST_MISMATCH
    assert str(refused.value).startswith("request_digest: ")
    # Naming the current one is an approval.
    decided = _approve(_waiting(), request_digest="c" * 64, named_request_digest="c" * 64)
    assert decided.to is S.create_pending


def test_two_approvals_count_together_only_for_the_same_request_digest() -> None:
    op = _waiting()
    first = GivenApproval(
        approver="token:bob",
        fingerprint=op.request_fingerprint,
        expires_at=NOW + HOUR,
        request_digest="c" * 64,
    )
    # The request changed between the two: carol's is the first approval of a new pair.
    again = _approve(op, "token:carol", required=2, given=(first,), request_digest="d" * 64)
    assert again.event is EventKind.approval_recorded
    assert again.excerpt["request_digest"] == "d" * 64
    same = _approve(op, "token:carol", required=2, given=(first,), request_digest="c" * 64)
    assert same.event is EventKind.approved
    assert same.excerpt["changes"]["approved_request_digest"] == "c" * 64


def test_the_first_approvals_digest_is_read_back_from_its_event() -> None:
    recorded = {
        "approver": "token:bob",
        "fingerprint": "f" * 64,
        "expires_at": (NOW + HOUR).isoformat(),
        "request_digest": "c" * 64,
    }
    draft = EventDraft(
        kind=EventKind.approval_recorded, actor="human:token:bob", at=NOW, excerpt=recorded
    )
    (given_one,) = given_approvals(
        [ChainedEvent(operation_id="x", seq=3, draft=draft, prev_hash="", hash="")]
    )
    assert given_one.request_digest == "c" * 64
    assert standing((given_one,), "f" * 64, NOW, "c" * 64) == (given_one,)
    assert standing((given_one,), "f" * 64, NOW, "d" * 64) == ()
