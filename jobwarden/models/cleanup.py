"""Cleaning up what an ended job left at the provider (``[cleanup]``): one call, then its
confirmation, awaited like a cancel's.

A job that ends in one of ``cleanup.after`` (failed, cancelled, expired) with a remote
job known does not end yet: ``with_cleanup`` turns that ending into ``cleanup_pending``
(``ended_as`` keeps how it ended, and any partial result is stored all the same). The
cleanup step then sends the call once: its claim moves the row to ``cleaning_up``
before the request leaves, so a worker that dies mid-call never sends a second one;
what became of it is read from its answer or, failing that, from ``check_path``.

Conventions modelled (each named in the tests):
- ARM RPC, "Delete Resource Asynchronously" and RPC-Delete-V1-01: a synchronous DELETE
  answers 200 or 204; a long-running one 202 with a Location; 204 also when the resource
  does not exist; a GET of a deleted resource answers 404.
- OpenAI Files API, "Delete file": 200 with ``{"id": ..., "object": "file",
  "deleted": true}`` (``confirmed_pointer = "/deleted"``).

Confirmation checks count against the operation's status budget, and wait with the
poll's backoff clipped to the cleanup deadline; nothing from the provider widens
either. Whatever stops a cleanup ends in ``cleanup_unconfirmed`` for a person.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from jobwarden.models.actions import (
    Decided,
    EscalationReason,
    Finish,
    NotYet,
    ProviderRequest,
    RequestPurpose,
    Send,
    escalate,
)
from jobwarden.models.contracts.contract import CleanupSpec, ProviderContract
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.polling.decisions import retry_wait
from jobwarden.models.provider.origins import on_allowed_origin, shown_url, usable_url
from jobwarden.models.provider.pointers import Missing, resolve_pointer
from jobwarden.models.provider.requests import StepContext, job_path, resolve_url
from jobwarden.models.provider.signals import RawResponse, SignalKind, classify_http
from jobwarden.models.states import OperationState as S
from jobwarden.models.states import is_allowed

__all__ = ["after_cleanup", "before_cleanup", "with_cleanup"]


def with_cleanup(op: Operation, contract: ProviderContract, decided: Decided) -> Decided:
    """``decided`` with its ending deferred to a cleanup when the contract asks for one.

    Only a job that exists at the provider leaves anything (a refused create does not),
    and only from a state with an edge to ``cleanup_pending`` (the cleanup step's own
    ending is the end).
    """
    spec = contract.cleanup
    action = decided.action
    if (
        spec is None
        or not isinstance(action, Finish)
        or action.clean_up
        or action.state.value not in spec.after
        or op.remote_job_id is None
        or not is_allowed(op.state, S.cleanup_pending)
    ):
        return decided
    return replace(decided, action=replace(action, clean_up=True))


def _url(ctx: StepContext, op: Operation, path: str) -> str | None:
    """The cleanup URL for this job, or None when it would leave the provider's origin."""
    url = resolve_url(ctx.base_url, job_path(path, op.remote_job_id or ""))
    return url if usable_url(url) and on_allowed_origin(url, ctx.base_url) else None


def _stop(op: Operation, reason: EscalationReason, detail: str) -> Decided:
    ended = f" (the job ended {op.ended_as})" if op.ended_as else ""
    return Decided(action=escalate(op.state, reason, detail + ended))


def before_cleanup(op: Operation, ctx: StepContext, now: datetime) -> Decided:
    spec = ctx.contract.cleanup
    if spec is None or op.remote_job_id is None:
        detail = (
            "the contract no longer has a [cleanup] endpoint"
            if spec is None
            else "no remote job id is known to clean up after"
        )
        return _stop(op, EscalationReason.contract_violation, detail)
    deadline = op.cleanup_deadline or now + timedelta(seconds=spec.deadline_seconds)
    if op.state is S.cleanup_pending:
        return _call(op, ctx, spec, deadline, now)
    if op.next_poll_at is not None and now < op.next_poll_at:
        # A duplicate or early message: the legitimate one (or the sweeper) comes later.
        return Decided(action=NotYet(until=None))
    if now >= deadline:
        detail = "cleanup deadline passed without the provider confirming it"
        return _stop(op, EscalationReason.deadline_exceeded, detail)
    if spec.check_path is None:
        detail = "the cleanup answer did not confirm it, and [cleanup] names no check_path"
        return _stop(op, EscalationReason.contract_violation, detail)
    if op.status_requests_used >= op.max_status_requests:
        detail = f"status budget spent ({op.max_status_requests}) before the cleanup confirmed"
        return _stop(op, EscalationReason.request_budget_exhausted, detail)
    url = _url(ctx, op, spec.check_path)
    if url is None:
        return _stop(op, EscalationReason.contract_violation, "cleanup check URL off origin")
    used = op.status_requests_used + 1
    return Decided(
        action=Send(
            request=ProviderRequest(purpose=RequestPurpose.cleanup_check, method="GET", url=url),
            event=EventKind.cleanup_check_sent,
            counters={"status_requests_used": used},
            excerpt={"request": used, "of": op.max_status_requests},
            deadline=deadline,
        )
    )


def _call(
    op: Operation, ctx: StepContext, spec: CleanupSpec, deadline: datetime, now: datetime
) -> Decided:
    url = _url(ctx, op, spec.path)
    if url is None:
        shown = shown_url(resolve_url(ctx.base_url, job_path(spec.path, op.remote_job_id or "")))
        detail = f"cleanup URL on an origin the contract does not allow: {shown}"
        return _stop(op, EscalationReason.contract_violation, detail)
    first = now + timedelta(seconds=ctx.contract.poll.initial_delay_seconds)
    return Decided(
        action=Send(
            request=ProviderRequest(purpose=RequestPurpose.cleanup, method=spec.method, url=url),
            event=EventKind.cleanup_sent,
            # Committed before the call leaves: a worker that dies now leaves the row in
            # cleaning_up, whose step only checks; the call is never sent twice.
            move_to=S.cleaning_up,
            # The checks' backoff starts afresh: the poll's attempts say nothing of this.
            changes={"cleanup_deadline": deadline, "poll_attempt": 0},
            wake_at=min(first, deadline),
            cause=f"the job ended {op.ended_as}; removing what it left",
        )
    )


def _confirmed(op: Operation, how: str) -> Decided:
    ended = S(op.ended_as) if op.ended_as in ("failed", "cancelled", "expired") else S.failed
    reason = f"cleanup confirmed ({how}); the job ended {ended.value}"
    return Decided(action=Finish(state=ended, reason=reason, event=EventKind.cleanup_confirmed))


def _says_removed(spec: CleanupSpec, raw: RawResponse) -> bool:
    # A 204 has no content (RFC 9110, 15.3.5): its status is all it can say.
    if spec.confirmed_pointer is None or raw.observation.status_code == 204:
        return True
    value = resolve_pointer(raw.observation.body, spec.confirmed_pointer)
    # bool is an int in Python: compare types too, so `1` never reads as `true`.
    return not isinstance(value, Missing) and any(
        type(value) is type(want) and value == want for want in spec.confirmed_values
    )


def after_cleanup(
    op: Operation,
    ctx: StepContext,
    request: ProviderRequest,
    raw: RawResponse,
    now: datetime,
    u: float,
) -> Decided:
    spec = ctx.contract.cleanup
    assert spec is not None  # before_cleanup sent nothing without it
    signal = classify_http(raw.observation, now=now)
    code = signal.status_code
    what = "cleanup call" if request.purpose is RequestPurpose.cleanup else "cleanup check"
    if signal.kind in (SignalKind.unauthorized, SignalKind.forbidden):
        # Checks with the same credential cannot succeed either: stop now, say why.
        detail = f"HTTP {code} on the {what}"
        return replace(_stop(op, EscalationReason.authorization_denied, detail), answered=what)
    if code is not None and code in spec.gone_statuses:
        # ARM: a DELETE of what no longer exists answers 204, a GET of it 404.
        return replace(_confirmed(op, f"HTTP {code} on the {what}: gone"), answered=what)
    if request.purpose is RequestPurpose.cleanup:
        if code in spec.confirmed_statuses and _says_removed(spec, raw):
            return replace(_confirmed(op, f"HTTP {code} on the cleanup call"), answered=what)
        if spec.check_path is None:
            # Called once: an answer that does not confirm is not retried by automation.
            detail = f"cleanup call answered HTTP {code or '-'} without confirming it"
            return replace(_stop(op, EscalationReason.provider_failure, detail), answered=what)
    changes: RowChanges = {"poll_attempt": op.poll_attempt + 1}
    if signal.kind in (SignalKind.transport, SignalKind.server_error, SignalKind.rate_limited):
        failures = op.transport_failures_used + 1
        if failures > op.max_transport_failures:
            detail = f"transport budget spent during cleanup (last: HTTP {code or '-'})"
            return replace(_stop(op, EscalationReason.provider_failure, detail), answered=what)
        changes["transport_failures_used"] = failures
    deadline = op.cleanup_deadline or now
    wait = retry_wait(
        signal.retry_after.seconds,
        ctx.contract.poll,
        attempt=op.poll_attempt,
        u=u,
        now=now,
        deadline=deadline,
        cause=(
            "cleanup accepted; confirm by checks"
            if code in spec.accepted_statuses or code in spec.confirmed_statuses
            else f"{what} answered HTTP {code or '-'}: the checks say whether it is gone"
        ),
    )
    return Decided(action=wait, changes=changes, answered=what)
