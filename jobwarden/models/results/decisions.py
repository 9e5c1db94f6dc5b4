"""The collect decisions: fetch the result only from an allowed origin, validate it.

``succeeded`` is reached only through ``Succeed``, after validation, and is
written in the same transaction that stores the result bytes.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import quote

from jobwarden.models.actions import (
    Decided,
    EscalationReason,
    Finish,
    Move,
    ProviderRequest,
    Record,
    RequestPurpose,
    Send,
    Succeed,
    escalate,
)
from jobwarden.models.contracts.contract import ResultSpec
from jobwarden.models.contracts.fields import MAX_SECONDS
from jobwarden.models.conventions.urls import received_url
from jobwarden.models.create_decisions import not_yet
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation
from jobwarden.models.polling.business_deadline import earlier
from jobwarden.models.polling.decisions import retry_wait
from jobwarden.models.provider.origins import shown_url, takes_credential, usable_url
from jobwarden.models.provider.requests import (
    StepContext,
    resolve_url,
    result_url,
)
from jobwarden.models.provider.signals import RawResponse, SignalKind, classify_http
from jobwarden.models.results.pages import (
    MAX_PAGES,
    first_page,
    next_page,
    page_shape,
    paged_artifact,
)
from jobwarden.models.results.validation import (
    ResultVerdict,
    failed_lines_spec,
    origin_allowed,
    validate_result,
)
from jobwarden.models.states import OperationState as S

# --- collect ----------------------------------------------------------------------------


def _result_ending(
    verdict: ResultVerdict,
    content: bytes | None,
    ctype: str | None,
    location: str | None = None,
    *,
    partial: str | None = None,
) -> Decided:
    """``content`` the bytes in hand (inline), ``location`` where the store holds them;
    ``partial`` the end the job reached when this is its partial output."""
    stored = Succeed(verdict=verdict, content=content, content_type=ctype, location=location)
    # Kept only when they are the bytes sent: a person may later accept them as they are.
    kept = stored if verdict.keepable and (content is not None or location) else None
    if partial is not None:
        # Partial output of a job that did not succeed: kept and labelled, never a success,
        # and the operation ends as the job ended.
        summary = verdict.summary() | {"partial": True} | ({"kept": True} if kept else {})
        return _partial_end(partial, "partial output collected", summary, kept)
    if not verdict.valid:
        finish = Finish(
            state=S.result_validation_failed,
            reason=verdict.problem or "invalid",
            event=EventKind.result_rejected,
            summary=verdict.summary() | ({"kept": True} if kept is not None else {}),
            kept=kept,
        )
        return Decided(action=finish)
    return Decided(action=stored)


def _partial_end(partial: str, what: str, summary: dict[str, Any], kept: Succeed | None) -> Decided:
    state = S(partial)
    # A cancel's end is the provider's confirmation, recorded as such (a remote fact).
    event = EventKind.cancel_confirmed if state is S.cancelled else EventKind.decision
    finish = Finish(
        state=state, reason=f"remote_{partial}; {what}", event=event, summary=summary, kept=kept
    )
    return Decided(action=finish)


def _unavailable(problem: str, *, partial: str | None = None) -> Decided:
    if partial is not None:
        summary = {"valid": False, "problem": problem, "partial": True}
        return _partial_end(partial, f"partial output unavailable: {problem}", summary, None)
    return Decided(
        action=Finish(
            state=S.result_unavailable,
            reason=problem,
            event=EventKind.result_rejected,
            summary={"valid": False, "problem": problem},
        )
    )


def _partial(expected: dict[str, Any]) -> str | None:
    """The end a job reached when what is collected is its partial output (else None)."""
    partial = expected.get("partial")
    return partial if partial in ("cancelled", "failed", "expired") else None


def _failed_file_url(ctx: StepContext, expected: dict[str, Any]) -> str | None:
    """The failed-items file still to fetch (None: none named, none to fetch, or done)."""
    spec = ctx.contract.result
    ref = expected.get("error_file")
    if spec is None or spec.error_file_path is None or not isinstance(ref, str):
        return None
    if "failed_file" in expected:
        return None  # fetched (or found unavailable) by an earlier step
    return resolve_url(
        ctx.base_url, spec.error_file_path.replace("{error_file}", quote(ref, safe=""))
    )


def _failed_file_fetches(expected: dict[str, Any]) -> int:
    """How many of the counted result fetches went to the failed-items file."""
    done = expected.get("failed_file")
    fetches = done.get("fetches") if isinstance(done, dict) else None
    return fetches if isinstance(fetches, int) else 0


def _failed_file_recorded(op: Operation, facts: dict[str, Any], now: datetime) -> Decided:
    """The failed-items file's facts, kept with what the status promised; the result
    itself is fetched next (wake now). Unavailable, its lines are inferred as before."""
    summary = dict(op.validation_summary or {})
    expected = dict(summary.get("expected") or {})
    facts = facts | {"fetches": op.result_fetch_attempts}
    expected["failed_file"] = facts
    summary["expected"] = expected
    record = Record(
        event=EventKind.failed_items_collected,
        cause="failed-items file collected" if "lines" in facts else facts.get("problem"),
        excerpt=facts,
        wake_at=now,
    )
    return Decided(action=record, changes={"validation_summary": summary}, answered="result fetch")


def _after_failed_file(
    op: Operation,
    spec: ResultSpec,
    raw: RawResponse,
    signal_kind: SignalKind,
    code: int | None,
    now: datetime,
) -> Decided | None:
    """A failed-items file's answer: recorded when it says something final, else None
    (a transport failure is retried like the result's own download)."""
    if signal_kind in (SignalKind.ok, SignalKind.accepted):
        collected = raw.collected
        verdict = (
            collected.verdict
            if collected is not None
            else validate_result(
                failed_lines_spec(spec),
                content=raw.content,
                content_type=None,
                body_problem=raw.observation.body_problem,
            )
        )
        facts: dict[str, Any] = {
            "location": collected.location if collected is not None else None,
            "sha256": verdict.sha256,
            "size_bytes": verdict.size_bytes,
        }
        if verdict.problem is not None:
            facts["problem"] = verdict.problem  # unreadable: its lines are not counted
        else:
            facts |= {"lines": verdict.failed_count, "refs": list(verdict.failed_refs)}
        return _failed_file_recorded(op, facts, now)
    if signal_kind in (SignalKind.not_found, SignalKind.gone):
        return _failed_file_recorded(op, {"problem": f"HTTP {code}"}, now)
    return None


def _url_expiry(expected: dict[str, Any]) -> datetime | None:
    raw = expected.get("url_expires_at")
    return datetime.fromisoformat(raw) if isinstance(raw, str) else None


def _expired_url(
    spec: ResultSpec, ends: datetime, now: datetime, partial: str | None = None
) -> Decided:
    """The result URL expired unfetched: look at the status again for a fresh one where
    the contract says the provider gives one, else stop (result_unavailable, with why)."""
    if spec.refresh_expired_url:
        # Back to observing: the next status read costs a counted request, so a provider
        # that keeps handing out expired URLs ends at the status budget, never in a loop.
        cause = f"the result URL expired at {ends.isoformat()} unfetched; read a fresh one"
        return Decided(
            action=Move(to=S.observing, event=EventKind.decision, cause=cause, wake_at=now)
        )
    problem = f"the result URL expired at {ends.isoformat()} before it was fetched"
    return _unavailable(problem, partial=partial)


def _paging(op: Operation, ctx: StepContext, expected: dict[str, Any]) -> dict[str, Any] | None:
    """The paged result in progress: the pages held so far, else the first page's state
    when the final body is the first page of a list that continues (models/result_pages)."""
    held = expected.get("paging")
    if isinstance(held, dict):
        return held
    final, spec = expected.get("final"), ctx.contract.result
    if final != "body" and not (final is None and spec is not None and spec.fetch == "inline"):
        return None
    return first_page(ctx.contract, expected.get("inline"), op.status_url or ctx.base_url)


def _next_of_paged(
    op: Operation,
    ctx: StepContext,
    spec: ResultSpec,
    expected: dict[str, Any],
    paging: dict[str, Any],
    now: datetime,
) -> Decided:
    """Fetch the paged result's next page, or write the artifact once none is left."""
    url = paging.get("next")
    shape = page_shape(ctx.contract)
    if shape is None:
        return _unavailable("pages held for a result whose contract does not page")
    if not isinstance(url, str):
        content, count = paged_artifact(shape, paging)
        ctype = "application/json"  # serialised here from the pages' items
        verdict = validate_result(
            spec,
            content=content,
            content_type=ctype,
            promised=expected,
            declared_record_count=count,
        )
        return _result_ending(verdict, content, ctype, partial=_partial(expected))
    if op.collect_deadline is not None and now >= op.collect_deadline:
        detail = "result fetch deadline passed"
        return Decided(action=escalate(op.state, EscalationReason.deadline_exceeded, detail))
    # Each page is one counted fetch; the limit on failed fetches applies on top of them.
    if op.result_fetch_attempts >= ctx.contract.limits.max_result_fetches + MAX_PAGES:
        detail = f"result fetched {op.result_fetch_attempts} times without a usable answer"
        return Decided(action=escalate(op.state, EscalationReason.provider_failure, detail))
    page = int(paging["pages"]) + 1
    if not (usable_url(url) and origin_allowed(ctx.contract, ctx.base_url, url)):
        # Invariant 10: each page's URL passes the origin rule like the result's own.
        detail = (
            f"page {page} of the paged result on an origin the contract does not allow: "
            f"{received_url(url)}"
        )
        return Decided(action=escalate(op.state, EscalationReason.contract_violation, detail))
    request = ProviderRequest(
        purpose=RequestPurpose.result_page,
        method="GET",
        url=url,
        with_credential=takes_credential(url, ctx.base_url),
    )
    return Decided(
        action=Send(
            request=request,
            event=EventKind.result_fetch_sent,
            counters={"result_fetch_attempts": op.result_fetch_attempts + 1},
            excerpt={"url": shown_url(url), "page": page},
            deadline=op.collect_deadline,
        )
    )


def _page_recorded(
    op: Operation,
    ctx: StepContext,
    request: ProviderRequest,
    raw: RawResponse,
    now: datetime,
) -> Decided:
    """One more page held with the others (or why the paged result cannot be had)."""
    expected = dict((op.validation_summary or {}).get("expected") or {})
    paging = _paging(op, ctx, expected)
    if paging is None:
        return _unavailable("a page arrived for a result that is not paged")
    problem = raw.observation.body_problem
    body = raw.observation.body if problem is None else None
    held, refused = next_page(ctx.contract, paging, body, len(raw.content), request.url)
    if held is None:
        return _unavailable(refused or "page unreadable", partial=_partial(expected))
    return _pages_held(op, expected, held, now)


def _fetched_first_page(
    ctx: StepContext, request: ProviderRequest, raw: RawResponse
) -> dict[str, Any] | None:
    """The paging state a fetched final result starts (``fetch = "url"``: a
    ``resourceLocation``, a result reference), when it is the first page of a list that
    continues; None when it is the result as it is. Only bytes that are the provider's
    (digests held, the body whole) are read: a page whose integrity failed is judged as
    the result it claims to be, and refused there."""
    if request.purpose is not RequestPurpose.result or page_shape(ctx.contract) is None:
        return None
    collected = raw.collected
    if collected is not None and not collected.verdict.keepable:
        return None
    content = collected.page if collected is not None else raw.content
    if not content or raw.observation.body_problem is not None:
        return None
    try:
        body = json.loads(content.decode())
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None  # not JSON: the result's own validation says so
    return first_page(ctx.contract, body, request.url)


def _pages_held(
    op: Operation, expected: dict[str, Any], held: dict[str, Any], now: datetime
) -> Decided:
    """The pages collected so far kept in the row; the next collect step goes on at once."""
    summary = dict(op.validation_summary or {})
    expected["paging"] = held
    summary["expected"] = expected
    nxt = held["next"]
    record = Record(
        event=EventKind.result_page_collected,
        cause=f"page {held['pages']} of the paged result collected",
        excerpt={
            "page": held["pages"],
            "items": len(held["items"]),
            "bytes": held["bytes"],
            "next": received_url(nxt) if isinstance(nxt, str) else None,
        },
        wake_at=now,
    )
    return Decided(action=record, changes={"validation_summary": summary}, answered="result fetch")


def before_collect(op: Operation, ctx: StepContext, now: datetime) -> Decided:
    early = not_yet(op, now)
    if early is not None:
        return early
    spec = ctx.contract.result
    expected: dict[str, Any] = dict((op.validation_summary or {}).get("expected") or {})
    if spec is None:
        note = "contract declares no result; nothing to fetch"
        return Decided(action=Succeed(verdict=None, content=None, content_type=None, note=note))
    # Under an Azure convention the poll that saw the end said where the result is
    # (models/conventions/steps.py): its own body, a URL, or nothing at all (a DELETE).
    final = expected.get("final")
    if final == "none":
        note = f"no final result: {expected.get('final_rule') or 'none by convention'}"
        return Decided(action=Succeed(verdict=None, content=None, content_type=None, note=note))
    paging = _paging(op, ctx, expected)
    if paging is not None:
        # A paged result goes on from its held pages, wherever its first page came from.
        return _next_of_paged(op, ctx, spec, expected, paging, now)
    if final == "body" or (final is None and spec.fetch == "inline"):
        inline = expected.get("inline")
        content = json.dumps(inline, separators=(",", ":")).encode() if inline is not None else b""
        if not content:
            return _unavailable("inline result missing", partial=_partial(expected))
        ctype = "application/json"  # serialised here from the status body
        verdict = validate_result(spec, content=content, content_type=ctype, promised=expected)
        return _result_ending(verdict, content, ctype, partial=_partial(expected))
    limits = ctx.contract.limits
    if op.collect_deadline is not None and now >= op.collect_deadline:
        detail = "result fetch deadline passed"
        return Decided(action=escalate(op.state, EscalationReason.deadline_exceeded, detail))
    if spec.single_use and op.result_fetch_attempts >= 1 + _failed_file_fetches(expected):
        # At most once: the attempt already claimed may have consumed the result, and a
        # second GET of a one-time link is not harmless (it is not made).
        return _unavailable(
            "single-use result download attempted once already; it is not requested again",
            partial=_partial(expected),
        )
    url_ends = _url_expiry(expected)
    if url_ends is not None and now >= url_ends:
        return _expired_url(spec, url_ends, now, _partial(expected))
    if op.result_fetch_attempts >= limits.max_result_fetches:
        detail = f"result fetched {op.result_fetch_attempts} times without a usable answer"
        return Decided(action=escalate(op.state, EscalationReason.provider_failure, detail))
    failed_file = _failed_file_url(ctx, expected)
    url = failed_file or result_url(ctx, op)
    if url is None:
        return _unavailable("no result reference", partial=_partial(expected))
    if not (usable_url(url) and origin_allowed(ctx.contract, ctx.base_url, url)):
        # Invariant 10: the credential goes only where the contract says; nothing is sent.
        detail = f"result URL on an origin the contract does not allow: {shown_url(url)}"
        return Decided(action=escalate(op.state, EscalationReason.contract_violation, detail))
    # Digest fields cover the bytes as sent, content-coding included (RFC 9530, RFC 1864),
    # and any answer may carry one (models.results.digests checks them all): asking for identity
    # keeps them comparable with the bytes the edge returns, which inflates gzip.
    headers = {"accept-encoding": "identity"}
    # The failed-items file first (OpenAI error_file_id): the result's judgement then
    # counts its lines instead of inferring them from the status body.
    purpose = RequestPurpose.failed_items if failed_file else RequestPurpose.result
    request = ProviderRequest(
        purpose=purpose,
        method="GET",
        url=url,
        headers=headers,
        with_credential=takes_credential(url, ctx.base_url),
    )
    return Decided(
        action=Send(
            request=request,
            event=EventKind.result_fetch_sent,
            counters={"result_fetch_attempts": op.result_fetch_attempts + 1},
            excerpt={"url": shown_url(url)} | ({"file": purpose.value} if failed_file else {}),
            # A signed URL must not be asked for after it expired: the later bound holds.
            deadline=earlier(op.collect_deadline, url_ends) if op.collect_deadline else url_ends,
        )
    )


def after_collect(
    op: Operation,
    ctx: StepContext,
    request: ProviderRequest,
    raw: RawResponse,
    now: datetime,
    u: float,
) -> Decided:
    contract = ctx.contract
    spec = contract.result
    # A result is bytes of the contract's type (CSV, JSON Lines): its body is not judged here.
    signal = classify_http(raw.observation, now=now, json_body=False)
    code = signal.status_code
    expected = dict((op.validation_summary or {}).get("expected") or {})
    partial = _partial(expected)
    if (
        request.purpose is RequestPurpose.result_page
        and spec is not None
        and signal.kind in (SignalKind.ok, SignalKind.accepted)
    ):
        return _page_recorded(op, ctx, request, raw, now)
    if request.purpose is RequestPurpose.failed_items and spec is not None:
        recorded = _after_failed_file(op, spec, raw, signal.kind, code, now)
        if recorded is not None:
            return recorded
    elif spec is not None and signal.kind in (SignalKind.ok, SignalKind.accepted):
        collected = raw.collected
        started = _fetched_first_page(ctx, request, raw)
        if started is not None:
            return _pages_held(op, expected, started, now)
        if collected is not None:
            # Judged as it streamed into the result store (the shell fed ResultScan).
            return _result_ending(
                collected.verdict,
                collected.inline,
                raw.content_type,
                collected.location,
                partial=partial,
            )
        verdict = validate_result(
            spec,
            content=raw.content,
            content_type=raw.content_type,
            promised=expected,
            headers=raw.observation.headers,
            body_problem=raw.observation.body_problem,
        )
        return _result_ending(verdict, raw.content, raw.content_type, partial=partial)
    url_ends = _url_expiry(expected)
    if (
        spec is not None
        and signal.kind in (SignalKind.unauthorized, SignalKind.forbidden)
        and url_ends is not None
        and now >= url_ends
    ):
        # A presigned URL past its expiry answers 403 ("Request has expired", S3): the
        # URL's end, not the credential's refusal.
        return _expired_url(spec, url_ends, now, partial)
    if signal.kind in (SignalKind.unauthorized, SignalKind.forbidden):
        detail = f"HTTP {code} fetching the result"
        denied = escalate(op.state, EscalationReason.authorization_denied, detail)
        return Decided(action=denied, answered="result fetch")
    if signal.kind in (SignalKind.not_found, SignalKind.gone):
        return _unavailable(f"HTTP {code} fetching the result", partial=partial)
    if spec is not None and spec.single_use:
        # The one attempt was made and failed (cut off, refused, the store down): asking
        # again could consume or redeliver what the first may already have consumed.
        what = raw.observation.transport_failure or f"HTTP {code}"
        problem = f"single-use result download failed ({what}); not requested again"
        return _unavailable(problem, partial=partial)
    # A failed download is not a failed job: spend the transport budget, then stop.
    used = op.transport_failures_used + 1
    if used > op.max_transport_failures:
        detail = "transport failure budget spent fetching the result"
        spent = escalate(op.state, EscalationReason.provider_failure, detail)
        return Decided(
            action=spent, changes={"transport_failures_used": used}, answered="result fetch"
        )
    # Clipped to the collection deadline: the next step then stops instead of waiting on.
    deadline = op.collect_deadline or now + timedelta(seconds=MAX_SECONDS)
    wait = retry_wait(
        signal.retry_after.seconds if signal.retry_after.valid else None,
        contract.poll,
        attempt=used,
        u=u,
        now=now,
        deadline=deadline,
        cause="result fetch failed; retry",
    )
    return Decided(action=wait, changes={"transport_failures_used": used}, answered="result fetch")
