"""Fair shares at a provider's rate limit: tenant weights, priorities, and the slot arithmetic.

The shared limiter (``tasks/provider/rate_limits.py``) keeps one GCRA bucket per provider
and credential as the hard bound. Alone it serves whoever asks most often: a tenant with
50,000 queued operations would take nearly every token and one with ten would wait behind
them. So each tenant asking in the recent window also has a GCRA bucket of its own, its
emission interval the global one times ``W / w`` (``w`` its weight from ``[rate_limit]
tenant_weights``, default 1; ``W`` the sum of the weights of the tenants active now). A
request is granted only when both buckets allow it. Within a tenant, requests are ranked:
follow-ups (status, cancel, result, reconciliation) before creates, then by the
operation's ``priority`` (higher first). Refused requests of one rank are told times one
tenant interval apart behind the ranks above them, and a request yields its turn while a
higher rank of its tenant has a request told to come now or later (it is then told a time
behind them all), so a higher rank's requests take the tenant's turns first.

A tenant under its share that finds the global token taken (by another tenant's request
at the same moment) reserves the next global token instead of queueing behind everyone:
the token is spent at once on the global bucket, the tenant's own bucket moves on as if
granted, and the tenant's next request at or after that time (within one interval) takes
it. A tenant holds at most one reservation, so the hard bound is never exceeded and
tenants whose slots fall on the same instants cannot lock one another out.

The bound (docs/scaling.md, "Fair shares"). Let ``R`` be the rate, ``b`` the burst and
``L`` a window during which the set of active tenants and their weights stay the same and
tenant ``t`` always has a request asking at its own free time. Then ``t`` is granted at
least ``floor(L * R * w / W) - b`` requests in the window, and all tenants together at
most ``L * R + b`` (the global bucket alone). Proof sketch: ``t``'s bucket moves on by
``W / (w R)`` per grant or reservation, from the time of the ask, so asking at each free
time it is granted or reserves once per interval; a reservation is always the next
global token, and since the others' buckets together emit at ``(W - w) / W`` of the rate,
the global bucket always has that token within the interval; the burst is the only slack
(at the window's start ``t``'s bucket may be up to ``b - 1`` intervals ahead, and one
interval may be cut by the window's end). So a tenant with weight ``w`` among ``W`` gets
at least ``w / W`` of the rate minus one slot per window with the default burst of 1.

This module is the arithmetic, pure and on an injected clock: ``take`` over a
``FairState`` is exactly what the Lua script does over its Redis keys, and the tests run
both on the same asks (tests/integration/test_fair_shares.py). The contract values and
the submission's ``priority`` rule are here too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Final

from jobwarden.models.contracts.fields import problem, toml_type
from jobwarden.models.errors import InvalidSubmissionError

# Priorities: a small closed range, so a tenant's ranks fit in one small Redis hash and a
# typo (1000 for 10) is refused rather than silently outranking everything.
MIN_PRIORITY: Final = -10
MAX_PRIORITY: Final = 10
DEFAULT_PRIORITY: Final = 0
# A weight beyond this is a typo: 1000:1 already means the small tenant waits a thousand
# turns.
MAX_WEIGHT: Final = 1000
DEFAULT_WEIGHT: Final = 1
# How long a tenant counts as active after it last asked: this many of its own intervals,
# and at least MIN_ACTIVE_SECONDS. A tenant whose refused requests come back one interval
# apart therefore stays in W while it has work waiting, and one that went quiet leaves
# its share to the others after a few turns.
ACTIVE_INTERVALS: Final = 4
MIN_ACTIVE_SECONDS: Final = 1.0
# Ranks: follow-ups above every create; within a kind, the priority.
_RANKS_PER_KIND: Final = MAX_PRIORITY - MIN_PRIORITY + 1
# Times are kept to the microsecond (the script stores them as decimal strings), so a
# request back exactly at its time may read a hair early: within EPSILON it is on time.
EPSILON: Final = 1e-6


def check_priority(value: object) -> int:
    """A submission's priority: a whole number from MIN_PRIORITY to MAX_PRIORITY; None is
    the default (0). Raises InvalidSubmissionError naming ``priority``."""
    if value is None:
        return DEFAULT_PRIORITY
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidSubmissionError(f"priority must be a whole number, got {type(value).__name__}")
    if not MIN_PRIORITY <= value <= MAX_PRIORITY:
        raise InvalidSubmissionError(
            f"priority must be from {MIN_PRIORITY} to {MAX_PRIORITY}, got {value}"
        )
    return int(value)


def check_tenant_weights(value: object) -> dict[str, int]:
    """``[rate_limit] tenant_weights``: a table of tenant name to a whole weight from 1 to
    MAX_WEIGHT. Tenants left out weigh DEFAULT_WEIGHT."""
    if not isinstance(value, dict):
        raise problem(f"must be a table of tenant = weight, got {toml_type(value)}")
    for tenant, weight in value.items():
        if not tenant.strip():
            raise problem("a tenant name must not be blank", field=repr(tenant))
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise problem(f"must be a whole number, got {toml_type(weight)}", field=tenant)
        if not 1 <= weight <= MAX_WEIGHT:
            raise problem(f"must be from 1 to {MAX_WEIGHT}, got {weight}", field=tenant)
    return dict(value)


TENANT_WEIGHTS_SCHEMA: Final[Mapping[str, object]] = {
    "type": "object",
    "additionalProperties": {"type": "integer", "minimum": 1, "maximum": MAX_WEIGHT},
}


def weight_of(weights: Mapping[str, int], tenant: str) -> int:
    return weights.get(tenant, DEFAULT_WEIGHT)


def rank(*, follow_up: bool, priority: int) -> int:
    """A request's rank within its tenant: follow-ups above creates, then priority."""
    return (_RANKS_PER_KIND if follow_up else 0) + (priority - MIN_PRIORITY)


def share_bound(
    *, weight: int, active_weights: Sequence[int], rate: float, burst: int, seconds: float
) -> int:
    """The fewest grants a tenant of ``weight`` asking throughout a window of ``seconds``
    receives while the tenants of ``active_weights`` (itself included) are active: its share
    ``seconds * rate * weight / W`` less ``burst + 1`` turns per active tenant (see the
    module docstring)."""
    share = seconds * rate * weight / sum(active_weights)
    return max(0, math.floor(share + 1e-9) - (burst + 1) * len(active_weights))


@dataclass(frozen=True, slots=True, kw_only=True)
class Ask:
    """One request asking for a token: whose, of which rank, with which weight."""

    tenant: str
    rank: int
    weight: int = DEFAULT_WEIGHT


@dataclass(frozen=True, slots=True, kw_only=True)
class Answer:
    """``granted`` (``at``: the time of the token it was granted, which for a reserved one
    is when it was held from), or come back in ``wait`` seconds (``reserved``: a token is
    held for this tenant then)."""

    granted: bool
    wait: float = 0.0
    at: float | None = None
    reserved: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Held:
    """A global token held for a tenant: from when, and the highest rank told to take it."""

    at: float
    rank: int


@dataclass(frozen=True, slots=True, kw_only=True)
class FairState:
    """What the Redis keys of one bucket hold (times in seconds on the limiter's clock)."""

    tat: float = 0.0  # the global bucket's theoretical arrival time
    active: Mapping[str, float] = field(default_factory=dict)  # tenant -> active until
    weights: Mapping[str, int] = field(default_factory=dict)  # tenant -> weight
    tenant_tat: Mapping[str, float] = field(default_factory=dict)
    slots: Mapping[tuple[str, int], float] = field(default_factory=dict)  # next slot by rank
    held: Mapping[str, Held] = field(default_factory=dict)


def take(
    state: FairState, ask: Ask, *, interval: float, burst: int, now: float
) -> tuple[FairState, Answer]:
    """The limiter's answer to ``ask`` at ``now`` and the state after it (the Lua script's
    twin, statement for statement: keep the two in step)."""
    tolerance = (burst - 1) * interval
    t = ask.tenant
    active = {k: v for k, v in state.active.items() if v >= now}
    weights = {k: v for k, v in state.weights.items() if k in active}
    weights[t] = ask.weight
    own = interval * sum(weights.values()) / ask.weight
    active[t] = now + max(MIN_ACTIVE_SECONDS, ACTIVE_INTERVALS * own)
    state = replace(state, active=active, weights=weights)

    tat = max(state.tat, now)
    free_at = tat - tolerance
    ttat = max(state.tenant_tat.get(t, 0.0), now)
    # One turn of slack on the tenant's own bucket: its refused requests were told times
    # at the interval of when they asked, and W (so the interval) may have changed since.
    on_share = now + EPSILON >= ttat - tolerance - own
    mine = state.slots.get((t, ask.rank), 0.0)
    ahead = max((v for (k, r), v in state.slots.items() if k == t and r > ask.rank), default=0.0)
    # A higher rank of this tenant has a request told to come now or later: this one yields
    # its turn to it (and is told a time behind them all, below).
    yields = ahead - own + EPSILON >= now
    held = state.held.get(t)
    others = {k: v for k, v in state.held.items() if k != t}
    if yields:
        pass
    elif held is not None and now + EPSILON >= held.at:
        if now < held.at + interval and ask.rank >= held.rank:
            # The token was spent on the global bucket when it was held.
            return replace(state, held=others), Answer(granted=True, at=held.at)
        if now >= held.at + interval:
            # Back too late for it (the held token lapsed, unused): the tenant's own
            # bucket already moved on for this turn, so it takes the next global token.
            state = replace(state, held=others)
            if now + EPSILON >= free_at:
                return replace(state, tat=tat + interval), Answer(granted=True, at=now)
            return _hold(
                state, t, rank=ask.rank, tat=tat, free_at=free_at, now=now, interval=interval
            )
    elif on_share and now + EPSILON >= free_at:
        tenant_tat = {**state.tenant_tat, t: ttat + own}
        return replace(state, tat=tat + interval, tenant_tat=tenant_tat), Answer(
            granted=True, at=now
        )
    elif on_share and held is None:
        # Under its share, beaten to the global token: hold the next one for this tenant.
        state = replace(state, tenant_tat={**state.tenant_tat, t: ttat + own})
        return _hold(state, t, rank=ask.rank, tat=tat, free_at=free_at, now=now, interval=interval)
    elif held is not None and ask.rank > held.rank:
        # A higher rank than the one told to take the held token: it is this one's now.
        return replace(state, held={**others, t: Held(at=held.at, rank=ask.rank)}), Answer(
            granted=False, wait=held.at - now
        )
    slot = max(mine, ahead, free_at, ttat - tolerance - own, now)
    slots = {**state.slots, (t, ask.rank): slot + own}
    return replace(state, slots=slots), Answer(granted=False, wait=slot - now)


def _hold(  # noqa: PLR0913 - the script's values at this point, each named
    state: FairState,
    tenant: str,
    *,
    rank: int,
    tat: float,
    free_at: float,
    now: float,
    interval: float,
) -> tuple[FairState, Answer]:
    """Spend the next global token now, held for ``tenant`` from ``free_at``."""
    after = replace(
        state, tat=tat + interval, held={**state.held, tenant: Held(at=free_at, rank=rank)}
    )
    return after, Answer(granted=False, wait=free_at - now, reserved=True)
