"""Collect: fetch the result by reference, validate it, store it with integrity data.

`succeeded` is written only here, after validation, in the same transaction
that stores the result bytes.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from jobwarden.models import store
from jobwarden.models.backoff import backoff_delay
from jobwarden.models.contract import ProviderContract
from jobwarden.models.db import transaction
from jobwarden.models.decisions import EscalationReason
from jobwarden.models.history import EventDraft, EventKind
from jobwarden.models.results import ResultVerdict, origin_allowed, validate_result
from jobwarden.models.states import OperationState as S
from jobwarden.models.tables import OperationRow, ResultRow
from jobwarden.tasks import faults
from jobwarden.tasks.provider_edge import RawResponse, base_url, resolve_url
from jobwarden.tasks.recording import Next, escalation, excerpt, wake_changes, write
from jobwarden.tasks.runtime import Runtime, utcnow


def _result_url(contract: ProviderContract, row: OperationRow) -> str | None:
    spec = contract.result
    ref = row.result_reference
    if spec is None:
        return None
    if spec.fetch == "path" and spec.path:
        url = spec.path.replace("{job_id}", row.remote_job_id or "")
        return resolve_url(contract, url.replace("{result_ref}", ref or ""))
    if ref is None:
        return None
    return resolve_url(contract, ref)


def collect_step(rt: Runtime, row: OperationRow) -> Next:
    contract = rt.contract(row.provider)
    actor = f"worker:{rt.settings.worker_name}"
    now = utcnow()
    spec = contract.result
    expected: dict[str, Any] = dict((row.validation_summary or {}).get("expected") or {})
    if spec is None:
        return _finish(rt, row, None, None, actor, "contract declares no result; nothing to fetch")
    if spec.fetch == "inline":
        inline = expected.get("inline")
        content = json.dumps(inline, separators=(",", ":")).encode() if inline is not None else b""
        if not content:
            return _reject(rt, row, S.result_unavailable, "inline result missing", actor, None)
        verdict = validate_result(
            spec,
            content=content,
            content_type="application/json",  # serialised here from the status body
            expected_sha256=expected.get("expected_sha256"),
            declared_record_count=None,
        )
        return _finish(rt, row, verdict, content, actor, None)
    url = _result_url(contract, row)
    if url is None:
        return _reject(rt, row, S.result_unavailable, "no result reference", actor, None)
    if not origin_allowed(contract, base_url(contract), url):
        return _reject(
            rt,
            row,
            S.result_unavailable,
            f"result origin not allowed by the contract: {url.split('?')[0]}",
            actor,
            None,
        )
    row = write(
        rt,
        row,
        {},
        [
            EventDraft(
                kind=EventKind.result_fetch_sent,
                actor=actor,
                at=now,
                excerpt={"url": url.split("?")[0]},
            )
        ],
        now,
    )
    faults.fault_point(rt.redis, rt.settings.key_prefix, "after_collect_claim", row.idempotency_key)
    raw = rt.http.send(contract, "GET", url, trace_id=row.trace_id)
    faults.fault_point(
        rt.redis, rt.settings.key_prefix, "after_collect_response", row.idempotency_key
    )
    status = raw.observation.status_code
    if status is not None and 200 <= status < 300:
        verdict = validate_result(
            spec,
            content=raw.content,
            content_type=raw.content_type,
            expected_sha256=expected.get("expected_sha256"),
            declared_record_count=None,
        )
        return _finish(rt, row, verdict, raw.content, actor, None, raw)
    if status in (401, 403):
        return _escalate(
            rt,
            row,
            EscalationReason.authorization_denied,
            f"HTTP {status} fetching the result",
            actor,
            raw,
        )
    if status in (404, 410):
        return _reject(
            rt, row, S.result_unavailable, f"HTTP {status} fetching the result", actor, raw
        )
    used = row.transport_failures_used + 1
    if used > row.max_transport_failures:
        return _escalate(
            rt,
            row,
            EscalationReason.provider_failure,
            "transport failure budget spent fetching the result",
            actor,
            raw,
        )
    delay = backoff_delay(
        attempt=used,
        base=contract.poll.base_seconds,
        maximum=contract.poll.max_seconds,
        jitter_floor=contract.poll.jitter_floor,
        u=rt.jitter(),
    )
    at = now + timedelta(seconds=delay)
    row = write(
        rt,
        row,
        {"transport_failures_used": used, **wake_changes(rt, at, now)},
        [
            EventDraft(
                kind=EventKind.observed,
                actor=actor,
                at=utcnow(),
                http_status=status,
                excerpt=excerpt(raw),
                cause="result fetch failed; retry",
                delay_source="local_backoff",
            )
        ],
        now,
    )
    return Next(row.state, at)


def _finish(
    rt: Runtime,
    row: OperationRow,
    verdict: ResultVerdict | None,
    content: bytes | None,
    actor: str,
    note: str | None,
    raw: RawResponse | None = None,
) -> Next:
    now = utcnow()
    if verdict is not None and not verdict.valid:
        return _reject(
            rt, row, S.result_validation_failed, verdict.problem or "invalid", actor, raw, verdict
        )
    summary = verdict.summary() if verdict else {"valid": True, "problem": None, "note": note}
    with transaction(rt.settings.database_url) as session:
        stored = store.fenced_update(
            session,
            row,
            changes={
                "state": S.succeeded.value,
                "validation_summary": summary,
                **wake_changes(rt, None, now),
            },
            drafts=[
                EventDraft(
                    kind=EventKind.result_collected,
                    actor=actor,
                    at=now,
                    from_state=row.state,
                    to_state=S.succeeded.value,
                    http_status=raw.observation.status_code if raw else None,
                    excerpt=summary,
                )
            ],
            now=now,
        )
        if verdict is not None and content is not None:
            session.add(
                ResultRow(
                    operation_id=row.operation_id,
                    content=content,
                    content_type=raw.content_type if raw else "application/json",
                    sha256=verdict.sha256,
                    size_bytes=verdict.size_bytes,
                    record_count=verdict.record_count,
                    failed_items=verdict.failed_items or None,
                    collected_at=now,
                )
            )
    return Next(stored.state, None)


def _reject(
    rt: Runtime,
    row: OperationRow,
    state: S,
    problem: str,
    actor: str,
    raw: RawResponse | None,
    verdict: ResultVerdict | None = None,
) -> Next:
    now = utcnow()
    summary: dict[str, Any] = verdict.summary() if verdict else {"valid": False, "problem": problem}
    row = write(
        rt,
        row,
        {"state": state.value, "validation_summary": summary, **wake_changes(rt, None, now)},
        [
            EventDraft(
                kind=EventKind.result_rejected,
                actor=actor,
                at=now,
                from_state=row.state,
                to_state=state.value,
                cause=problem,
                http_status=raw.observation.status_code if raw else None,
                excerpt=summary,
            )
        ],
        now,
    )
    return Next(row.state, None)


def _escalate(
    rt: Runtime,
    row: OperationRow,
    reason: EscalationReason,
    detail: str,
    actor: str,
    raw: RawResponse,
) -> Next:
    now = utcnow()
    changes, events = escalation(reason, detail, actor, row, now)
    observed = EventDraft(
        kind=EventKind.observed,
        actor=actor,
        at=now,
        http_status=raw.observation.status_code,
        cause="result fetch",
        excerpt=excerpt(raw),
    )
    row = write(rt, row, changes, [observed, *events], now)
    return Next(row.state, None)
