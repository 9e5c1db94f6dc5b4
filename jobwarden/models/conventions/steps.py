"""The create and poll decisions of an operation whose contract names an Azure convention.

``models/conventions/strategies.py`` reads each answer as the convention says; this module turns
that reading into the same closed set of actions every other step returns, through
the same core decisions (``decide_status_answer``, ``first_poll``), so Retry-After, the
deadline, the budget and the transport-failure bound hold exactly as for any contract.
Every URL a provider names here (a monitor, a new Location, a final-result location)
passes the origin check before it is stored, so no later request can send the
credential elsewhere (invariant 10).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

from jobwarden.models.actions import (
    Accept,
    Action,
    Collect,
    Decided,
    Escalate,
    EscalationReason,
    Finish,
    escalate,
)
from jobwarden.models.contracts.contract import RemoteStatus
from jobwarden.models.contracts.routes import choose_route
from jobwarden.models.conventions.evidence import MISSING_EVIDENCE
from jobwarden.models.conventions.strategies import (
    Established,
    FinalSource,
    Monitor,
    Tracked,
    establish,
    final_result,
    location_followed,
    read_monitor_answer,
)
from jobwarden.models.conventions.urls import Named, received_url, url_problem
from jobwarden.models.history.chain import EventKind
from jobwarden.models.operation import Operation, RowChanges
from jobwarden.models.polling.decisions import (
    action_for_reading,
    decide_status_answer,
    first_poll,
    poll_view,
)
from jobwarden.models.provider.origins import on_allowed_origin, usable_url
from jobwarden.models.provider.pointers import MISSING, resolve_pointer
from jobwarden.models.provider.requests import StepContext, create_url, job_id_problem
from jobwarden.models.provider.signals import (
    HttpObservation,
    RawResponse,
    SignalKind,
    classify_http,
    read_status,
)
from jobwarden.models.results.collection import collection
from jobwarden.models.states import OperationState as S

__all__ = ["after_monitor_poll", "convention_create"]

# azure-core's set_initial_status: these statuses start (or end) an operation.
_STARTED = frozenset({200, 201, 202, 204})
# Conventions read the result reference their own way; a missing one is no contradiction.
_REF_CONTRADICTIONS = frozenset({"succeeded_without_result_reference", "succeeded_without_result"})
# Body problems of bytes read whole that are not JSON at all (models/signals: the edge's
# parse). "too_deep" and "number_out_of_range" are JSON the edge declined: not these.
_NOT_JSON = frozenset({"malformed_json", "undecodable"})


def _allowed(ctx: StepContext, url: str) -> bool:
    return usable_url(url) and on_allowed_origin(url, ctx.base_url)


def _refused(ctx: StepContext, followed: tuple[Named, ...]) -> str | None:
    """Why a URL the convention will follow cannot be requested (only those are checked)."""
    return next((p for p in (url_problem(n, ctx.base_url) for n in followed) if p), None)


def _tracked(
    op: Operation, ctx: StepContext, monitor: Monitor | None, final: str | None
) -> Tracked:
    route = choose_route(ctx.contract.create, op.command)
    return Tracked(
        method=route.method,
        final_state_via=route.final_state_via,
        monitor=monitor,
        request_url=create_url(ctx, op.command),
        final_url=final,
    )


def _inline(ctx: StepContext, body: object) -> object:
    """The result inside a final body: at the contract's pointer for ``fetch = "inline"``
    (``""`` and no pointer are the whole body); None when it is not there."""
    spec, pointer = ctx.contract.result, ctx.contract.status.result_ref_pointer
    if spec is not None and spec.fetch == "inline" and pointer:
        found = resolve_pointer(body, pointer)
        return None if found is MISSING else found
    return body


def _collect(
    op: Operation, ctx: StepContext, tracked: Tracked, answer: HttpObservation, now: datetime
) -> Collect | Escalate:
    """Collection of a succeeded operation's final result, from where the convention says;
    an answer without the evidence its success needs stops here (never ``succeeded``)."""
    body = answer.body
    final = final_result(
        ctx.contract,
        tracked,
        body,
        status_code=answer.status_code,
        readable=answer.body_problem is None,
    )
    state = op.state if op.state is not S.accepted else S.observing
    if final.source is FinalSource.missing:
        return escalate(state, EscalationReason.contract_violation, final.rule)
    if final.source is FinalSource.url and final.url is not None:
        if not _allowed(ctx, final.url):
            detail = (
                "final result URL on an origin the contract does not allow: "
                f"{received_url(final.url)}"
            )
            return escalate(state, EscalationReason.contract_violation, detail)
        collect = collection(state, ctx, final.url, body, now)
        expected: dict[str, object] = {"final": "url", "final_rule": final.rule}
    elif final.source is FinalSource.body:
        collect = collection(state, ctx, None, body, now)
        expected = {"final": "body", "final_rule": final.rule, "inline": _inline(ctx, body)}
    else:
        collect = collection(state, ctx, None, body, now)
        expected = {"final": "none", "final_rule": final.rule}
    if isinstance(collect, Escalate):
        return collect
    return replace(collect, expected={**collect.expected, **expected})


def convention_create(
    op: Operation, ctx: StepContext, raw: RawResponse, event: EventKind, now: datetime
) -> Decided | None:
    """A 2xx create answer under an Azure convention; None leaves it to the generic path.

    A stop is recorded as the create's answer (``answered``), never as a status read:
    no status request was made (``jobwarden history`` once told it as "polled").
    """
    decided = _convention_create(op, ctx, raw, event, now)
    if decided is None or isinstance(decided.action, Accept):
        return decided
    return replace(decided, answered="create response")


def _convention_create(
    op: Operation, ctx: StepContext, raw: RawResponse, event: EventKind, now: datetime
) -> Decided | None:
    """The monitor header wins over ``Location`` ([LRO]/[ARM]), so a POST whose
    Azure-AsyncOperation later says Failed is read as failed even when its Location would
    answer 200: the Location is only where the final result lives.
    """
    obs = raw.observation
    if obs.status_code not in _STARTED:
        return None
    route = choose_route(ctx.contract.create, op.command)
    established = establish(ctx.contract, route, create_url(ctx, op.command), obs)
    if established is None:
        detail = f"http_{obs.status_code} named no status monitor, Location or resource to poll"
        return Decided(action=escalate(op.state, EscalationReason.contract_violation, detail))
    job_id = established.job_id
    seen: dict[str, Any] = {"job_id": job_id, "monitor": established.monitor}
    if established.ignored:
        # Headers the convention does not follow: recorded, bounded, never checked.
        seen["ignored"] = dict(established.ignored)
    problem = job_id_problem(ctx.contract, job_id) if job_id else None
    problem = problem or _refused(ctx, established.followed)
    if problem is not None:
        return Decided(
            action=escalate(op.state, EscalationReason.contract_violation, problem), seen=seen
        )
    view = poll_view(op, accepted_at=now)
    signal = classify_http(obs, now=now, json_body=False)
    retry_after = signal.retry_after.seconds if signal.retry_after.valid else None
    wait = first_poll(view, ctx.contract.poll, now=now, retry_after=retry_after)
    # azure-core checks the initial answer's state: a monitor already done is not polled,
    # and an answer with no monitor at all is the end (StatusCheckPolling).
    then = _ending(op, ctx, established, raw, now)
    if established.monitor is None and then is None:
        detail = f"http_{obs.status_code} without a monitor, and its state is not terminal"
        return Decided(action=escalate(op.state, EscalationReason.unknown_state, detail), seen=seen)
    accepted = Accept(
        job_id=job_id,
        status_url=established.status_url,
        wait=wait,
        event=event,
        then=then,
        polling_mode=established.monitor,
        final_url=established.final_url,
    )
    return Decided(action=accepted, seen=seen)


def _ending(
    op: Operation, ctx: StepContext, established: Established, raw: RawResponse, now: datetime
) -> Collect | Finish | Escalate | None:
    """How a create answer that carries a terminal state ends; None when it does not."""
    if established.state is None:
        return None
    body = raw.observation.body
    view = poll_view(op, accepted_at=now)
    reading = read_status(
        ctx.contract,
        body if isinstance(body, dict) else {},
        now=now,
        deadline=view.deadline,
        state=established.state,
    )
    if reading.remote_status in (RemoteStatus.pending, RemoteStatus.unknown):
        return None
    outcome = action_for_reading(view, replace(reading, contradiction=None))
    if isinstance(outcome, Collect):
        # Done in its first answer (a PUT/PATCH 200/201, a 204): that answer is the result,
        # or names where it is.
        tracked = _tracked(op, ctx, established.monitor, established.final_url)
        observing = op.with_changes({"state": S.observing})
        return _collect(observing, ctx, tracked, raw.observation, now)
    return outcome if isinstance(outcome, Finish | Escalate) else None


def _final_not_json(
    op: Operation, ctx: StepContext, monitor: Monitor, obs: HttpObservation, now: datetime
) -> Decided:
    """A Location's or the resource's 200/201 whose body is not JSON: the status code says
    the operation is done ([ARM] LocationPolling: anything but a 202; BodyContentPolling),
    so the body is the final answer. Where the convention needs it to be the result, that
    is no evidence: stop at once (``succeeded_without_evidence``), as azure-core raises at
    once (DecodeError, "does not contain a body") rather than poll again. Retrying would
    only re-read a finished operation's answer until the transport budget is spent.
    """
    if monitor is Monitor.resource:
        detail = (
            f"{MISSING_EVIDENCE}: http_{obs.status_code} from the resource with a body "
            "that is not JSON"
        )
        return Decided(action=escalate(op.state, EscalationReason.contract_violation, detail))
    # A Location: the final result may live elsewhere (the original URI, final-state-via).
    tracked = _tracked(op, ctx, monitor, op.result_reference)
    action = _collect(op, ctx, tracked, obs, now)
    return Decided(action=action, seen={"signal": "ok", "monitor": monitor.value})


def after_monitor_poll(
    op: Operation, ctx: StepContext, raw: RawResponse, now: datetime, u: float
) -> Decided:
    """A status answer read through the operation's monitor ([LRO], [ARM])."""
    contract = ctx.contract
    monitor = op.polling_mode or Monitor.status_monitor
    view = poll_view(op)
    obs = raw.observation
    # A Location's final answer may be any JSON (an array, [ARM] exportArray): not judged here.
    signal = classify_http(obs, now=now, json_body=monitor is not Monitor.location)
    if (
        obs.body_problem in _NOT_JSON
        and obs.status_code in (200, 201)
        and monitor is not Monitor.status_monitor
    ):
        return _final_not_json(op, ctx, monitor, obs, now)
    reading = None
    changes: RowChanges = {}
    final_url = op.result_reference
    readable = isinstance(obs.body, dict) or (
        monitor is not Monitor.status_monitor and obs.body_problem is None
    )
    ignored: dict[str, str] = {}
    if signal.kind in (SignalKind.ok, SignalKind.accepted) and readable and op.status_url:
        answer = read_monitor_answer(contract, monitor, op.status_url, obs)
        followed, ignored = answer.followed, dict(answer.ignored)
        new_final = answer.final_url
        if new_final is not None:
            # The route is read only when a Location appears: an ordinary poll costs nothing.
            route = choose_route(contract.create, op.command)
            if not location_followed(route.method, route.final_state_via):
                # A Location this operation never requests is noise, not a violation.
                followed = tuple(n for n in followed if n.url != new_final)
                ignored["location"] = received_url(obs.headers.get("location", ""))
                new_final = None
        detail = _refused(ctx, followed)
        if detail is None and answer.missing is not None:
            detail = f"{MISSING_EVIDENCE}: {answer.missing}"
        if detail is not None:
            return Decided(action=escalate(op.state, EscalationReason.contract_violation, detail))
        if answer.status_url is not None:
            changes["status_url"] = answer.status_url
        if new_final is not None:
            changes["result_reference"] = final_url = new_final
        reading = read_status(
            contract,
            obs.body if isinstance(obs.body, dict) else {},
            now=now,
            deadline=view.deadline,
            state=answer.state,
            state_pointer=answer.state_pointer,
        )
        if reading.contradiction in _REF_CONTRADICTIONS:
            reading = replace(reading, contradiction=None)
    decision, answered = decide_status_answer(view, contract, signal, reading, now=now, u=u)
    changes |= answered
    seen: dict[str, Any] = {"signal": signal.kind.value, "monitor": monitor.value}
    if ignored:
        seen["ignored"] = ignored
    if reading is not None:
        seen |= {
            "remote_state": reading.raw_state,
            "remote_status": reading.remote_status.value,
            "progress": reading.progress,
        }
    action: Action = decision.action
    if isinstance(action, Collect):
        tracked = _tracked(op, ctx, monitor, final_url)
        action = _collect(op, ctx, tracked, obs, now)
    return Decided(action=action, changes=changes, seen=seen)
