"""An operation's history told one line per event, for operators."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from jobwarden.models.contracts.pins import short_digest
from jobwarden.models.history.chain import ChainedEvent, EventDraft
from jobwarden.models.operation import Operation

# A provider's value (a job id, a state, a detail) shown longer than this is cut.
SHOWN_VALUE_LIMIT = 200


def shown(value: object, limit: int | None = SHOWN_VALUE_LIMIT) -> str:
    """``value`` as one safe line: control and other unprintable characters escaped, cut short.

    Provider text is stored faithfully (a job id with a newline stays one); only
    what an operator reads is escaped, so one event stays one line.
    """
    text = str(value)
    if limit is not None and len(text) > limit:
        text = f"{text[:limit]}... ({len(text)} characters)"
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode() for c in text)


def _hhmmss(value: str | datetime | None) -> str:
    if value is None:
        return "?"
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).strftime("%H:%M:%S")
        except ValueError:
            return value
    return value.strftime("%H:%M:%S")


def _http(ex: dict[str, Any], status: int | None) -> str:
    if "transport_failure" in ex:
        return f"no answer ({ex['transport_failure']})"
    parts = [str(status)] if status is not None else []
    ra = (ex.get("headers") or {}).get("retry-after")
    if ra is not None:
        parts.append(f"Retry-After {ra}")
    return ", ".join(parts)


def _percent(progress: float) -> str:
    try:
        return f"{progress:.0f}%"
    except OverflowError:  # an integer beyond any float: shown as the provider sent it
        return f"{shown(progress, limit=40)}%"


def _next_poll(ex: dict[str, Any], delay_source: str | None) -> str:
    text = f"next poll {_hhmmss(ex.get('next_poll_at'))} ({delay_source})"
    return text + (", clipped to the deadline" if ex.get("clipped_to_deadline") else "")


def _business_decision(kind: str, ex: dict[str, Any]) -> str | None:
    """A person's resubmission or accepted result, as its line says it (else None)."""
    if kind == "resubmitted":
        # Both histories name the other: this one its replacement, that one this.
        return f"resubmitted as {shown(ex.get('resubmitted_as'))}: {shown(ex.get('note'))}"
    if kind == "intent_recorded" and ex.get("resubmit_of"):
        return f"intent recorded, resubmission of {shown(ex.get('resubmit_of'))}"
    if kind == "result_accepted":
        sha = shown(ex.get("sha256"))
        return (
            f"result accepted as it is, not validated (sha256 {sha}; "
            f"{shown(ex.get('validation_problem'))}): {shown(ex.get('note'))}"
        )
    return None


def _approval_line(d: EventDraft) -> str | None:
    """An approval that bound the request: its request line and digest (invariant 13)."""
    ex = d.excerpt or {}
    if d.kind.value not in ("approved", "approval_recorded") or "request_digest" not in ex:
        return None
    cause = f" ({d.cause})" if d.cause else ""
    request = shown(ex.get("request", "the create"), limit=None)
    return (
        f"{d.kind.value.replace('_', ' ')}{cause}: {request}, request digest {ex['request_digest']}"
    )


def event_line(ev: ChainedEvent) -> str:
    d = ev.draft
    ex = d.excerpt or {}
    t = _hhmmss(d.at)
    move = f" -> {d.to_state}" if d.to_state and d.to_state != d.from_state else ""
    kind = d.kind.value
    if kind == "poll_sent":
        text = f"status request {ex.get('request')}/{ex.get('of')} sent{move}"
        if d.cause:
            text += f" ({d.cause})"
    elif kind in ("observed", "polled"):
        what = ex.get("remote_state")
        prog = ex.get("progress")
        detail = f", {what}" if what else ""
        detail += f" {_percent(prog)}" if isinstance(prog, int | float) and what else ""
        if ex.get("contradiction"):
            detail += f", contradiction {ex['contradiction']}"
        # A reserved request is recorded with its answer: its ordinal rides on this event.
        sent = f"status request {ex['request']}/{ex.get('of')}: " if "request" in ex else ""
        text = f"{sent}polled, {_http(ex, d.http_status)}{detail}"
        if d.cause and kind == "observed":
            text = f"{d.cause}: {_http(ex, d.http_status)}"
        if kind == "polled":
            text += f"; {_next_poll(ex, d.delay_source)}"
    elif kind == "decision" and "next_poll_at" in ex:
        text = _next_poll(ex, d.delay_source)
    elif kind in ("create_accepted", "create_replayed", "reconciled"):
        job = shown(ex.get("job_id"))
        text = f"{kind.replace('_', ' ')}, {_http(ex, d.http_status)}, remote job {job}"
    elif kind in ("create_ambiguous", "create_rate_limited", "create_refused"):
        nxt = ex.get("next_attempt_at")
        text = f"{kind.replace('_', ' ')}: {d.cause}, {_http(ex, d.http_status)}"
        if nxt:
            text += f", next attempt {_hhmmss(nxt)} ({d.delay_source})"
    elif kind == "escalated":
        text = f"escalated {d.cause}: {ex.get('detail')}"
    elif (decided := _business_decision(kind, ex) or _approval_line(d)) is not None:
        text = decided
    elif kind in ("result_collected", "result_rejected"):
        counts = ""
        if ex.get("succeeded_items") is not None:
            counts = f", {ex['succeeded_items']} items ok, {ex.get('failed_item_count', 0)} failed"
            if ex.get("failed_item_refs"):
                counts += f" ({', '.join(map(str, ex['failed_item_refs'][:5]))})"
        problem = f": {ex.get('problem')}" if ex.get("problem") else ""
        text = f"{kind.replace('_', ' ')}{problem}{counts}"
    else:
        cause = f": {d.cause}" if d.cause else ""
        text = f"{kind.replace('_', ' ')}{cause}"
    text += _marks(kind, ex)
    line = f"{t} {text}{move if kind not in ('poll_sent',) else ''}".replace(f"{move}{move}", move)
    return shown(line, limit=None)


def _marks(kind: str, ex: Mapping[str, Any]) -> str:
    """What an event line adds about trust: the pinned contract, a break-glass author."""
    marks = ""
    if kind == "intent_recorded" and ex.get("contract_digest"):
        # Which contract it was created under (invariant 16), as `show` names it.
        marks += f", contract {short_digest(str(ex['contract_digest']))}"
    if ex.get("break_glass"):
        # A decision without a token (issue 33): the history says so on its own line.
        marks += f" [BREAK-GLASS, not counted toward a two-person rule: {ex['break_glass']}]"
    return marks


def summary_lines(row: Operation, deadlines: list[str] | None = None) -> list[str]:
    """`show`'s summary of ``row``; ``deadlines`` replace the bare deadline lines (the CLI
    gives them with whether each still applies: jobwarden/cli/deadlines.py)."""
    bare = [
        f"create deadline  {row.create_deadline.isoformat()}",
        f"result deadline  {row.result_deadline.isoformat()}",
        f"cancel deadline  {row.cancel_deadline.isoformat() if row.cancel_deadline else '-'}",
    ]
    lines = [
        f"operation        {row.operation_id}",
        f"tenant/provider  {row.tenant} / {row.provider}",
        f"state            {row.state}"
        + (f" ({row.escalation_reason}: {row.escalation_detail})" if row.escalation_reason else ""),
        f"remote job       {shown(row.remote_job_id or '-')}",
        f"status requests  {row.status_requests_used}/{row.max_status_requests}"
        + (f" ({row.reserved_request} reserved, not yet sent)" if row.reserved_request else ""),
        f"transport fails  {row.transport_failures_used}/{row.max_transport_failures}",
        *(bare if deadlines is None else deadlines),
        f"next poll        {row.next_poll_at.isoformat() if row.next_poll_at else '-'}",
        f"progress         {row.progress if row.progress is not None else '-'}",
        f"trace id         {row.trace_id}",
        f"concurrency key  {shown(row.concurrency_key)} (limit {row.concurrency_limit})"
        if row.concurrency_key
        else "concurrency key  -",
        f"version          {row.version}, {row.event_count} events",
        f"contract         {short_digest(row.contract_digest)}"
        + ("" if row.contract_digest else " (created before pinning: the current one)"),
    ]
    if row.resubmit_of is not None:
        lines.append(f"resubmission of  {row.resubmit_of}")
    if row.resubmitted_as is not None:
        lines.append(f"resubmitted as   {row.resubmitted_as}")
    return [shown(line, limit=None) for line in lines]
