"""An approval of an operation waiting for one: bound to its fingerprint, expiring, and
given within the approval window.

A human's wait is not the provider's: the create and result deadlines start when the
operation is approved (they move by the time spent waiting, as ``admission`` moves them
by the time spent queued). The wait has its own bound, the contract's
``limits.approval_window_seconds``, capped by the business deadline (which never moves).
The window's end is the awaiting operation's timer (``next_poll_at``): when it comes the
approval-window step ends the operation in ``approval_expired``, and an approval after it
is refused with the reason, never accepted and then failed.

The two-person rule (``approvals_required = 2``): the first approval is an
``approval_recorded`` event and the operation keeps waiting; the second, by another
person, for the same fingerprint and request digest, while the first is unexpired, is
the approval. The submitter is never one of the two, nor is the principal an operation
was submitted on behalf of (a schedule's author: the intent event's ``on_behalf_of``),
who never approves it at all. Only authenticated principals count (models/humans/identity.py):
a break-glass or a named approver is refused under the rule, and is recorded as such
where it may act (one approval). Earlier approvals are read from the history and come
in as values (``GivenApproval``); no column holds them.

An approval binds the create as it will leave by its digest (``request_digest``,
``models/provider/outgoing.py``): recorded in its events and on the row
(``approved_request_digest``), which the create step checks before sending
(``models/provider/binding.py``). An approver who names a digest other than the current
one was shown another request, and is refused.

Pure: the frozen operation, what the approver named and the time in, the write out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from jobwarden.models.actions import Decided, Finish, NotYet, Record
from jobwarden.models.errors import (
    AnotherApproverNeededError,
    ApprovalRefusedError,
    RefusedInputError,
    RequestDigestMismatchError,
)
from jobwarden.models.history.chain import ChainedEvent, EventKind
from jobwarden.models.humans.identity import Author, AuthorKind, recorded_author, same_principal
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.polling.business_deadline import earlier, passed
from jobwarden.models.states import OperationState as S

WINDOW_CLOSED = "approval_window_closed"
BUSINESS_DEADLINE_PASSED = "business_deadline_passed"
WINDOW_ENDED = "the approval window closed unapproved; the operation ended approval_expired"
SELF_APPROVAL = "self_approval_refused"
SAME_APPROVER = "same_approver"
# A break-glass or named approver under the two-person rule: it never counts.
NOT_COUNTED = "approver_not_counted"
DIGEST_MISMATCH = "request_digest_mismatch"
# operations.authorized_by is varchar(200): two long names are cut there, never refused
# (the approval events keep both in full).
AUTHORIZED_BY_MAX = 200


@dataclass(frozen=True, slots=True, kw_only=True)
class GivenApproval:
    """An approval already recorded while the operation waits for another (its event)."""

    approver: str
    fingerprint: str
    expires_at: datetime
    # Recorded by an authenticated principal: only those count toward the rule (an
    # approval a typed name recorded before identities were authenticated never does).
    authenticated: bool = True
    request_digest: str | None = None  # None: given before approvals bound the request


# Kept for callers of the old name: identity is compared by principal (models/humans/identity.py).
same_person = same_principal


def on_behalf_of(events: Iterable[ChainedEvent]) -> str | None:
    """The principal the operation was submitted on behalf of (its intent event says;
    a schedule's author for what the schedule fired), or None."""
    for ev in events:
        if ev.draft.kind is EventKind.intent_recorded:
            who = (ev.draft.excerpt or {}).get("on_behalf_of")
            return str(who) if who else None
    return None


def given_approvals(events: Iterable[ChainedEvent]) -> tuple[GivenApproval, ...]:
    """The approvals recorded since the operation last began waiting for approval (an
    earlier wait's approvals, before a cancel or a re-admission, never count)."""
    given: list[GivenApproval] = []
    for ev in events:
        d = ev.draft
        if d.to_state == S.awaiting_approval.value:
            given = []
        elif d.kind is EventKind.approval_recorded and d.excerpt is not None:
            approver = str(d.excerpt["approver"])
            given.append(
                GivenApproval(
                    approver=approver,
                    fingerprint=str(d.excerpt["fingerprint"]),
                    expires_at=datetime.fromisoformat(str(d.excerpt["expires_at"])),
                    authenticated=recorded_author(approver, d.excerpt).authenticated,
                    request_digest=d.excerpt.get("request_digest"),
                )
            )
    return tuple(given)


def standing(
    given: Sequence[GivenApproval],
    fingerprint: str,
    now: datetime,
    request_digest: str | None = None,
) -> tuple[GivenApproval, ...]:
    """The earlier approvals that still count: authenticated, for this fingerprint and,
    when one is bound, this request digest (two approvers must approve the same
    request), and unexpired."""
    return tuple(
        g
        for g in given
        if g.authenticated
        and g.fingerprint == fingerprint
        and now < g.expires_at
        and (request_digest is None or g.request_digest == request_digest)
    )


def window_end(since: datetime, window: timedelta, business: datetime | None) -> datetime:
    """When the wait for approval that began at ``since`` ends: the business deadline
    comes first if it is earlier (an approval after it could never be kept)."""
    return earlier(since + window, business)


def approval_window_end(op: Operation, *, waiting_since: datetime, window: timedelta) -> datetime:
    """The window's end for an operation awaiting approval.

    The timer set when it began waiting is the end (fixed then, like a deadline, so a
    contract changed meanwhile does not move it); a row written before the timer existed
    has none, and its end is computed from when it began waiting.
    """
    if op.state is S.awaiting_approval and op.next_poll_at is not None:
        return earlier(op.next_poll_at, op.business_deadline)
    return window_end(waiting_since, window, op.business_deadline)


def _refusal(op: Operation, end: datetime, now: datetime) -> ApprovalRefusedError | None:
    if op.business_deadline is not None and passed(op.business_deadline, now):
        return ApprovalRefusedError(
            BUSINESS_DEADLINE_PASSED,
            f"the business deadline {op.business_deadline.isoformat()} has passed; "
            "the create could no longer be sent",
        )
    if now >= end:
        return ApprovalRefusedError(
            WINDOW_CLOSED, f"the approval window closed at {end.isoformat()}"
        )
    return None


def decide_approval(  # noqa: PLR0913 - each input is named at the one call
    op: Operation,
    *,
    fingerprint: str,
    approver: Author | str,
    now: datetime,
    valid_for: timedelta,
    waiting_since: datetime,
    window: timedelta,
    required: int = 1,
    given: Sequence[GivenApproval] = (),
    behalf_of: str | None = None,
    request_digest: str | None = None,
    named_request_digest: str | None = None,
    request_line: str | None = None,
) -> Decided:
    """The approval as the write it makes; RefusedInputError when it may not be given.

    Refused when the operation is not awaiting approval or the fingerprint differs (a
    changed payload needs a new approval); ApprovalRefusedError, naming the reason, when
    the approval window or the business deadline has passed. ``waiting_since`` is when
    the operation began waiting for approval (its intent, or its admission by a
    concurrency key); ``window`` the contract's approval window.

    With ``required`` 2, ``given`` are the approvals recorded in this wait: without a
    standing one this approval is recorded and the operation keeps waiting; with one it
    is the approval. AnotherApproverNeededError when the approver is the submitter (one
    approval: unless the token's tenant allows it), the principal ``behalf_of`` names
    (never), already approved, or under the rule is not an authenticated principal.

    ``request_digest`` is the digest of the create as it would leave now (what the door
    shows), bound by the approval; ``named_request_digest`` the one the approver was
    shown, if the door knows it: RequestDigestMismatchError when the two differ.
    ``request_line`` (``METHOD URL`` as shown) is recorded beside the digest, for people.
    """
    if op.state is S.approval_expired:
        # Ended by the window's own step first: the same refusal, for the same reason.
        raise ApprovalRefusedError(WINDOW_CLOSED, WINDOW_ENDED)
    if op.state is not S.awaiting_approval:
        raise RefusedInputError(f"operation {op.operation_id} is not awaiting approval")
    if op.request_fingerprint != fingerprint:
        raise RefusedInputError(
            "the approval names a different fingerprint than the "
            "operation's; a changed payload needs a new approval"
        )
    # Text here is a recorded actor (the doors hand an Author; the Python door's text
    # was turned into one by as_author, which refuses text spelt as a principal).
    approver = recorded_author(approver, {}) if isinstance(approver, str) else approver
    if named_request_digest is not None and named_request_digest != request_digest:
        raise RequestDigestMismatchError(
            DIGEST_MISMATCH,
            "the approval names another request digest than the create that would leave "
            f"now ({request_digest}); look at the request again and approve what it shows",
        )
    refused = _refusal(op, approval_window_end(op, waiting_since=waiting_since, window=window), now)
    if refused is not None:
        raise refused
    # An approval expires: the create step refuses to send under a stale one, so an
    # approval given today cannot authorize a create a week from now. Nor past the
    # business deadline, which no approval can extend.
    expires = earlier(now + valid_for, op.business_deadline)
    earlier_ones = _others(
        op, approver, behalf_of, required, standing(given, fingerprint, now, request_digest)
    )
    if required > 1:
        if len(earlier_ones) + 1 < required:
            bound = (request_digest, request_line)
            return _first_of_two(fingerprint, approver, expires, required, bound)
        # Valid while both are: the earlier expiry of the two.
        expires = min([expires, *(g.expires_at for g in earlier_ones)])
    # The human's wait never consumes the deadline for establishing the remote job
    # (DESIGN invariant 13): both provider deadlines start now.
    waited = max(now - waiting_since, timedelta(0))
    create_by, result_by = op.create_deadline + waited, op.result_deadline + waited
    approvers = [*(g.approver for g in earlier_ones), approver.actor]
    excerpt: dict[str, Any] = {
        # The actor names the approver; a break-glass one is also marked, with its reason.
        **(approver.excerpt() if approver.kind is AuthorKind.break_glass else {}),
        "fingerprint": fingerprint,
        "expires_at": expires.isoformat(),
        "waited_seconds": round(waited.total_seconds(), 3),
        "create_deadline": create_by.isoformat(),
        "result_deadline": result_by.isoformat(),
    }
    if required > 1:
        excerpt["approvers"] = approvers
    if request_line is not None:
        excerpt["request"] = request_line
    record = Record(event=EventKind.approved, to=S.create_pending, excerpt=excerpt, wake_at=now)
    authorized_by = ", ".join(approvers)
    if len(authorized_by) > AUTHORIZED_BY_MAX:
        authorized_by = authorized_by[: AUTHORIZED_BY_MAX - 1] + "…"
    changes: RowChanges = {
        "authorized_by": authorized_by,
        "approval_expires_at": expires,
        "create_deadline": create_by,
        "result_deadline": result_by,
    }
    if request_digest is not None:
        # The create step sends only the request with this digest (request_binding.py).
        excerpt["request_digest"] = request_digest
        changes["approved_request_digest"] = request_digest
    return Decided(action=record, changes=changes)


def _others(
    op: Operation,
    approver: Author,
    behalf_of: str | None,
    required: int,
    earlier_ones: tuple[GivenApproval, ...],
) -> tuple[GivenApproval, ...]:
    """The standing approvals of other people (none under one approval); refused when
    the approver may not approve, or may not count. The same rule for every door."""
    who = approver.actor
    if behalf_of is not None and same_principal(who, behalf_of):
        # No setting lifts this: the schedule's author declared the work; approving it
        # too would make the declaration its own authority.
        raise AnotherApproverNeededError(
            SELF_APPROVAL,
            f"{who} declared the schedule that submitted the operation on their behalf; "
            "another approver must approve it",
        )
    if same_principal(who, op.requested_by) and not (
        # The tenant's choice (jobwarden tenants allow-self-approval), for one approval
        # only: a two-person rule the submitter could fill is none.
        approver.allows_self_approval and required == 1
    ):
        others = "two other people" if required > 1 else "another approver"
        raise AnotherApproverNeededError(
            SELF_APPROVAL, f"{who} submitted the operation; {others} must approve it"
        )
    if required == 1:
        return ()
    if not approver.authenticated:
        raise AnotherApproverNeededError(
            NOT_COUNTED,
            f"{who} is not an authenticated principal ({approver.kind.value}); only token "
            f"holders count toward the {required}-person rule",
        )
    if any(same_principal(who, g.approver) for g in earlier_ones):
        raise AnotherApproverNeededError(
            SAME_APPROVER, f"{who} already approved; another approver must approve"
        )
    return earlier_ones


def _first_of_two(
    fingerprint: str,
    approver: Author,
    expires: datetime,
    required: int,
    bound: tuple[str | None, str | None],
) -> Decided:
    """The first approval: recorded (who, the fingerprint and request digest, its expiry);
    still waiting, its window's timer untouched, its deadlines not yet moved."""
    excerpt: dict[str, object] = {
        **approver.excerpt(),
        "approver": approver.actor,
        "fingerprint": fingerprint,
        "expires_at": expires.isoformat(),
        "approvals_required": required,
    }
    request_digest, request_line = bound
    if request_digest is not None:
        excerpt["request_digest"] = request_digest
    if request_line is not None:
        excerpt["request"] = request_line
    record = Record(
        event=EventKind.approval_recorded, cause=f"1 of {required} approvals", excerpt=excerpt
    )
    return Decided(action=record)


def decide_window(op: Operation, now: datetime) -> Decided:
    """The approval-window step: before its end nothing (an early message), after it the
    operation ends in ``approval_expired`` with nothing sent."""
    end = op.next_poll_at
    if end is None or now < end:
        # Early, or a row with no window timer (written before it existed): a stray
        # message must not end what nobody scheduled to end.
        return Decided(action=NotYet(until=end))
    reason = (
        "business deadline passed while awaiting approval"
        if passed(op.business_deadline, now)
        else "approval window closed without an approval"
    )
    return Decided(action=Finish(state=S.approval_expired, reason=reason))
