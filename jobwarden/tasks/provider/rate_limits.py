"""The provider rate limiter: one token bucket per provider and credential, in Redis.

Every worker process asks the same Redis key before each request, so the limit
holds across all workers and hosts. The bucket is GCRA (the "theoretical
arrival time" form of a token bucket): one key per bucket, one atomic Lua
script per request, the time read from Redis itself so workers' clocks need not
agree. A refused request is not queued: it learns when to ask again, and refused
requests are spread one emission interval apart behind the next free token, so
a crowd that was refused together does not come back together and be refused
again (each refusal is a recorded decision, and a herd would cost one per
operation per token). Requests about work already started (status, cancel,
result, reconciliation) are spread ahead of new creates: a provider's backlog of
creates must not keep running jobs from being observed, cancelled or collected,
and a create told a time that a follow-up then took simply asks again.

If Redis loses the keys (a restart without persistence, a flush), the bucket
starts full again: at most ``burst`` requests more than the limit go out,
once (docs/scaling.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis

from jobwarden.models.contracts.contract import ProviderContract, RateLimit
from jobwarden.models.provider.rate_limits import credential_reference

# KEYS[1]: the bucket's theoretical arrival time (TAT); KEYS[2] and KEYS[3]: the next retry
# slot handed to a refused follow-up request and to a refused create. ARGV: emission
# interval (s), burst, now (s, '' = Redis TIME), '1' for a create. Returns {1, the grant's
# time} or {0, seconds to wait}. Times travel as decimal strings: Lua numbers returned to
# Redis become integers.
_TAKE = """
local now
if ARGV[3] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
else
  now = tonumber(ARGV[3])
end
local interval = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local free_at = tat - (burst - 1) * interval
if now >= free_at then
  local new_tat = tat + interval
  redis.call('SET', KEYS[1], string.format('%.6f', new_tat),
             'PX', math.ceil((new_tat - now) * 1000) + 1000)
  return {1, string.format('%.6f', now)}
end
local follow = tonumber(redis.call('GET', KEYS[2]) or '0')
if follow < free_at then follow = free_at end
local key, slot = KEYS[2], follow
if ARGV[4] == '1' then
  key, slot = KEYS[3], tonumber(redis.call('GET', KEYS[3]) or '0')
  if slot < follow then slot = follow end
end
redis.call('SET', key, string.format('%.6f', slot + interval),
           'PX', math.ceil((slot + interval - now) * 1000) + 1000)
return {0, string.format('%.6f', slot - now)}
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class Token:
    """The limiter's answer: ``granted`` (``at``: when, on the limiter's clock, Unix
    seconds; None without a limit), or ask again in ``retry_after`` seconds."""

    granted: bool
    retry_after: float = 0.0
    at: float | None = None


GRANTED = Token(granted=True)


def bucket_key(prefix: str, contract: ProviderContract) -> str:
    auth = contract.auth
    credential = credential_reference(
        auth.secret_env if auth else None, auth.secret_file if auth else None
    )
    return f"{prefix}:rate:{contract.name}:{credential}"


def take(
    redis: Redis,
    prefix: str,
    contract: ProviderContract,
    *,
    create: bool = False,
    now: float | None = None,
) -> Token:
    """Take one token for a request to ``contract``'s provider, or say when to ask again.

    ``create``: the request starts new work, and waits behind refused follow-ups.
    Without a ``[rate_limit]`` every request is granted without a Redis call. ``now``
    (seconds) replaces Redis's clock, for tests only. Redis errors propagate: the
    step that asked fails and is counted, as when its lease could not be read.
    """
    limit = contract.rate_limit
    if limit is None:
        return GRANTED
    return take_from(redis, bucket_key(prefix, contract), limit, create=create, now=now)


def take_from(
    redis: Redis, key: str, limit: RateLimit, *, create: bool = False, now: float | None = None
) -> Token:
    script = redis.register_script(_TAKE)
    interval = 1.0 / limit.requests_per_second
    granted, wait = script(  # wait: the grant's time when granted
        keys=[key, f"{key}:retry", f"{key}:retry-create"],
        args=[repr(interval), limit.burst, "" if now is None else repr(now), int(create)],
    )
    if int(granted):
        return Token(granted=True, at=float(wait))
    return Token(granted=False, retry_after=float(wait))
