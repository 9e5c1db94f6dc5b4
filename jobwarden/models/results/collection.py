"""Entering result collection: what the finished job's answer promised, and whether its
result reference can be fetched at all. Shared by the poll and by synchronous creates."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from jobwarden.models.actions import Collect, Escalate, EscalationReason, Finish, escalate
from jobwarden.models.provider.origins import usable_url
from jobwarden.models.provider.pointers import MISSING, resolve_pointer
from jobwarden.models.provider.requests import StepContext
from jobwarden.models.provider.signals import parse_timestamp
from jobwarden.models.results.validation import promised_checksum_key
from jobwarden.models.states import OperationState


def expected_result(ctx: StepContext, body: object) -> dict[str, Any]:
    """What the status body promised about the result, checked when it is collected.

    Read at the poll that saw the job finish, and carried in the row until collection:
    the result's digest (``expected_<algorithm>``; None when promised but absent), the
    counts it declared (OpenAI ``request_counts``; only those present, as whole numbers)
    a second file holding the failed lines (OpenAI ``error_file_id``) and when a signed
    result URL expires (``url_expires_at``).
    """
    expected: dict[str, Any] = {}
    spec = ctx.contract.result
    if spec is None:
        return expected
    if spec.checksum_pointer:
        digest = resolve_pointer(body, spec.checksum_pointer)
        expected[promised_checksum_key(spec)] = digest if isinstance(digest, str) else None
    if spec.fetch == "inline" and ctx.contract.status.result_ref_pointer is not None:
        # Any JSON value is a result, a plain string too; only an absent one (or null) is not.
        inline = resolve_pointer(body, ctx.contract.status.result_ref_pointer)
        expected["inline"] = None if inline is MISSING else inline
    counts: dict[str, int] = {}
    for name, pointer in (
        ("completed", spec.completed_count_pointer),
        ("failed", spec.failed_count_pointer),
        ("total", spec.total_count_pointer),
    ):
        value = resolve_pointer(body, pointer) if pointer is not None else None
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            counts[name] = value
    if counts:
        expected["declared_counts"] = counts
    if spec.error_file_pointer is not None:
        ref = resolve_pointer(body, spec.error_file_pointer)
        if isinstance(ref, str) and ref:
            expected["error_file"] = ref
    if spec.url_expiry_pointer is not None:
        # A signed URL's end (S3 presigned GET: X-Amz-Date + X-Amz-Expires, given here as a
        # time): the download must start before it; unreadable is no expiry known.
        ends = parse_timestamp(resolve_pointer(body, spec.url_expiry_pointer))
        expected["url_expires_at"] = ends.isoformat() if ends is not None else None
    return expected


def collection(
    state: OperationState, ctx: StepContext, ref: str | None, body: object, now: datetime
) -> Collect | Escalate:
    """Collect the result named ``ref``, within the contract's collection deadline."""
    if ref is not None and not usable_url(ref):
        # A tab, newline or NUL in a reference cannot be requested or stored as is.
        detail = f"result reference is not a usable URL: {ref[:80]!r}"
        return escalate(state, EscalationReason.contract_violation, detail)
    window = timedelta(seconds=ctx.contract.limits.result_fetch_deadline_seconds)
    return Collect(result_ref=ref, expected=expected_result(ctx, body), deadline=now + window)


def partial_collection(  # noqa: PLR0913 - collection()'s inputs, and the end it replaces
    state: OperationState,
    ctx: StepContext,
    end: Finish,
    ref: str | None,
    body: object,
    *,
    now: datetime,
) -> Finish | Collect | Escalate:
    """A job that ended ``end.state`` but left partial output (``[result] partial_after``,
    and a result reference in the answer): collect that output first; the collect step
    then ends the operation as the job ended, the output recorded as partial (never as
    a success, never hidden). Otherwise ``end`` as it was."""
    spec = ctx.contract.result
    if spec is None or end.state.value not in spec.partial_after or ref is None:
        return end
    collect = collection(state, ctx, ref, body, now)
    if not isinstance(collect, Collect):
        return collect
    partial = {"partial": end.state.value, "partial_reason": end.reason}
    return replace(collect, expected={**collect.expected, **partial})
