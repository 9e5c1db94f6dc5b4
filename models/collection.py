"""Entering result collection: what the finished job's answer promised, and whether its
result reference can be fetched at all. Shared by the poll and by synchronous creates."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from jobwarden.models.actions import Collect, Escalate, EscalationReason, escalate
from jobwarden.models.origins import usable_url
from jobwarden.models.pointers import resolve_pointer
from jobwarden.models.requests import StepContext
from jobwarden.models.states import OperationState


def expected_result(ctx: StepContext, body: object) -> dict[str, Any]:
    """What the status body promised about the result, checked when it is collected."""
    expected: dict[str, Any] = {}
    spec = ctx.contract.result
    if spec is not None and spec.checksum_pointer:
        sha = resolve_pointer(body, spec.checksum_pointer)
        expected["expected_sha256"] = sha if isinstance(sha, str) else None
    if spec is not None and spec.fetch == "inline" and ctx.contract.status.result_ref_pointer:
        inline = resolve_pointer(body, ctx.contract.status.result_ref_pointer)
        expected["inline"] = inline if isinstance(inline, dict | list) else None
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
