"""An operation's history told one line per event, for operators."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jobwarden.models.history import ChainedEvent
from jobwarden.models.tables import OperationRow


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


def event_line(ev: ChainedEvent) -> str:
    d = ev.draft
    ex = d.excerpt or {}
    t = _hhmmss(d.at)
    move = f" -> {d.to_state}" if d.to_state and d.to_state != d.from_state else ""
    kind = d.kind.value
    if kind == "poll_sent":
        text = f"status request {ex.get('request')}/{ex.get('of')} sent{move}"
    elif kind == "observed":
        what = ex.get("remote_state")
        prog = ex.get("progress")
        detail = f", {what}" if what else ""
        detail += f" {prog:.0f}%" if isinstance(prog, int | float) and what else ""
        if ex.get("contradiction"):
            detail += f", contradiction {ex['contradiction']}"
        text = f"polled, {_http(ex, d.http_status)}{detail}"
        if d.cause:
            text = f"{d.cause}: {_http(ex, d.http_status)}"
    elif kind == "decision" and "next_poll_at" in ex:
        text = f"next poll {_hhmmss(ex['next_poll_at'])} ({d.delay_source})"
        if ex.get("clipped_to_deadline"):
            text += ", clipped to the deadline"
    elif kind in ("create_accepted", "create_replayed", "reconciled"):
        text = (
            f"{kind.replace('_', ' ')}, {_http(ex, d.http_status)}, remote job {ex.get('job_id')}"
        )
    elif kind in ("create_ambiguous", "create_refused"):
        nxt = ex.get("next_attempt_at")
        text = f"{kind.replace('_', ' ')}: {d.cause}, {_http(ex, d.http_status)}"
        if nxt:
            text += f", next attempt {_hhmmss(nxt)} ({d.delay_source})"
    elif kind == "escalated":
        text = f"escalated {d.cause}: {ex.get('detail')}"
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
    return f"{t} {text}{move if kind not in ('poll_sent',) else ''}".replace(f"{move}{move}", move)


def summary_lines(row: OperationRow) -> list[str]:
    return [
        f"operation        {row.operation_id}",
        f"tenant/provider  {row.tenant} / {row.provider}",
        f"state            {row.state}"
        + (f" ({row.escalation_reason}: {row.escalation_detail})" if row.escalation_reason else ""),
        f"remote job       {row.remote_job_id or '-'}",
        f"status requests  {row.status_requests_used}/{row.max_status_requests}",
        f"transport fails  {row.transport_failures_used}/{row.max_transport_failures}",
        f"create deadline  {row.create_deadline.isoformat()}",
        f"result deadline  {row.result_deadline.isoformat()}",
        f"cancel deadline  {row.cancel_deadline.isoformat() if row.cancel_deadline else '-'}",
        f"next poll        {row.next_poll_at.isoformat() if row.next_poll_at else '-'}",
        f"progress         {row.progress if row.progress is not None else '-'}",
        f"trace id         {row.trace_id}",
        f"version          {row.version}, {row.event_count} events",
    ]
