"""Each tenant's waiting wake-ups at a rate-limited provider, counted in Redis: the backlog
that places a wake-up at its priority level in the broker (models/provider/wakeup_levels.py).

A wake-up is counted when it is published (one Redis round trip for a message, one
pipeline for a sweep's batch) and uncounted when a worker starts it: the message carries
its counter's key in a header, so the task uncounts it before anything else, even when
the step then finds the lease busy or the row gone. The count is an ordering hint, never
a fact an outcome depends on (the row decides what is due): a message the broker lost
leaves it one too high until the key expires (``BACKLOG_TTL_SECONDS`` after its tenant's
last wake-up there), a redelivered one is uncounted twice and the count stops at zero.
Redis errors here are logged and the wake-up goes out at level 0, as before.

Operations at a provider without ``[rate_limit]`` are neither counted nor placed: their
wake-ups go out at level 0 and cost no extra round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from jobwarden.models.operation import Operation
from jobwarden.models.provider.fair_shares import DEFAULT_PRIORITY, weight_of
from jobwarden.models.provider.wakeup_levels import level
from jobwarden.observability.logs import get_logger
from jobwarden.tasks.runtime import Runtime, script

log = get_logger("jobwarden.tasks")

# The message header carrying the counter's key: the task uncounts it when it starts.
HEADER = "jobwarden_backlog"
# A counter outlives its tenant's last wake-up at the provider by this long: longer than
# any wait a worker holds as a countdown, so it only forgets a tenant gone quiet (and
# with it a count a lost message left too high).
BACKLOG_TTL_SECONDS = 3600

# KEYS[1] the counter. Down by one, never below zero (a redelivered message is started
# twice); returns the count left.
_UNCOUNT = """
local n = redis.call('DECR', KEYS[1])
if n < 0 then
  redis.call('SET', KEYS[1], 0, 'KEEPTTL')
  return 0
end
return n
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Owner:
    """Whose wake-up a message is: what places it in the broker."""

    provider: str
    tenant: str
    priority: int = DEFAULT_PRIORITY


def owner_of(op: Operation) -> Owner:
    return Owner(provider=op.provider, tenant=op.tenant, priority=op.priority)


@dataclass(frozen=True, slots=True, kw_only=True)
class Place:
    """Where a wake-up goes: its broker priority level, and the counter it was counted in
    (None: not counted, nothing to uncount)."""

    level: int = 0
    counter: str | None = None

    def headers(self) -> dict[str, str] | None:
        return {HEADER: self.counter} if self.counter is not None else None


FRONT = Place()


def counter_key(prefix: str, owner: Owner) -> str:
    return f"{prefix}:wakeups:{owner.provider}:{owner.tenant}"


def placed(rt: Runtime, owners: Sequence[Owner | None]) -> list[Place]:
    """Count each owned wake-up about to be published, in order, and say where it goes.

    One pipeline for all of them; an owner whose provider has no ``[rate_limit]`` (or
    none: an unknown owner) stays at the front uncounted. On a Redis error every one goes
    to the front uncounted (the publish itself will likely fail too, and the sweeper
    re-sends)."""
    places = [FRONT] * len(owners)
    counted: list[tuple[int, Owner, int, str]] = []
    for i, owner in enumerate(owners):
        contract = rt.contracts.get(owner.provider) if owner is not None else None
        if owner is None or contract is None or contract.rate_limit is None:
            continue
        weight = weight_of(contract.rate_limit.tenant_weights, owner.tenant)
        counted.append((i, owner, weight, counter_key(rt.settings.key_prefix, owner)))
    if not counted:
        return places
    try:
        with rt.redis.pipeline(transaction=False) as pipe:
            for _, _, _, key in counted:
                pipe.incr(key)
                pipe.expire(key, BACKLOG_TTL_SECONDS)
            answers = pipe.execute()
    except Exception as exc:
        log.warning("wakeup_backlog_unavailable", error=type(exc).__name__)
        return places
    for (i, owner, weight, key), waiting in zip(counted, answers[::2], strict=True):
        places[i] = Place(
            level=level(int(waiting), weight=weight, priority=owner.priority), counter=key
        )
    return places


def uncounted(rt: Runtime, places: Sequence[Place]) -> None:
    """Take back the counts of wake-ups that were not published after all."""
    for p in places:
        if p.counter is not None:
            started(rt, p.counter)


def started(rt: Runtime, counter: object) -> None:
    """A worker started the wake-up counted in ``counter`` (its message header): uncount it.
    Anything but a key of ours (a header from elsewhere) is ignored."""
    prefix = f"{rt.settings.key_prefix}:wakeups:"
    if not isinstance(counter, str) or not counter.startswith(prefix):
        return
    try:
        script(rt.redis, _UNCOUNT)(keys=[counter])
    except Exception as exc:
        log.warning("wakeup_backlog_unavailable", error=type(exc).__name__)
