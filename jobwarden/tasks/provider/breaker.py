"""The provider breaker's shell: count each status answer, open as one pause, probe, close.

Counting (the hot path): a status answer at a provider whose contract has a ``[breaker]``
table costs one Redis script call, which adds it to the current time bucket, keeps the
first and last failing operation and a few bounded samples, and returns the window's
sums and whether the breaker is already opening. The pure verdict
(models/provider/breaker.py) decides; the step that trips it wins a ``SET NX`` and opens
the breaker at once: one transaction inserts the pause (author ``rule:breaker``, reason and
evidence) and the incident row, so from its commit every step's snapshot carries the hold
and sends nothing. Parking everything the pause covers is a task of its own (the planner
parks what it has not reached). A failing answer counted while the breaker is open or
opening spends no per-operation budget and escalates nothing (``not_counted``).

Half-open: the sweeper claims a due incident's probe by a compare-and-set (one probe, however
many workers sweep), names one parked operation as the probe (the hold lets its requests
through) and wakes it; its step reports the answer. Success closes the incident and resumes
the pause, waking the rest spread by the provider's rate; failure re-arms the cool-down.
A probe whose answer never comes back (a killed worker, a lost message) is taken again by
the sweeper after a cool-down.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from redis.commands.core import Script

from jobwarden.config.celery_app import app
from jobwarden.models.actions import Decided, ProviderRequest, RequestPurpose
from jobwarden.models.contracts.contract import Breaker, ProviderContract
from jobwarden.models.errors import LostRaceError, RefusedInputError
from jobwarden.models.humans.identity import Author, as_author
from jobwarden.models.humans.pauses import Rule
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import breaker_store, pause_store
from jobwarden.models.persistence.breaker_store import Incident
from jobwarden.models.persistence.db import snapshot, transaction
from jobwarden.models.provider import breaker as pure
from jobwarden.models.provider.breaker import AnswerClass, WindowCounts
from jobwarden.models.provider.signals import RawResponse
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.provider.edge import secret_forms
from jobwarden.tasks.runtime import Runtime, current, utcnow

log = get_logger("jobwarden.breaker")
RULE: Final = Rule(name="breaker")

# Adds one answer to its bucket and returns the window's sums and the opening mark.
# KEYS: bucket, first failing, last failing, samples, opening mark.
# ARGV: class, ttl, operation id, sample, max samples, bucket key prefix, bucket index, buckets.
_RECORD = """
redis.call('HINCRBY', KEYS[1], 'answers', 1)
if ARGV[1] ~= 'ok' then
  redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  if ARGV[1] ~= 'rate_limited' then
    redis.call('SET', KEYS[2], ARGV[3], 'NX', 'EX', ARGV[2])
    redis.call('SET', KEYS[3], ARGV[3], 'EX', ARGV[2])
    if ARGV[4] ~= '' then
      redis.call('LPUSH', KEYS[4], ARGV[4])
      redis.call('LTRIM', KEYS[4], 0, tonumber(ARGV[5]) - 1)
      redis.call('EXPIRE', KEYS[4], ARGV[2])
    end
  end
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
local sums = {answers=0, server_error=0, transport=0, unknown_state=0, denied=0, rate_limited=0}
local now = tonumber(ARGV[7])
for i = now - tonumber(ARGV[8]) + 1, now do
  local h = redis.call('HGETALL', ARGV[6] .. i)
  for j = 1, #h, 2 do sums[h[j]] = (sums[h[j]] or 0) + tonumber(h[j + 1]) end
end
return {sums.answers, sums.server_error, sums.transport, sums.unknown_state, sums.denied,
        sums.rate_limited, redis.call('GET', KEYS[5]) or ''}
"""
_scripts: dict[int, Script] = {}
_FIELDS: Final = ("answers", "server_error", "transport", "unknown_state", "denied", "rate_limited")


def _key(prefix: str, provider: str, part: str) -> str:
    return f"{prefix}breaker:{provider}:{part}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Counted:
    counts: WindowCounts
    opening: bool  # the breaker is already open or opening


def _ttl(policy: Breaker) -> int:
    return int(policy.window_seconds + policy.cooldown_seconds) + 2


def record(  # noqa: PLR0913 - one answer's facts, each named at the one call
    rt: Runtime,
    policy: Breaker,
    provider: str,
    *,
    cls: AnswerClass,
    op_id: uuid.UUID,
    sample: str,
) -> Counted:
    """Count one answer (one Redis call) and read the window back."""
    size = pure.bucket_seconds(policy)
    index = int(utcnow().timestamp() // size)
    prefix = rt.settings.key_prefix
    buckets = _key(prefix, provider, "b:")
    script = _scripts.get(id(rt.redis))
    if script is None:
        # Registered once per client: the SHA is computed once, EVALSHA thereafter.
        script = _scripts[id(rt.redis)] = rt.redis.register_script(_RECORD)
    got = script(
        keys=[
            f"{buckets}{index}",
            _key(prefix, provider, "first"),
            _key(prefix, provider, "last"),
            _key(prefix, provider, "samples"),
            _key(prefix, provider, "opening"),
        ],
        client=rt.redis,
        args=[
            cls.value,
            _ttl(policy),
            str(op_id),
            sample,
            pure.MAX_SAMPLES,
            buckets,
            index,
            pure.WINDOW_BUCKETS,
        ],
    )
    counts = WindowCounts.from_mapping(dict(zip(_FIELDS, (int(v) for v in got[:6]), strict=True)))
    return Counted(counts=counts, opening=bool(got[6]))


def _scrubbed(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


def observe(  # noqa: PLR0913, PLR0917 - the step's state at the answer, named at the one call
    rt: Runtime,
    contract: ProviderContract,
    op: Operation,
    request: ProviderRequest,
    answer: RawResponse,
    decided: Decided,
) -> Decided:
    """The step's decision on a status answer, as the provider's breaker sees it.

    No ``[breaker]``: ``decided`` unchanged, no call. The half-open probe's answer is
    reported (and a failed one parks the probe again, uncounted); any other answer is
    counted, and a failing one while the breaker is open or opening is the incident's,
    never the operation's (``not_counted``).
    """
    policy = contract.breaker
    if policy is None or request.purpose is not RequestPurpose.status:
        return decided
    cls = pure.answer_class(answer.observation, decided)
    hold = op.hold
    if hold is not None and hold.probe == op.operation_id:
        ok = cls is AnswerClass.ok
        _send("jobwarden.breaker_probed", [op.provider, str(op.operation_id), ok], rt)
        return decided if ok else pure.not_counted(op, decided, utcnow(), wake=None)
    failing = cls in pure.FAILURES or cls is AnswerClass.rate_limited
    sample = (
        _scrubbed(pure.sample(answer.observation, cls, op.operation_id), secret_forms(contract))
        if cls in pure.FAILURES
        else ""
    )
    counted = record(rt, policy, op.provider, cls=cls, op_id=op.operation_id, sample=sample)
    opening = counted.opening
    if not opening and failing:
        why = pure.tripped(policy, counted.counts)
        if why is not None:
            opening = True
            if rt.redis.set(
                _key(rt.settings.key_prefix, op.provider, "opening"), "1", nx=True, ex=_ttl(policy)
            ):
                open_breaker(rt, op.provider, policy, why, counted.counts)
    if opening and failing:
        wake = utcnow() + timedelta(seconds=policy.cooldown_seconds)
        return pure.not_counted(op, decided, utcnow(), wake=wake)
    return decided


def _send(name: str, args: list[Any], rt: Runtime) -> None:
    try:
        app.send_task(name, args=args, queue=rt.settings.queue, retry=False, ignore_result=True)
    except Exception as exc:  # the sweeper takes a stale probe again; a lost park, the planner
        log.warning("breaker_enqueue_failed", task=name, error=type(exc).__name__)


def _evidence_parts(rt: Runtime, provider: str) -> tuple[str | None, str | None, list[str]]:
    prefix = rt.settings.key_prefix
    pipe = rt.redis.pipeline(transaction=False)
    pipe.get(_key(prefix, provider, "first"))
    pipe.get(_key(prefix, provider, "last"))
    pipe.lrange(_key(prefix, provider, "samples"), 0, pure.MAX_SAMPLES - 1)
    first, last, samples = pipe.execute()

    def text(v: Any) -> str:
        return v.decode() if isinstance(v, bytes) else str(v)

    return (
        text(first) if first is not None else None,
        text(last) if last is not None else None,
        [text(s) for s in samples],
    )


def open_breaker(
    rt: Runtime, provider: str, policy: Breaker, why: pure.Tripped, counts: WindowCounts
) -> Incident | None:
    """Pause ``provider`` by ``rule:breaker`` and record the incident, in one transaction;
    then ask for everything it covers to be parked. None when an incident is already open
    or a person's pause already holds the provider (then it is theirs to resume)."""
    from jobwarden.tasks.humans.pauses import tell  # noqa: PLC0415 - pauses imports the steps

    first, last, samples = _evidence_parts(rt, provider)
    seen = pure.evidence(
        policy, why, counts, first_failing=first, last_failing=last, samples=samples
    )
    now = utcnow()
    with transaction(rt.settings.database_url) as tx:
        pause, started = pause_store.start(
            tx,
            provider=provider,
            tenant=None,
            operation_id=None,
            reason=pure.describe(why, counts),
            evidence=seen,
            author=RULE.actor,
            author_kind="rule",
            now=now,
        )
        if not started and pause.author != RULE.actor:
            return None
        if started:
            # One notification per incident (per tenant it holds), never per operation.
            tell(tx, pause)
        incident = breaker_store.open_incident(
            tx,
            provider=provider,
            pause_id=pause.pause_id,
            reason=why.reason.value,
            evidence=seen,
            now=now,
            probe_due_at=pure.probe_at(now, policy),
        )
    if incident is None:
        return None
    log.warning(
        "breaker_opened",
        provider=provider,
        incident_id=str(incident.incident_id),
        pause_id=str(pause.pause_id),
        reason=why.reason.value,
        counts=counts.as_dict(),
        first_failing_operation=first,
        last_failing_operation=last,
    )
    _send("jobwarden.breaker_park", [provider], rt)
    return incident


def park_all(rt: Runtime, provider: str) -> int:
    """Park every operation the open incident's pause covers (pauses.park_covered)."""
    from jobwarden.tasks.humans.pauses import _writer, park_covered  # noqa: PLC0415 - a cycle

    with snapshot(rt.settings.database_url) as session:
        incident = breaker_store.active(session, provider)
        pause = pause_store.get(session, incident.pause_id) if incident is not None else None
    if pause is None or not pause.active:
        return 0
    return park_covered(rt, pause, _writer(rt, RULE.actor, None))


def probe_due(rt: Runtime) -> int:
    """Start the half-open probe of every incident whose cool-down ended (the sweeper calls
    this): claim it by a compare-and-set, then wake the one operation it names."""
    now = utcnow()
    started = 0
    with snapshot(rt.settings.database_url) as session:
        incidents = breaker_store.due(session, now, stale_before=now - _stale(rt))
    for incident in incidents:
        started += int(_probe(rt, incident, now))
    return started


def _stale(rt: Runtime) -> timedelta:
    """How long a probe may be out before another is started in its place."""
    return timedelta(seconds=max(rt.settings.lease_ttl_seconds * 2, 10.0))


def _probe(rt: Runtime, incident: Incident, now: datetime) -> bool:
    from jobwarden.tasks.dispatch import enqueue  # noqa: PLC0415 - dispatch imports pipeline
    from jobwarden.tasks.steps import Writer, under_lease  # noqa: PLC0415 - steps imports us

    with transaction(rt.settings.database_url) as tx:
        candidate = breaker_store.probe_candidate(tx, incident.pause_id)
        if candidate is None or not breaker_store.start_probe(
            tx, incident, candidate, now=now, stale_before=now - _stale(rt)
        ):
            return False

    def decide(op: Operation, at: datetime) -> Decided | None:
        return pure.probe_wake(op, incident.pause_id, incident.incident_id, at)

    try:
        written = under_lease(
            rt, candidate, decide, Writer(actor=RULE.actor, wait_seconds=2.0, lease_required=False)
        )
    except LostRaceError:
        written = None
    log.warning(
        "breaker_probe_started",
        provider=incident.provider,
        incident_id=str(incident.incident_id),
        operation_id=str(candidate),
    )
    if written is not None:
        enqueue(rt, candidate, written.stored.state)
    return True


def probed(rt: Runtime, provider: str, operation_id: uuid.UUID, ok: bool) -> str:
    """The probe's answer: success closes the incident and resumes the rest spread by the
    rate; failure re-arms the cool-down. Returns what happened."""
    with snapshot(rt.settings.database_url) as session:
        incident = breaker_store.active(session, provider)
    if incident is None or incident.probe_operation_id != operation_id:
        return "not_the_probe"
    contract = rt.contracts.get(provider)
    policy = contract.breaker if contract is not None else None
    if not ok:
        due = utcnow() + timedelta(seconds=policy.cooldown_seconds if policy else 60.0)
        with transaction(rt.settings.database_url) as tx:
            reopened = breaker_store.probe_failed(
                tx, incident.incident_id, operation_id, probe_due_at=due
            )
        log.warning("breaker_probe_failed", provider=provider, reopened=reopened)
        return "reopened" if reopened else "not_the_probe"
    closed = _close(rt, incident, RULE.actor, "the half-open probe succeeded", probe=operation_id)
    return "closed" if closed else "not_the_probe"


def _close(
    rt: Runtime, incident: Incident, by: str, note: str | None, *, probe: uuid.UUID | None = None
) -> bool:
    from jobwarden.tasks.humans.pauses import _writer, wake_parked  # noqa: PLC0415 - a cycle

    now = utcnow()
    with transaction(rt.settings.database_url) as tx:
        closed = breaker_store.close(
            tx, incident.incident_id, closed_by=by, note=note, now=now, probe=probe
        )
        if closed is None:
            return False
        ended = pause_store.end(tx, incident.pause_id, resumed_by=by, note=note, now=now)
        pause = ended or pause_store.get(tx, incident.pause_id)
    _forget_window(rt, incident.provider)
    woken = 0
    if pause is not None:
        woken = wake_parked(rt, pause, _writer(rt, by, None), by)
    log.warning(
        "breaker_closed",
        provider=incident.provider,
        incident_id=str(incident.incident_id),
        closed_by=by,
        woken=woken,
    )
    return True


def _forget_window(rt: Runtime, provider: str) -> None:
    """A closed breaker starts from an empty window: the outage's answers are its past."""
    prefix = rt.settings.key_prefix
    keys = [_key(prefix, provider, part) for part in ("first", "last", "samples", "opening")]
    contract = rt.contracts.get(provider)
    if contract is not None and contract.breaker is not None:
        size = pure.bucket_seconds(contract.breaker)
        index = int(utcnow().timestamp() // size)
        keys += [
            _key(prefix, provider, f"b:{i}") for i in range(index - pure.WINDOW_BUCKETS, index + 2)
        ]
    rt.redis.delete(*keys)


# --- what a person does: show, hold, close ------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class BreakerView:
    """A provider's breaker as the doors show it."""

    provider: str
    enabled: bool  # the contract has a [breaker] table
    state: str  # closed, open, probing, held
    incident: Incident | None  # the active one, else the newest closed one


def shown(view: BreakerView) -> dict[str, Any]:
    """The breaker as every door shows it (the HTTP answer has the same fields)."""
    found = view.incident
    return {
        "provider": view.provider,
        "enabled": view.enabled,
        "state": view.state,
        "incident": None
        if found is None
        else {
            "incident_id": str(found.incident_id),
            "pause_id": str(found.pause_id),
            "state": found.state.value,
            "reason": found.reason,
            "evidence": dict(found.evidence),
            "opened_at": found.opened_at.isoformat(),
            "probe_due_at": found.probe_due_at.isoformat(),
            "probe_operation_id": str(found.probe_operation_id)
            if found.probe_operation_id
            else None,
            "probes": found.probes,
            "held_by": found.held_by,
            "closed_at": found.closed_at.isoformat() if found.closed_at else None,
            "closed_by": found.closed_by,
        },
    }


def show(provider: str, *, runtime: Runtime | None = None) -> BreakerView:
    rt = runtime or current()
    contract = rt.contracts.get(provider)
    if contract is None:
        raise RefusedInputError(f"provider: no provider {provider!r}")
    with snapshot(rt.settings.database_url) as session:
        found = breaker_store.active(session, provider) or breaker_store.latest(session, provider)
    state = found.state.value if found is not None else "closed"
    return BreakerView(
        provider=provider, enabled=contract.breaker is not None, state=state, incident=found
    )


def open_incidents(*, runtime: Runtime | None = None) -> dict[str, Incident]:
    """The open incidents by provider (the console's providers page)."""
    rt = runtime or current()
    with snapshot(rt.settings.database_url) as session:
        return {i.provider: i for i in breaker_store.all_active(session)}


def _active(rt: Runtime, provider: str) -> Incident:
    if provider not in rt.contracts:
        raise RefusedInputError(f"provider: no provider {provider!r}")
    with snapshot(rt.settings.database_url) as session:
        found = breaker_store.active(session, provider)
    if found is None:
        raise RefusedInputError(f"provider: the breaker of {provider!r} is not open")
    return found


def hold(provider: str, by: Author | str, *, runtime: Runtime | None = None) -> Incident:
    """A person holds the open breaker: no probe until someone closes it."""
    rt = runtime or current()
    author = as_author(by, "held_by")
    incident = _active(rt, provider)
    with transaction(rt.settings.database_url) as tx:
        held = breaker_store.hold(tx, incident.incident_id, held_by=author.actor)
    if held is None:
        raise RefusedInputError(f"provider: the breaker of {provider!r} is not open")
    log.warning("breaker_held", provider=provider, actor=author.actor)
    return held


def close(
    provider: str, by: Author | str, note: str = "", *, runtime: Runtime | None = None
) -> Incident:
    """A person closes the breaker: the incident ends and its pause is resumed, the parked
    operations woken spread by the provider's rate."""
    rt = runtime or current()
    author = as_author(by, "closed_by")
    incident = _active(rt, provider)
    if not _close(rt, incident, author.actor, note.strip() or None):
        raise RefusedInputError(f"provider: the breaker of {provider!r} is not open")
    with snapshot(rt.settings.database_url) as session:
        done = breaker_store.get(session, incident.incident_id)
    assert done is not None
    return done
