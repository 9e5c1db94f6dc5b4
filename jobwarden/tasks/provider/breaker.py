"""The provider breaker's hot half: count each status answer, and open as one pause.

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

The probe's answer is reported here too (to ``jobwarden.breaker_probed``); the half-open
probing, the close and a person's show, hold and close are in tasks/humans/breakers.py,
apart from this module because they drive operations through the steps that import it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from redis.commands.core import Script

from jobwarden.config.celery_app import app
from jobwarden.models.actions import Decided, ProviderRequest, RequestPurpose
from jobwarden.models.contracts.contract import Breaker, ProviderContract
from jobwarden.models.humans.pauses import Rule
from jobwarden.models.operation import Operation
from jobwarden.models.persistence import breaker_store, pause_store
from jobwarden.models.persistence.breaker_store import Incident
from jobwarden.models.persistence.db import transaction
from jobwarden.models.provider import breaker as pure
from jobwarden.models.provider.breaker import AnswerClass, WindowCounts
from jobwarden.models.provider.signals import RawResponse
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.provider.edge import secret_forms
from jobwarden.tasks.runtime import Runtime, utcnow

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
            pause_store.tell(tx, pause)
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
