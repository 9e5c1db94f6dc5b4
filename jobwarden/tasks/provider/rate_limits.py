"""The provider rate limiter: one token bucket per provider and credential, in Redis, shared
fairly between tenants.

Every worker process asks the same Redis keys before each request, so the limit
holds across all workers and hosts. The bucket is GCRA (the "theoretical
arrival time" form of a token bucket): one atomic Lua script per request, the time
read from Redis itself so workers' clocks need not agree. It is the hard bound. Beside
it each tenant asking in the recent window has a bucket of its own at its weighted
share of the rate, so a tenant with 50,000 queued operations cannot starve one with
ten; the arithmetic, the bound it keeps and its proof are in
``models/provider/fair_shares.py``, whose ``take`` this script mirrors statement for
statement (tests/integration/test_fair_shares.py runs both on the same asks).

A refused request is not queued: it learns when to ask again. Refused requests of one
tenant are spread one tenant interval apart, follow-ups (status, cancel, result,
reconciliation) ahead of new creates and, within each, higher priorities first; a
request yields its turn while a higher rank of its tenant has requests told to come, so a
crowd refused together does not come back together and be refused again (each refusal
is a recorded decision). A tenant under its share that another tenant beat to the token
holds the next one instead. The script also counts, per provider and tenant, the
tokens granted and the seconds refused requests were told to wait
(``share_counts``: the metrics' source).

If Redis loses the keys (a restart without persistence, a flush), the bucket
starts full again: at most ``burst`` requests more than the limit go out,
once (docs/scaling.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from redis import Redis

from jobwarden.models.contracts.contract import ProviderContract, RateLimit
from jobwarden.models.provider.fair_shares import (
    ACTIVE_INTERVALS,
    DEFAULT_PRIORITY,
    EPSILON,
    MIN_ACTIVE_SECONDS,
    rank,
    weight_of,
)
from jobwarden.models.provider.rate_limits import credential_reference
from jobwarden.tasks.runtime import script

# KEYS: 1 the global TAT; 2 the active tenants (zset: tenant -> active until); 3 their
# weights (hash); 4 this tenant's TAT; 5 this tenant's next slot by rank (hash); 6 the
# tokens held for tenants (hash: tenant -> "at rank"); 7 and 8 the granted and waited
# counters (hash: "provider:tenant"). ARGV: 1 interval (s), 2 burst, 3 now ('' = Redis
# TIME), 4 tenant, 5 rank, 6 weight, 7 the counters' field, 8 epsilon, 9 active
# intervals, 10 least active seconds. Returns {1, the grant's time} or {0, seconds to
# wait}; times travel as decimal strings (Lua numbers returned to Redis become integers).
_TAKE = """
local now
if ARGV[3] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) + tonumber(t[2]) / 1000000
else
  now = tonumber(ARGV[3])
end
local interval, burst = tonumber(ARGV[1]), tonumber(ARGV[2])
local tenant, rank, weight = ARGV[4], tonumber(ARGV[5]), tonumber(ARGV[6])
local eps = tonumber(ARGV[8])
-- Every key outlives the time it holds by a minute: a key that expired a moment early
-- would forget a tenant's turn (and tests move the clock, not Redis's expiry).
local LINGER = 60000
local function fmt(x) return string.format('%.6f', x) end
local function ms(x) return math.ceil(x * 1000) end
local function keep(key, ttl_ms)
  if redis.call('PTTL', key) < ttl_ms then redis.call('PEXPIRE', key, ttl_ms) end
end
local function waited(w)
  redis.call('HINCRBYFLOAT', KEYS[8], ARGV[7], fmt(w))
  return {0, fmt(w)}
end
local function granted(at)
  redis.call('HINCRBY', KEYS[7], ARGV[7], 1)
  return {1, fmt(at)}
end

-- Who is active, and this tenant's interval: the global one times W / w.
local gone = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(now))
if #gone > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. fmt(now))
  redis.call('HDEL', KEYS[3], unpack(gone))
end
redis.call('HSET', KEYS[3], tenant, weight)
local total = weight
local members = redis.call('ZRANGE', KEYS[2], 0, -1)
for _, m in ipairs(members) do
  if m ~= tenant then total = total + tonumber(redis.call('HGET', KEYS[3], m) or '0') end
end
local own = interval * total / weight
local until_ = now + math.max(tonumber(ARGV[10]), tonumber(ARGV[9]) * own)
redis.call('ZADD', KEYS[2], fmt(until_), tenant)
keep(KEYS[2], ms(until_ - now) + LINGER)
keep(KEYS[3], ms(until_ - now) + LINGER)

local tolerance = (burst - 1) * interval
local tat = tonumber(redis.call('GET', KEYS[1]) or '0')
if tat < now then tat = now end
local free_at = tat - tolerance
local ttat = tonumber(redis.call('GET', KEYS[4]) or '0')
if ttat < now then ttat = now end
local tfree = ttat - tolerance - own
local on_share = now + eps >= tfree

local function spend(new_tat)
  redis.call('SET', KEYS[1], fmt(new_tat), 'PX', ms(new_tat - now) + LINGER)
end
local function move_tenant(new_ttat)
  redis.call('SET', KEYS[4], fmt(new_ttat), 'PX', ms(new_ttat - now) + LINGER)
end
local function hold(at, r)
  spend(tat + interval)
  redis.call('HSET', KEYS[6], tenant, fmt(at) .. ' ' .. r)
  keep(KEYS[6], ms(at - now) + LINGER)
  return waited(at - now)
end

-- A higher rank of this tenant has a request told to come now or later: this one yields.
local slots = redis.call('HGETALL', KEYS[5])
local mine, ahead = 0, 0
for i = 1, #slots, 2 do
  local r, v = tonumber(slots[i]), tonumber(slots[i + 1])
  if r == rank then mine = v elseif r > rank and v > ahead then ahead = v end
end
local yields = ahead - own + eps >= now

local held_at, held_rank
local held = redis.call('HGET', KEYS[6], tenant)
if held then
  local sp = string.find(held, ' ')
  held_at, held_rank = tonumber(string.sub(held, 1, sp - 1)), tonumber(string.sub(held, sp + 1))
end
if yields then
  -- told a time behind the higher ranks, below
elseif held_at and now + eps >= held_at then
  if now < held_at + interval and rank >= held_rank then
    redis.call('HDEL', KEYS[6], tenant)
    return granted(held_at)
  end
  if now >= held_at + interval then
    redis.call('HDEL', KEYS[6], tenant)
    if now + eps >= free_at then
      spend(tat + interval)
      return granted(now)
    end
    return hold(free_at, rank)
  end
elseif on_share and now + eps >= free_at then
  spend(tat + interval)
  move_tenant(ttat + own)
  return granted(now)
elseif on_share and not held_at then
  move_tenant(ttat + own)
  return hold(free_at, rank)
elseif held_at and rank > held_rank then
  redis.call('HSET', KEYS[6], tenant, fmt(held_at) .. ' ' .. rank)
  return waited(held_at - now)
end
local slot = math.max(mine, ahead, free_at, tfree, now)
redis.call('HSET', KEYS[5], rank, fmt(slot + own))
keep(KEYS[5], ms(slot + own - now) + LINGER)
return waited(slot - now)
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


def take(  # noqa: PLR0913 - the request's facts, each named at the one call
    redis: Redis,
    prefix: str,
    contract: ProviderContract,
    *,
    tenant: str,
    priority: int = DEFAULT_PRIORITY,
    create: bool = False,
    now: float | None = None,
) -> Token:
    """Take one token for ``tenant``'s request to ``contract``'s provider, or say when to
    ask again.

    ``create``: the request starts new work, and waits behind refused follow-ups;
    ``priority``: the operation's, ordering its tenant's refused requests of one kind.
    Without a ``[rate_limit]`` every request is granted without a Redis call. ``now``
    (seconds) replaces Redis's clock, for tests only. Redis errors propagate: the
    step that asked fails and is counted, as when its lease could not be read.
    """
    limit = contract.rate_limit
    if limit is None:
        return GRANTED
    return take_from(
        redis,
        bucket_key(prefix, contract),
        limit,
        tenant=tenant,
        priority=priority,
        create=create,
        counted=(shares_key(prefix), contract.name),
        now=now,
    )


def shares_key(prefix: str) -> str:
    """The counters' hashes share this stem: ``:granted`` and ``:waited``."""
    return f"{prefix}:rate-shares"


def take_from(  # noqa: PLR0913 - the bucket and the request's facts, each named
    redis: Redis,
    key: str,
    limit: RateLimit,
    *,
    tenant: str = "",
    priority: int = DEFAULT_PRIORITY,
    create: bool = False,
    counted: tuple[str, str] | None = None,
    now: float | None = None,
) -> Token:
    """``take`` on the bucket at ``key``; ``counted``: the counters' stem and the provider
    they are counted under (None: under the bucket's own key)."""
    interval = 1.0 / limit.requests_per_second
    stem, provider = counted or (f"{key}:shares", "")
    granted, wait = script(redis, _TAKE)(  # wait: the grant's time when granted
        keys=[
            key,
            f"{key}:active",
            f"{key}:weights",
            f"{key}:tat:{tenant}",
            f"{key}:slots:{tenant}",
            f"{key}:held",
            f"{stem}:granted",
            f"{stem}:waited",
        ],
        args=[
            repr(interval),
            limit.burst,
            "" if now is None else repr(now),
            tenant,
            rank(follow_up=not create, priority=priority),
            weight_of(limit.tenant_weights, tenant),
            f"{provider}:{tenant}",
            repr(EPSILON),
            ACTIVE_INTERVALS,
            repr(MIN_ACTIVE_SECONDS),
        ],
    )
    if int(granted):
        return Token(granted=True, at=float(wait))
    return Token(granted=False, retry_after=float(wait))


def share_counts(redis: Redis, prefix: str) -> dict[tuple[str, str], tuple[int, float]]:
    """Per (provider, tenant): tokens granted, and seconds refused requests were told to wait."""
    stem = shares_key(prefix)
    counts: dict[tuple[str, str], tuple[int, float]] = {}
    granted = redis.hgetall(f"{stem}:granted")
    waited = redis.hgetall(f"{stem}:waited")
    for field in set(granted) | set(waited):
        text = field.decode() if isinstance(field, bytes) else field
        provider, _, tenant = text.partition(":")
        counts[(provider, tenant)] = (
            int(granted.get(field, 0)),
            float(waited.get(field, 0.0)),
        )
    return counts
